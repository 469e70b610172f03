//! Retrievals: `get`/`gets` lines per server (binary: GETKQ per key and a NOOP), and with
//! `touch` `gat`/`gats` (GATKQ), which set the expiry of each hit in the same round trip. Hits
//! are matched to the keys in request order (`GetSink`); the values' bytes share one arena.
//!
//! Error lines of a reply are pinned to their keys (`pin_errors`). memcached's proxy answers a
//! key whose backend failed with an error line in place of its value, naming no key; among the
//! keys without a hit around it a miss cannot be told from the failed key, so `GetSink` fails
//! them all and lists them as ambiguous. Those keys are read again with a request of their own
//! each, pipelined per server (one more round trip, only then): each reply is a hit, `END`, or
//! the error line alone, so each key gets its own outcome. Text protocol only: a binary reply
//! names its key.
//!
//! Its encoder is `encode` (`ServerBatch::encode_gets`). Uses the plan and `GetSink`.

mod encode;
mod failover;
pub(in crate::client) mod sink;

use std::collections::HashMap;

use std::sync::atomic::Ordering::Relaxed;

use super::lone::Lone;
use super::{Access, Args, Operation};
use crate::client::fetched::Fetched;
use crate::client::plan::{plan, Plan};
use crate::client::replicas;
use crate::client::sink::{Sink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::Error;
use crate::metrics::{Family, ServerMetrics};
use crate::protocol::{text, Parsed, Reply, ReplyKind};
use sink::{fetch_arena, GetSink};

/// A fetch of keys (their CAS uniques too with `cas`); with `touch`, each hit's expiry is set
/// to it (get-and-touch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Get {
    pub cas: bool,
    pub touch: Option<u32>,
}

impl Operation for Get {
    type Sink<W: WireKeys> = GetSink<W>;
    type Output = Fetched;

    fn family(&self) -> Family {
        Family::Get
    }
    fn replay_safe(&self) -> bool {
        true
    }
    /// A gat sets an expiry, as a touch to the same one does.
    fn access(&self) -> Access {
        match self.touch {
            None => Access::Read,
            Some(t) => Access::expiry(t),
        }
    }
    fn merges(&self) -> bool {
        self.touch.is_none()
    }
    fn on_loop(&self, _snap: &Snapshot) -> bool {
        self.touch.is_none()
    }

    fn plan<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Plan<'k> {
        let with_cas = self.cas || snap.behaviors.cas;
        let n = snap.topo.servers.len();
        let mut p = plan(snap, n, args.keys, true, 0, |b, i, _| b.keys.push(i));
        for batch in &mut p.batches {
            batch.encode_gets(&p.wire_keys, with_cas, snap.behaviors.binary, self.touch);
        }
        p
    }

    /// Also when a key's server failed and it has replicas to be asked (`replicas`).
    fn settles_with_io<W: WireKeys>(&self, snap: &Snapshot, sink: &GetSink<W>) -> bool {
        sink.needs_read_back()
            || (replicas::count(snap) > 0 && sink.out.any_failed(replicas::fails_over))
    }

    fn sink<W: WireKeys>(&self, _snap: &Snapshot, wire: W, args: Args<'_, '_>) -> GetSink<W> {
        GetSink::new(wire, fetch_arena(args.keys.len()))
    }

    /// Keys an error line may stand for are read again (`pin_errors`), keys whose server failed
    /// are asked of their replicas (`replicas`); a server without `gat` (it answers `ERROR`)
    /// fails its keys with `NotSupported`.
    fn settle<W: WireKeys>(
        &self,
        client: &Client,
        snap: &Snapshot,
        mut sink: GetSink<W>,
        args: Args<'_, '_>,
    ) -> Fetched {
        let ambiguous = std::mem::take(&mut sink.ambiguous);
        let mut f = sink.into_fetched();
        pin_errors(client, args.keys, self, ambiguous, &mut f);
        client.fail_over(snap, args.keys, self.cas, self.touch, &mut f);
        if self.touch.is_some() {
            for r in &mut f.items {
                if matches!(r, Err(Error::UnknownCommand)) {
                    *r = Err(Error::NotSupported("the server has no gat command".into()));
                }
            }
        }
        f
    }

    fn call(&self, client: &Client, args: Args<'_, '_>) -> Fetched {
        client.call_lone(self, args)
    }

    /// One `get_multi` for every request's keys (each key asked once); each request gets its
    /// own `Fetched` with copies of its values.
    fn call_merged(&self, client: &Client, args: Args<'_, '_>, lens: &[usize]) -> Vec<Fetched> {
        let mut index: HashMap<&[u8], u32> = HashMap::new();
        let mut unique: Vec<&[u8]> = Vec::new();
        let mut keys = args.keys.iter();
        let maps: Vec<Vec<u32>> = lens
            .iter()
            .map(|&n| {
                keys.by_ref()
                    .take(n)
                    .map(|&k| {
                        *index.entry(k).or_insert_with(|| {
                            unique.push(k);
                            unique.len() as u32 - 1
                        })
                    })
                    .collect()
            })
            .collect();
        let fetched = self.call(client, Args::keys(&unique));
        maps.iter().map(|map| fetched.pick(map)).collect()
    }
}

/// A lone `get`/`gets` (not a gat, whose server may not have the command), with no replica to
/// fail over to.
impl Lone for Get {
    const KIND: ReplyKind = ReplyKind::Retrieval;
    type One = Fetched;

    fn lone_key<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.keys {
            [k] if self.touch.is_none() && replicas::count(snap) == 0 => Some(k),
            _ => None,
        }
    }
    fn encode_lone(&self, snap: &Snapshot, _: Args<'_, '_>, buf: &mut Vec<u8>, w: &[u8], _: bool) {
        text::encode_get_one(buf, self.cas || snap.behaviors.cas, w);
    }
    /// `END` (a miss), or one value of `wire` within `max_value` and `END`.
    fn answer(&self, buf: &[u8], wire: &[u8], max_value: usize) -> Option<(Fetched, usize)> {
        // A miss, the whole of its reply, as `parse_reply` reads it.
        if buf.starts_with(b"END\r\n") {
            return Some((Fetched::miss(), 5));
        }
        let unit = |at: usize| match text::parse_reply(ReplyKind::Retrieval, buf.get(at..)?) {
            Ok(Parsed::Done(r, used)) => Some((r, at + used)),
            _ => None,
        };
        let (
            Reply::Value {
                key,
                flags,
                cas,
                data,
            },
            at,
        ) = unit(0)?
        else {
            return None;
        };
        if key != wire || data.len() > max_value {
            return None;
        }
        let (Reply::End, used) = unit(at)? else {
            return None;
        };
        Some((Fetched::hit(flags, cas, data).ok()?, used))
    }
    fn output(one: Fetched) -> Fetched {
        one
    }
    fn first(out: Fetched) -> Option<Fetched> {
        Some(out)
    }
    fn tally_lone(out: &Fetched, m: &ServerMetrics) {
        let c = &m.counted;
        match out.items.first() {
            Some(Ok(Some(_))) => c.hits.fetch_add(1, Relaxed),
            Some(Ok(None)) => c.misses.fetch_add(1, Relaxed),
            _ => 0,
        };
    }
}

/// Read the keys of `f` at `ambiguous` (indices into `keys`, the fetch's keys) again, one
/// request each, and put what comes back in place of their failures.
fn pin_errors(client: &Client, keys: &[&[u8]], op: &Get, mut ambiguous: Vec<u32>, f: &mut Fetched) {
    ambiguous.sort_unstable();
    ambiguous.dedup();
    ambiguous.retain(|&i| (i as usize) < keys.len());
    if ambiguous.is_empty() {
        return;
    }
    let snap = client.snapshot();
    if snap.behaviors.binary {
        return;
    }
    let with_cas = op.cas || snap.behaviors.cas;
    let again: Vec<&[u8]> = ambiguous.iter().map(|&i| keys[i as usize]).collect();
    let n = snap.topo.servers.len();
    let mut p = plan(&snap, n, &again, true, 0, |b, i, _| b.keys.push(i));
    for batch in &mut p.batches {
        batch.encode_gets_by(&p.wire_keys, with_cas, false, op.touch, 1);
    }
    let mut sink = GetSink::new(&p.wire_keys[..], fetch_arena(again.len()));
    client.execute(&snap, Family::Get, p.batches, p.rejected, &mut sink, true);
    let again = sink.into_fetched();
    for (&i, r) in ambiguous.iter().zip(again.items.iter()) {
        f.take(i, &again, r);
    }
}
