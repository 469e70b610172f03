//! A worker's batch: the requests that queued up while it was busy, grouped by kind and run as
//! one blocking call per group (the gets of a hundred tasks become one `get_multi`), then each
//! request's share of the outcome handed to its `Done`. Grouping by kind changes the order in
//! which requests run, so the asyncio client never has two requests of one key in flight when
//! either writes (`py::aio::order`): the requests of one batch share no written key.
//!
//! Uses `request` (requests, outcomes) and the blocking `Client`; no threads of its own.

use std::collections::{HashMap, HashSet};

use super::request::{Items, Keys, Outcome, Request};
use super::{Done, Job};
use crate::client::{Client, StoreItem};
use crate::error::Result;
use crate::protocol::StoreCmd;

/// Requests that may share one blocking call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind<'a> {
    Get(bool),
    Store(StoreCmd, bool),
    Delete(bool),
    Arith(bool, u64),
    Touch(u32, bool),
    /// A meta command and its flags (the lease reads of many tasks share them).
    Meta(&'a [u8], &'a [u8]),
    Alone,
}

fn kind(req: &Request) -> Kind<'_> {
    match req {
        Request::Get { cas, .. } => Kind::Get(*cas),
        Request::Store { cmd, noreply, .. } => Kind::Store(*cmd, *noreply),
        Request::Delete { noreply, .. } => Kind::Delete(*noreply),
        Request::Arith { incr, delta, .. } => Kind::Arith(*incr, *delta),
        Request::Touch {
            exptime, noreply, ..
        } => Kind::Touch(*exptime, *noreply),
        Request::Meta { verb, flags, .. } => Kind::Meta(verb, flags),
        Request::Flush { .. } | Request::Stats { .. } | Request::Gat { .. } => Kind::Alone,
    }
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
    // Which group each job joins: the first of its kind, except that two stores of one key
    // stay in separate calls (a read-back after an ambiguous quiet write compares what the
    // server holds with what was sent, once per key).
    let mut kinds: Vec<Kind> = Vec::new();
    let mut store_keys: Vec<HashSet<&[u8]>> = Vec::new();
    let mut assign = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let k = kind(&job.req);
        let keys = job.req.keys();
        let fits = |g: usize, kinds: &[Kind], sk: &[HashSet<&[u8]>]| {
            kinds[g] == k
                && k != Kind::Alone
                && !(matches!(k, Kind::Store(..))
                    && keys.is_some_and(|ks| (0..ks.len()).any(|i| sk[g].contains(ks.get(i)))))
        };
        let g = match (0..kinds.len()).find(|&g| fits(g, &kinds, &store_keys)) {
            Some(g) => g,
            None => {
                kinds.push(k);
                store_keys.push(HashSet::new());
                kinds.len() - 1
            }
        };
        if matches!(k, Kind::Store(..)) {
            if let Some(ks) = keys {
                store_keys[g].extend((0..ks.len()).map(|i| ks.get(i)));
            }
        }
        assign.push(g);
    }
    drop(store_keys);
    drop(kinds);
    let n_groups = assign.iter().max().map_or(0, |g| g + 1);
    let mut groups: Vec<Vec<Job>> = (0..n_groups).map(|_| Vec::new()).collect();
    for (job, g) in jobs.into_iter().zip(assign) {
        groups[g].push(job);
    }
    for group in groups {
        run_group(client, group);
    }
}

fn run_group(client: &Client, group: Vec<Job>) {
    if group.len() == 1 {
        return run(client, group);
    }
    let (reqs, dones): (Vec<Request>, Vec<Done>) =
        group.into_iter().map(|j| (j.req, j.done)).unzip();
    match &reqs[0] {
        Request::Get { cas, .. } => {
            let keys: Vec<&Keys> = reqs.iter().filter_map(Request::keys).collect();
            gets(client, *cas, &keys, dones);
        }
        Request::Store { cmd, noreply, .. } => {
            let items: Vec<&Items> = reqs
                .iter()
                .filter_map(|r| match r {
                    Request::Store { items, .. } => Some(items),
                    _ => None,
                })
                .collect();
            let all: Vec<StoreItem<'_>> = items
                .iter()
                .flat_map(|it| (0..it.len()).map(|i| it.get(i)))
                .collect();
            let lens = items.iter().map(|it| it.len());
            split(
                client.store_multi(*cmd, &all, *noreply),
                lens,
                dones,
                Outcome::Stored,
            );
        }
        Request::Delete { noreply, .. } => {
            let (refs, lens) = concat(&reqs);
            split(
                client.delete_multi(&refs, *noreply),
                lens,
                dones,
                Outcome::Found,
            );
        }
        Request::Arith { incr, delta, .. } => {
            let (refs, lens) = concat(&reqs);
            split(
                client.arith_multi(*incr, &refs, *delta),
                lens,
                dones,
                Outcome::Numbers,
            );
        }
        Request::Touch {
            exptime, noreply, ..
        } => {
            let (refs, lens) = concat(&reqs);
            split(
                client.touch_multi(&refs, *exptime, *noreply),
                lens,
                dones,
                Outcome::Found,
            );
        }
        Request::Meta { verb, flags, .. } => {
            let (refs, lens) = concat(&reqs);
            split(
                client.meta_command(verb, &refs, flags),
                lens,
                dones,
                Outcome::Meta,
            );
        }
        // Never grouped (`Kind::Alone`).
        Request::Flush { .. } | Request::Stats { .. } | Request::Gat { .. } => {
            for (req, done) in reqs.into_iter().zip(dones) {
                done.call(req.execute(client));
            }
        }
    }
}

/// Every request's keys in one list, and how many each contributed.
fn concat(reqs: &[Request]) -> (Vec<&[u8]>, Vec<usize>) {
    let mut refs = Vec::new();
    let mut lens = Vec::with_capacity(reqs.len());
    for keys in reqs.iter().filter_map(Request::keys) {
        refs.extend((0..keys.len()).map(|i| keys.get(i)));
        lens.push(keys.len());
    }
    (refs, lens)
}

/// Hand each request its consecutive share of `results`.
fn split<T>(
    results: Vec<Result<T>>,
    lens: impl IntoIterator<Item = usize>,
    dones: Vec<Done>,
    wrap: fn(Vec<Result<T>>) -> Outcome,
) {
    let mut it = results.into_iter();
    for (n, done) in lens.into_iter().zip(dones) {
        let part: Vec<Result<T>> = it.by_ref().take(n).collect();
        done.call(wrap(part));
    }
}

/// One `get_multi` for every request's keys (each key asked once); each request gets its own
/// `Fetched` with copies of its values.
fn gets(client: &Client, cas: bool, reqs: &[&Keys], dones: Vec<Done>) {
    let mut index: HashMap<&[u8], u32> = HashMap::new();
    let mut unique: Vec<&[u8]> = Vec::new();
    let maps: Vec<Vec<u32>> = reqs
        .iter()
        .map(|keys| {
            (0..keys.len())
                .map(|i| {
                    let k = keys.get(i);
                    *index.entry(k).or_insert_with(|| {
                        unique.push(k);
                        unique.len() as u32 - 1
                    })
                })
                .collect()
        })
        .collect();
    let fetched = client.get_multi(&unique, cas);
    for (map, done) in maps.iter().zip(dones) {
        done.call(Outcome::Fetched(fetched.pick(map)));
    }
}
