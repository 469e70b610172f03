//! libmemcached's replication (`num_replicas`), binary protocol only (docs/failures.md). A
//! key's replicas are the servers after its own in libmemcached's server list, wrapping
//! (`Ring::successor`), each once and never the key's own server. A `set` or `delete` also goes
//! to the replicas, quiet, in the same pipelined batches; their answers belong to no key
//! (`REPLICA`) and are dropped, as libmemcached ignores them. A read whose server failed is
//! asked of the key's next replica, then the next, skipping servers that failed in the same
//! call; a key no server could answer is a miss, as pylibmc reports it (with
//! `get_multi_raise_on_error` it keeps its error).
//!
//! Owns the replica placement: which servers, the writes added to a plan, and which failures a
//! read fails over on. Get's family does the read fail-over itself (`op::get::failover`). Uses
//! the snapshot (ring, behaviors), the plan's `ServerBatch` and the failure policy's `verdict`
//! (which errors say that the server failed).

use std::borrow::Cow;

use super::batch::{Batches, ServerBatch};
use super::snapshot::Snapshot;
use crate::error::Error;
use crate::server::health::{verdict, FailureContext, Verdict};

/// The key index of a replica's request in a batch: it answers for no key of the operation
/// (the sinks' outcome tables ignore an index past their end).
pub(super) const REPLICA: u32 = u32::MAX;

/// How many replicas each key has under `snap`: `num_replicas`, at most every other server
/// once (libmemcached wraps onto the key's own server and the ones before it, which writes
/// and reads nothing new); none in the text protocol, where libmemcached ignores the behavior.
pub(super) fn count(snap: &Snapshot) -> usize {
    if !snap.behaviors.binary {
        return 0;
    }
    let n = snap.topo.servers.len();
    usize::try_from(snap.behaviors.num_replicas)
        .unwrap_or(usize::MAX)
        .min(n.saturating_sub(1))
}

/// The `step`th replica (from 1) of a key whose own server is `master`.
pub(super) fn replica(snap: &Snapshot, master: usize, step: usize) -> usize {
    snap.ring.successor(master, step)
}

/// Whether a read that failed with `e` is asked of the next replica: the server failed (it is
/// down, in its retry window or ejected, or the exchange broke or timed out), not the key.
pub(super) fn fails_over(e: &Error) -> bool {
    matches!(e, Error::ServerDown | Error::ServerDead)
        || verdict(e, FailureContext::default()) == Verdict::CountsAgainstServer
}

/// Add each key's writes to its replicas to `batches`, in the batch of each replica's server
/// (one is started for a server that has none). `masters`: each key with the server its own
/// write went to; `wire`: a key's wire form; `encode` appends one quiet request to a batch's
/// buffer (the batch, the opaque, the key, its wire form), and nothing to its keys. The
/// requests ride in the batch's closing NOOP.
pub(super) fn add_writes<'k>(
    snap: &Snapshot,
    batches: &mut Batches,
    masters: &[(u32, usize)],
    wire: impl Fn(u32) -> Option<Cow<'k, [u8]>>,
    mut encode: impl FnMut(&mut ServerBatch, u32, u32, &[u8]),
) {
    let reps = count(snap);
    if reps == 0 || masters.is_empty() {
        return;
    }
    let mut slot = vec![usize::MAX; snap.topo.servers.len()];
    for (i, b) in batches.iter().enumerate() {
        if let Some(s) = slot.get_mut(b.server) {
            *s = i;
        }
    }
    for &(key, master) in masters {
        let Some(w) = wire(key) else { continue };
        for step in 1..=reps {
            let s = replica(snap, master, step);
            let Some(at) = slot.get_mut(s) else { continue };
            if *at == usize::MAX {
                *at = batches.len();
                batches.push(ServerBatch::new(s));
            }
            let batch = &mut batches[*at];
            let opaque = batch.next_opaque();
            encode(batch, opaque, key, &w);
            batch.keys.push(REPLICA);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::topology::Topology;
    use super::super::ServerSpec;
    use super::*;
    use crate::behaviors::Behaviors;
    use crate::connection::connect::Address;

    fn snap(servers: u16, replicas: u32, binary: bool) -> Snapshot {
        let specs = (1..=servers)
            .map(|port| ServerSpec {
                address: Address::Tcp {
                    host: "127.0.0.1".into(),
                    port,
                },
                weight: 1,
            })
            .collect();
        let b = Behaviors {
            binary,
            num_replicas: replicas,
            ..Behaviors::default()
        };
        let n = usize::from(servers);
        Snapshot::new(
            b,
            Vec::new(),
            Arc::new(Topology::fresh(specs, 0)),
            vec![true; n],
        )
    }

    #[test]
    fn replicas_are_the_next_servers_each_once_and_never_in_text() {
        assert_eq!(count(&snap(3, 1, true)), 1);
        assert_eq!(count(&snap(3, 2, true)), 2);
        assert_eq!(count(&snap(3, 3, true)), 2);
        assert_eq!(count(&snap(3, u32::MAX, true)), 2);
        assert_eq!(count(&snap(1, 2, true)), 0);
        assert_eq!(count(&snap(3, 2, false)), 0);
        let s = snap(5, 2, true);
        assert_eq!(replica(&s, 3, 1), 4);
        assert_eq!(replica(&s, 3, 2), 0);
        assert_eq!(replica(&s, 4, 2), 1);
    }

    #[test]
    fn replica_writes_join_the_batches_and_answer_for_no_key() {
        let s = snap(3, 2, true);
        let mut batches = Batches::new();
        batches.push(ServerBatch::new(2));
        batches[0].keys.push(0);
        let wire = |i: u32| Some(Cow::Owned(vec![b'k', b'0' + i as u8]));
        let mut sent = Vec::new();
        add_writes(
            &s,
            &mut batches,
            &[(0, 2), (1, 0)],
            wire,
            |b, opaque, key, w| {
                b.wbuf.extend_from_slice(w);
                sent.push((opaque, key));
            },
        );
        let servers: Vec<usize> = batches.iter().map(|b| b.server).collect();
        assert_eq!(servers, vec![2, 0, 1]);
        // key 0 (server 2) goes to 0 and 1; key 1 (server 0) to 1 and 2
        assert_eq!(batches[0].keys[..], [0, REPLICA]);
        assert_eq!(batches[1].keys[..], [REPLICA]);
        assert_eq!(batches[2].keys[..], [REPLICA, REPLICA]);
        assert_eq!(batches[0].wbuf, b"k1");
        assert_eq!(batches[2].wbuf, b"k0k1");
        // each request's opaque is its position in its batch
        assert_eq!(sent, vec![(0, 0), (0, 0), (1, 1), (1, 1)]);
        let mut none = Batches::new();
        add_writes(
            &snap(3, 2, false),
            &mut none,
            &[(0, 2)],
            wire,
            |_, _, _, _| {},
        );
        assert!(none.is_empty());
    }

    #[test]
    fn only_server_failures_fail_over() {
        assert!(fails_over(&Error::ServerDown));
        assert!(fails_over(&Error::ServerDead));
        assert!(fails_over(&Error::Timeout));
        assert!(fails_over(&Error::Connect("refused".into())));
        assert!(!fails_over(&Error::TooBig));
        assert!(!fails_over(&Error::Alloc("too large".into())));
        assert!(!fails_over(&Error::BadKey("k".into())));
    }
}
