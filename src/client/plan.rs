//! Planning: what each server is asked in one operation. Keys are validated and routed by the
//! snapshot's ring into one `ServerBatch` (`batch.rs`) per involved server. Also which write
//! mode each server gets and how a write's batches are closed (quiet meta segment, `noreply`
//! marker, meta probe, binary NOOP).
//!
//! Owns `Plan`, `PlanKey`, `KeyCheck`, `WriteMode`, `Closing`. Uses `batch`, `protocol`
//! (through the batch's encoders) and the snapshot; never does I/O.

use std::borrow::Cow;
use std::sync::Arc;

use smallvec::SmallVec;

use super::batch::{Batches, ServerBatch};
use super::snapshot::Snapshot;
use crate::error::Error;
use crate::protocol::{ReplyKind, StoreItem};
use crate::server::{MetaSupport, Server};

/// What `plan` makes of an operation's keys.
pub(super) struct Plan<'k> {
    /// Per key, its wire form (empty for a rejected key); only when asked for (`keep_wire`).
    /// Inline for one key.
    pub wire_keys: WireList<'k>,
    /// One batch per involved server.
    pub batches: Batches<'k>,
    /// Keys failed before anything is sent (an invalid key never reaches a server).
    pub rejected: Vec<(u32, Error)>,
}

/// The wire keys of a plan.
pub(super) type WireList<'k> = SmallVec<[Cow<'k, [u8]>; 1]>;

/// Which rules a key is validated by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyCheck {
    /// The protocol's, and `verify_keys` when it is on.
    Behaviors,
    /// The protocol's only: libmemcached's touch does not apply `verify_keys`.
    Protocol,
}

/// What a key of a plan is taken from: a key, or a storage request's key (planned from the
/// requests themselves, without a vector of their keys).
pub(super) trait PlanKey<'k> {
    fn key(&self) -> &'k [u8];
}

impl<'k> PlanKey<'k> for &'k [u8] {
    fn key(&self) -> &'k [u8] {
        self
    }
}

impl<'k> PlanKey<'k> for StoreItem<'k> {
    fn key(&self) -> &'k [u8] {
        self.key
    }
}

/// Validate keys and group them by server (`servers`: how many there are). `per_key`: about
/// how many bytes a key's request takes besides the key; each batch's request buffer is sized
/// for its share of the keys up front, so that encoding (above all of a single key) does not
/// regrow it step by step. `encode` appends one key's request to its batch.
pub(super) fn plan<'k, K: PlanKey<'k>, F>(
    snap: &Snapshot,
    servers: usize,
    keys: &[K],
    keep_wire: bool,
    per_key: usize,
    encode: F,
) -> Plan<'k>
where
    F: FnMut(&mut ServerBatch<'k>, u32, &[u8]),
{
    plan_checked(
        snap,
        servers,
        keys,
        KeyCheck::Behaviors,
        keep_wire,
        per_key,
        encode,
    )
}

/// `plan`, with the keys validated by the rules `check` names.
pub(super) fn plan_checked<'k, K: PlanKey<'k>, F>(
    snap: &Snapshot,
    servers: usize,
    keys: &[K],
    check: KeyCheck,
    keep_wire: bool,
    per_key: usize,
    mut encode: F,
) -> Plan<'k>
where
    F: FnMut(&mut ServerBatch<'k>, u32, &[u8]),
{
    let n = servers;
    let mut plan = Plan {
        wire_keys: WireList::with_capacity(if keep_wire { keys.len() } else { 0 }),
        batches: Batches::new(),
        rejected: Vec::new(),
    };
    let verify = check == KeyCheck::Behaviors && snap.behaviors.verify_keys;
    // Which batch serves each server (`usize::MAX`: none yet); on the stack for a few servers.
    let mut on_stack = [usize::MAX; 16];
    let mut on_heap = Vec::new();
    let slot: &mut [usize] = if n <= on_stack.len() {
        &mut on_stack[..n]
    } else {
        on_heap.resize(n, usize::MAX);
        &mut on_heap
    };
    // Each key's server, in a pass of its own where the key alone decides it: a key's hash is
    // one long chain of dependent steps (libmemcached's one-at-a-time: a few cycles a byte),
    // and in a short loop the processor runs the chains of several keys at once (a 10,000-key
    // set_multi over three servers: about 0.1 ms of the 0.3 its hashing took).
    let by_key = n > 1 && n <= usize::from(u16::MAX) && keys.len() >= 16;
    let servers: Vec<u16> = if by_key && snap.routes_by_key() {
        snap.route_all(keys, PlanKey::key)
    } else {
        Vec::new()
    };
    for (i, key) in keys.iter().map(PlanKey::key).enumerate() {
        let wire = match snap.wire_key(key, verify) {
            Ok(w) => w,
            Err(e) => {
                plan.rejected.push((i as u32, e));
                if keep_wire {
                    plan.wire_keys.push(Cow::Borrowed(&[]));
                }
                continue;
            }
        };
        let s = match servers.get(i) {
            Some(&s) => usize::from(s),
            None if n == 1 => 0,
            None => snap.route(key, &wire),
        }
        .min(n - 1);
        if slot[s] == usize::MAX {
            slot[s] = plan.batches.len();
            let mut batch = ServerBatch::new(s);
            // An even share of the keys, as a first guess that saves regrowing.
            let share = keys.len() / n + 1;
            batch.keys.reserve(share);
            if per_key > 0 {
                batch.wbuf.reserve(share * (wire.len() + per_key));
            }
            plan.batches.push(batch);
        }
        encode(&mut plan.batches[slot[s]], i as u32, &wire);
        if keep_wire {
            plan.wire_keys.push(wire);
        }
    }
    plan
}

/// How a write batch goes out to one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteMode {
    /// Quiet meta commands: only failures answer, a meta no-op closes the segment.
    Quiet,
    /// Classic commands, one reply each.
    Classic,
    /// Classic commands, then a probe on a connection of its own: the server has not told yet
    /// whether it speaks the meta protocol.
    ClassicThenProbe,
}

/// Per server, its `WriteMode`. Empty when quiet commands are not wanted at all: no allocation
/// for single-key, `noreply` or binary writes.
pub(super) struct WriteModes(Vec<WriteMode>);

impl WriteModes {
    /// Ask the servers only when quiet meta commands are `wanted`.
    pub fn new(servers: &[Arc<Server>], wanted: bool) -> WriteModes {
        if !wanted {
            return WriteModes(Vec::new());
        }
        WriteModes(
            servers
                .iter()
                .map(|s| match s.meta_support() {
                    MetaSupport::Yes => WriteMode::Quiet,
                    MetaSupport::No => WriteMode::Classic,
                    MetaSupport::Unknown => WriteMode::ClassicThenProbe,
                })
                .collect(),
        )
    }

    pub fn mode(&self, server: usize) -> WriteMode {
        self.0.get(server).copied().unwrap_or(WriteMode::Classic)
    }
}

/// How the batches of one write are closed.
#[derive(Clone, Copy)]
pub(super) enum Closing<'a> {
    /// Quiet binary opcodes (`noreply` or not), closed by a NOOP; `kind` is the batch's kind.
    /// With `noreply` the not-stored and not-found answers are dropped.
    Binary { kind: ReplyKind, noreply: bool },
    /// Text: the meta no-op for a quiet segment (`quiet_kind`); classic `noreply` commands are
    /// not waited for; a probe follows where the server's protocols are unknown.
    Text {
        modes: &'a WriteModes,
        noreply: bool,
        quiet_kind: ReplyKind,
    },
}

/// Close each batch of a write as `closing` says.
pub(super) fn close_batches(batches: &mut [ServerBatch<'_>], closing: Closing<'_>) {
    for batch in batches {
        match closing {
            Closing::Binary { kind, noreply } => {
                batch.noreply = noreply;
                batch.close_binary(kind);
            }
            Closing::Text {
                modes,
                noreply,
                quiet_kind,
            } => match modes.mode(batch.server) {
                WriteMode::Quiet => batch.close_quiet(quiet_kind),
                _ if noreply => batch.close_noreply(),
                WriteMode::Classic => {}
                WriteMode::ClassicThenProbe => batch.probe_after = true,
            },
        }
    }
}
