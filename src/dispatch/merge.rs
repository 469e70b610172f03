//! A worker's batch: the requests that queued up while it was busy, grouped by operation (equal
//! `Op`s, as `Op::merge_key` gives them) and run as one blocking call per group (the gets of a hundred tasks become one `get_multi`), then each
//! request's share of the outcome handed to its `Done`. Grouping by operation changes the order in
//! which requests run, so the asyncio client never has two requests of one key in flight that
//! conflict (`py::aio::order`, `Access::conflicts`): no order within a batch is observable.
//!
//! Uses `request` (requests, outcomes) and the blocking `Client`; no threads of its own.

use std::collections::HashSet;

use super::request::{execute_merged, Request};
use super::{Done, Job};
use crate::client::op::Op;
use crate::client::Client;

/// What a request may share one blocking call with (`None`: it runs alone, as one placed by a
/// group key does).
fn kind(req: &Request) -> Option<&Op> {
    req.op.merge_key().filter(|_| req.route.is_none())
}

/// Run a worker's batch: every job's `Done` is called (or dropped, which reports it lost).
pub(super) fn run(client: &Client, jobs: Vec<Job>) {
    if jobs.len() == 1 {
        for job in jobs {
            let out = job.req.execute(client);
            job.done.call(out);
        }
        return;
    }
    let assign = groups(jobs.iter().map(|j| &j.req));
    let n_groups = assign.iter().max().map_or(0, |g| g + 1);
    let mut groups: Vec<Vec<Job>> = (0..n_groups).map(|_| Vec::new()).collect();
    for (job, g) in jobs.into_iter().zip(assign) {
        groups[g].push(job);
    }
    for group in groups {
        run_group(client, group);
    }
}

/// Which group each request joins: the first of its kind, except that two requests of one key
/// stay in separate calls when the operation says so (`Op::keys_apart`: a read-back after an
/// ambiguous quiet write compares what the server holds with what was sent, once per key).
fn groups<'r>(reqs: impl Iterator<Item = &'r Request>) -> Vec<usize> {
    let mut kinds: Vec<Option<&Op>> = Vec::new();
    let mut apart_keys: Vec<HashSet<&[u8]>> = Vec::new();
    let mut assign = Vec::new();
    for req in reqs {
        let k = kind(req);
        let keys = req.keys();
        let apart = req.op.keys_apart();
        let fits = |g: usize, kinds: &[Option<&Op>], sk: &[HashSet<&[u8]>]| {
            kinds[g] == k
                && k.is_some()
                && !(apart
                    && keys.is_some_and(|ks| (0..ks.len()).any(|i| sk[g].contains(ks.get(i)))))
        };
        let g = match (0..kinds.len()).find(|&g| fits(g, &kinds, &apart_keys)) {
            Some(g) => g,
            None => {
                kinds.push(k);
                apart_keys.push(HashSet::new());
                kinds.len() - 1
            }
        };
        if apart {
            if let Some(ks) = keys {
                apart_keys[g].extend((0..ks.len()).map(|i| ks.get(i)));
            }
        }
        assign.push(g);
    }
    assign
}

fn run_group(client: &Client, group: Vec<Job>) {
    if group.len() == 1 {
        return run(client, group);
    }
    let (reqs, dones): (Vec<Request>, Vec<Done>) =
        group.into_iter().map(|j| (j.req, j.done)).unzip();
    // A request that runs alone is never grouped: `run` gives it a group of its own.
    for (out, done) in execute_merged(client, &reqs).into_iter().zip(dones) {
        done.call(out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::request::{Items, Request};
    use super::groups;
    use crate::client::keys::Keys;
    use crate::client::op::admin::Stats;
    use crate::client::op::{
        delete::Delete,
        get::Get,
        meta::{Meta, MetaVerb},
        store::Store,
    };
    use crate::protocol::StoreCmd;
    use crate::protocol::StoreItem;

    fn get(cas: bool, touch: Option<u32>, key: &[u8]) -> Request {
        Request::new(Get { cas, touch }, Keys::of(&[key]))
    }

    fn set(key: &[u8]) -> Request {
        let mut items = Items::with_capacity(1, key.len(), 1);
        items.push(&StoreItem {
            key,
            flags: 0,
            exptime: 0,
            data: b"v",
            cas: 0,
        });
        let op = Store {
            cmd: StoreCmd::Set,
            noreply: false,
        };
        Request::items(op, items)
    }

    fn meta(verb: MetaVerb, flags: &[u8], key: &[u8]) -> Request {
        let op = Meta {
            verb,
            flags: flags.into(),
        };
        Request::new(op, Keys::of(&[key]))
    }

    #[test]
    fn requests_of_equal_operations_share_a_call() {
        let reqs = [
            get(false, None, b"a"),
            get(true, None, b"b"),
            get(false, None, b"c"),
            Request::new(Delete { noreply: false }, Keys::of(&[b"a"])),
            Request::new(Delete { noreply: true }, Keys::of(&[b"b"])),
            get(true, None, b"d"),
            meta(MetaVerb::Get, b"v N30", b"a"),
            meta(MetaVerb::Get, b"v N30", b"b"),
            meta(MetaVerb::Get, b"v N60", b"c"),
        ];
        assert_eq!(groups(reqs.iter()), [0, 1, 0, 2, 3, 1, 4, 4, 5]);
    }

    #[test]
    fn gat_and_admin_run_alone_and_stores_of_one_key_apart() {
        let reqs = [
            get(false, Some(5), b"a"),
            get(false, Some(5), b"b"),
            Request::whole(Stats {
                args: Box::default(),
            }),
            Request::whole(Stats {
                args: Box::default(),
            }),
            set(b"k"),
            set(b"j"),
            set(b"k"),
            set(b"k"),
        ];
        assert_eq!(groups(reqs.iter()), [0, 1, 2, 3, 4, 4, 5, 6]);
    }
}
