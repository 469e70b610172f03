//! Get's read fail-over under `num_replicas` (binary): each key whose server failed is asked of
//! its replicas in turn (`replicas` says which servers, and which failures fail over), one
//! pipelined batch per server and round.
//!
//! Uses the replica placement, the plan's `ServerBatch`, get's encoder and sink and the driver
//! (`Client::execute`).

use std::borrow::Cow;

use super::sink::{fetch_arena, GetSink};
use crate::client::batch::{Batches, ServerBatch};
use crate::client::fetched::Fetched;
use crate::client::replicas::{count, fails_over, replica};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::metrics::Family;

impl Client {
    /// The read fail-over: each key of `f` whose server failed is asked of its first replica
    /// (one pipelined batch per server), then of the next for those whose replica failed too,
    /// never of a server that failed in this call; a key left without an answer is a miss
    /// (unless `get_multi_raise_on_error`: then it keeps its own server's error).
    /// `keys`, `with_cas` and `touch` are the fetch's.
    pub(in crate::client) fn fail_over(
        &self,
        snap: &Snapshot,
        keys: &[&[u8]],
        with_cas: bool,
        touch: Option<u32>,
        f: &mut Fetched,
    ) {
        let reps = count(snap);
        if reps == 0 {
            return;
        }
        let verify = snap.behaviors.verify_keys;
        let mut failed = vec![false; snap.topo.servers.len()];
        // (key index, its own server)
        let mut pending: Vec<(u32, usize)> = Vec::new();
        for (i, r) in f.items.iter().enumerate() {
            let (Err(e), Some(key)) = (r, keys.get(i)) else {
                continue;
            };
            if !fails_over(e) {
                continue;
            }
            if let Ok(w) = snap.wire_key(key, verify) {
                let master = snap.route(key, &w);
                if let Some(down) = failed.get_mut(master) {
                    *down = true;
                }
                pending.push((i as u32, master));
            }
        }
        for step in 1..=reps {
            if pending.is_empty() {
                break;
            }
            let round: Vec<(u32, usize)> = pending
                .iter()
                .map(|&(i, m)| (i, replica(snap, m, step)))
                .filter(|&(_, s)| !failed.get(s).copied().unwrap_or(true))
                .collect();
            if round.is_empty() {
                continue;
            }
            let got = self.fetch_from(snap, keys, &round, with_cas, touch);
            let mut answered = vec![false; f.items.len()];
            for (&(i, s), r) in round.iter().zip(&got.items) {
                match r {
                    Err(e) if fails_over(e) => {
                        if let Some(down) = failed.get_mut(s) {
                            *down = true;
                        }
                    }
                    r => {
                        f.take(i, &got, r);
                        if let Some(a) = answered.get_mut(i as usize) {
                            *a = true;
                        }
                    }
                }
            }
            pending.retain(|&(i, _)| !answered.get(i as usize).copied().unwrap_or(false));
        }
        // pylibmc's miss; with `get_multi_raise_on_error` the key keeps its own server's error
        if snap.behaviors.get_multi_raise_on_error {
            return;
        }
        for (i, _) in pending {
            if let Some(r) = f.items.get_mut(i as usize) {
                *r = Ok(None);
            }
        }
    }

    /// Fetch each key of `round` (key index, server) from that server.
    fn fetch_from(
        &self,
        snap: &Snapshot,
        keys: &[&[u8]],
        round: &[(u32, usize)],
        with_cas: bool,
        touch: Option<u32>,
    ) -> Fetched {
        let verify = snap.behaviors.verify_keys;
        let mut wire: Vec<Cow<'_, [u8]>> = Vec::with_capacity(round.len());
        let mut batches = Batches::new();
        for (j, &(i, s)) in round.iter().enumerate() {
            let w = keys
                .get(i as usize)
                .and_then(|k| snap.wire_key(k, verify).ok())
                .unwrap_or_default();
            wire.push(w);
            let at = match batches.iter().position(|b| b.server == s) {
                Some(at) => at,
                None => {
                    batches.push(ServerBatch::new(s));
                    batches.len() - 1
                }
            };
            batches[at].keys.push(j as u32);
        }
        for batch in &mut batches {
            batch.encode_gets(&wire, with_cas, true, touch);
        }
        let mut sink = GetSink::new(&wire[..], fetch_arena(round.len()));
        self.execute(snap, Family::Get, batches, Vec::new(), &mut sink, true);
        sink.into_fetched()
    }
}
