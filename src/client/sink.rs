//! Turning replies into per-key outcomes. A `Sink` receives the reply units of a batch, already
//! matched to the request (and so the keys) they answer, and records one outcome per key in an
//! `Outcomes` table: `LineSink` for commands with one reply line each (`quiet.rs` settles a
//! quiet meta segment into a sink). A family whose replies need more has its sink in its own
//! file: get's `GetSink` (`op::get::sink`), stats' (`op::admin`).
//!
//! Owns `Sink`, `Outcomes`, `LineSink` and `WireKeys`. Uses `protocol::Reply` and `error`; no
//! I/O, so everything here is unit-tested without sockets.

use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;

use super::claim::Claims;
use super::results::StoreStatus;
use crate::error::{Error, Result};
use crate::metrics::ServerMetrics;
use crate::protocol::{Reply, ReplyKind};

/// Receives the replies of a batch. `keys` are the operation-wide indices a request answers for;
/// `cursor` is the position inside them that a multi-value reply has reached.
pub(super) trait Sink {
    /// One reply unit for the current request. `Ok(true)`: the request is complete.
    /// A resumable `Err` fails the request's remaining keys and the stream goes on.
    fn reply(
        &mut self,
        kind: ReplyKind,
        keys: &[u32],
        cursor: &mut usize,
        r: Reply<'_>,
    ) -> Result<bool>;
    /// These keys will get no reply: fail them.
    fn fail(&mut self, keys: &[u32], e: &Error);
    /// One of these keys failed with `e` and the others succeeded, but the server did not say
    /// which (an error line in a quiet meta batch): fail them, to be settled by the caller.
    fn ambiguous(&mut self, keys: &[u32], e: &Error) {
        self.fail(keys, e);
    }
    /// The stream broke the protocol: fail these keys even if they already have an outcome.
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        self.fail(keys, e);
    }
    /// `noreply` keys that the server did not complain about.
    fn assume_ok(&mut self, keys: &[u32]);
    /// A key failed before anything was sent (it never reaches a server).
    fn reject(&mut self, key: u32, e: Error);
    /// Count the outcomes of these keys (one server's batch, settled) in its metrics.
    fn tally(&self, _keys: &[u32], _m: &ServerMetrics) {}
    /// Whether settling the outcomes needs a read-back (`ambiguous` ranges were met).
    fn needs_read_back(&self) -> bool {
        false
    }
    /// The sink's claims on large values' read buffers (`claim.rs`), if it makes any.
    fn claims(&mut self) -> Option<&mut Claims> {
        None
    }
}

/// How an outcome counts in the metrics (hits and misses, stored and not stored).
pub(crate) trait Tally {
    fn tally(&self, _m: &ServerMetrics) {}
}

impl Tally for StoreStatus {
    fn tally(&self, m: &ServerMetrics) {
        let c = if *self == StoreStatus::Stored {
            &m.counted.stored
        } else {
            &m.counted.not_stored
        };
        c.fetch_add(1, Relaxed);
    }
}
impl Tally for bool {}
impl Tally for Option<u64> {}
impl Tally for () {}
impl Tally for super::results::MetaOutcome {}

/// A per-key outcome table.
pub(super) struct Outcomes<T> {
    slots: Vec<Option<Result<T>>>,
}

impl<T> Outcomes<T> {
    pub fn new(n: usize) -> Self {
        Outcomes {
            slots: (0..n).map(|_| None).collect(),
        }
    }
    pub fn set(&mut self, i: u32, v: Result<T>) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            *s = Some(v);
        }
    }
    pub fn set_if_empty(&mut self, i: u32, v: Result<T>) {
        if let Some(s @ None) = self.slots.get_mut(i as usize) {
            *s = Some(v);
        }
    }
    pub fn fail(&mut self, keys: &[u32], e: &Error) {
        for &k in keys {
            self.set_if_empty(k, Err(e.clone()));
        }
    }
    pub fn revoke(&mut self, keys: &[u32], e: &Error) {
        for &k in keys {
            self.set(k, Err(e.clone()));
        }
    }

    /// Key `i`'s outcome so far.
    pub fn get(&self, i: u32) -> Option<&Result<T>> {
        self.slots.get(i as usize).and_then(Option::as_ref)
    }

    /// Whether some key's outcome so far is one `which` picks.
    pub fn any(&self, which: impl Fn(&Result<T>) -> bool) -> bool {
        self.slots.iter().flatten().any(which)
    }

    /// Whether some key failed with an error `which` picks.
    pub fn any_failed(&self, which: impl Fn(&Error) -> bool) -> bool {
        self.any(|r| matches!(r, Err(e) if which(e)))
    }

    /// The outcomes; a key nothing was recorded for failed (no reply for it).
    pub fn finish(self) -> Vec<Result<T>> {
        self.slots
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(Error::Protocol("no reply for this key".into()))))
            .collect()
    }
}

/// A reply that is legal in the protocol but not for this request.
pub(super) fn unexpected() -> Error {
    Error::Protocol("reply does not match the request".into())
}

/// The wire keys a `GetSink` matches hits against: borrowed from the operation's plan, or owned
/// by an operation that outlives the call that planned it (`direct`).
pub(super) trait WireKeys {
    fn count(&self) -> usize;
    fn key(&self, i: u32) -> &[u8];
}

impl WireKeys for &[Cow<'_, [u8]>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn key(&self, i: u32) -> &[u8] {
        &self[i as usize]
    }
}

impl WireKeys for super::keys::Keys {
    fn count(&self) -> usize {
        self.len()
    }
    fn key(&self, i: u32) -> &[u8] {
        self.get(i as usize)
    }
}

/// Turns one reply line into an outcome: a closure, or an operation's own unit type (which
/// keeps the call static where the sink's type must be named).
pub(super) trait LineMap<T> {
    fn map(&mut self, r: Reply<'_>) -> Result<T>;
}

impl<T, F: FnMut(Reply<'_>) -> Result<T>> LineMap<T> for F {
    fn map(&mut self, r: Reply<'_>) -> Result<T> {
        self(r)
    }
}

/// Commands with one reply line each; `map` turns a line into the outcome.
pub(super) struct LineSink<T, F: LineMap<T>> {
    pub out: Outcomes<T>,
    map: F,
    /// What a `noreply` key the server did not complain about counts as.
    noreply_value: Option<T>,
    /// Keys failed by an error that may belong to another key of the same range.
    pub ambiguous: Vec<u32>,
}

impl<T, F: LineMap<T>> LineSink<T, F> {
    pub fn new(n: usize, map: F, noreply_value: Option<T>) -> Self {
        LineSink {
            out: Outcomes::new(n),
            map,
            noreply_value,
            ambiguous: Vec::new(),
        }
    }
}

impl<T: Clone + Tally, F: LineMap<T>> Sink for LineSink<T, F> {
    fn reply(&mut self, _: ReplyKind, keys: &[u32], _: &mut usize, r: Reply<'_>) -> Result<bool> {
        let v = match r {
            Reply::Failed(e) => Err(e),
            r => self.map.map(r),
        };
        match v {
            Err(e) if !e.is_resumable() => Err(e),
            v => {
                if let Some(&k) = keys.first() {
                    self.out.set(k, v);
                }
                Ok(true)
            }
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        self.out.fail(keys, e);
    }
    fn ambiguous(&mut self, keys: &[u32], e: &Error) {
        self.out.fail(keys, e);
        if keys.len() > 1 {
            self.ambiguous.extend_from_slice(keys);
        }
    }
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        self.out.revoke(keys, e);
    }
    fn needs_read_back(&self) -> bool {
        !self.ambiguous.is_empty()
    }
    fn assume_ok(&mut self, keys: &[u32]) {
        if let Some(v) = &self.noreply_value {
            for &k in keys {
                self.out.set_if_empty(k, Ok(v.clone()));
            }
        }
    }
    fn reject(&mut self, key: u32, e: Error) {
        self.out.set(key, Err(e));
    }
    fn tally(&self, keys: &[u32], m: &ServerMetrics) {
        for &k in keys {
            if let Some(Some(Ok(v))) = self.out.slots.get(k as usize) {
                v.tally(m);
            }
        }
    }
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
