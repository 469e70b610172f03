//! Turning replies into per-key outcomes. A `Sink` receives the reply units of a batch, already
//! matched to the request (and so the keys) they answer, and records one outcome per key:
//! `GetSink` for retrievals (hits in request order, the rest misses), `LineSink` for commands
//! with one reply line each (`quiet.rs` settles a quiet meta segment into a sink; `stats` has
//! a sink of its own, in `op::admin`).
//!
//! Owns the sinks. Uses `protocol::Reply` and `error`; no I/O, so everything
//! here is unit-tested without sockets.

use std::borrow::Cow;
use std::sync::atomic::Ordering::Relaxed;

use super::claim::Claims;
use super::keys::{spare_bytes, Origin};
use super::results::Item;
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

/// Retrievals: each hit's bytes go into one arena (`data`), the outcome records where.
///
/// Hits are matched to keys by the key they carry. memcached answers in request order, which the
/// common path follows at no cost (a key skipped over is a miss); a proxy (twemproxy) may answer
/// out of order, so a hit for a key skipped earlier turns that miss into the hit. A hit for a key
/// the request did not ask for (or asked for once and already got) breaks the stream.
pub(super) struct GetSink<W: WireKeys> {
    /// The wire key of every key of the operation, to match hits against.
    pub wire: W,
    pub out: Outcomes<Option<Item>>,
    pub data: Vec<u8>,
    /// The thread `data` was taken on (see `Fetched`'s `Drop`).
    pub origin: Origin,
    /// Large values that keep the read buffer they arrived in (`claim.rs`).
    pub claims: Claims,
    /// The current request's error lines (see `GetError`); empty on the common path.
    errors: Vec<GetError>,
    /// How many error lines the current request got: never more than it has keys.
    error_lines: usize,
    /// Whether a hit of the current request came out of order.
    reordered: bool,
    /// Keys failed by error lines that stood for fewer keys (misses among them): `op::get`
    /// reads them again, one request each.
    pub ambiguous: Vec<u32>,
}

/// An error line inside a retrieval reply, in place of one key's value (memcached's proxy
/// answers so for a key whose backend failed). The line names no key: it belongs to one of the
/// keys after the last hit before it (`from`) and before the next hit (`to`), and every key
/// left without a hit there fails with it (or, if the hits came out of order, every key of the
/// request left without a hit).
struct GetError {
    from: usize,
    to: Option<usize>,
    error: Error,
}

impl Outcomes<Option<Item>> {
    /// Whether key `i` is recorded as a miss (`Ok(None)`).
    fn is_miss(&self, i: u32) -> bool {
        matches!(self.slots.get(i as usize), Some(Some(Ok(None))))
    }
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

/// Most bytes reserved up front for the values of one fetch.
const ARENA_START: usize = 256 * 1024;

/// Room for small values of every key of a fetch of `keys` keys (a `GetSink`'s arena): the
/// arena rarely has to grow.
pub(super) fn fetch_arena(keys: usize) -> usize {
    (keys * 64).min(ARENA_START)
}

impl<W: WireKeys> GetSink<W> {
    /// A sink for `wire.count()` keys; `arena` bytes reserved for the values.
    pub fn new(wire: W, arena: usize) -> Self {
        let (mut data, origin) = spare_bytes();
        data.reserve(arena);
        GetSink {
            origin,
            out: Outcomes::new(wire.count()),
            wire,
            data,
            claims: Claims::default(),
            errors: Vec::new(),
            error_lines: 0,
            reordered: false,
            ambiguous: Vec::new(),
        }
    }

    /// A hit's bytes into the arena: the server chose their size, so room is asked for, and a
    /// refusal is an error rather than an abort. A large value may be claimed instead: it keeps
    /// the read buffer it came in, uncopied (`claim.rs`).
    fn hit(&mut self, k: u32, flags: u32, cas: Option<u64>, data: &[u8]) -> Result<()> {
        if let Some(own) = self.claims.claim(k, data) {
            let item = Item::owned(flags, cas, own, data.len());
            self.out.set(k, Ok(Some(item)));
            return Ok(());
        }
        let start = self.data.len();
        self.data.try_reserve(data.len())?;
        self.data.extend_from_slice(data);
        let item = Item::new(flags, cas, start, data.len());
        self.out.set(k, Ok(Some(item)));
        Ok(())
    }

    /// An error line in place of a value. Each stands for one key, so more lines than keys are
    /// a protocol error. Only the first line since the last hit is kept: a later one would fail
    /// the same keys or fewer, and the first failure recorded for a key is the one it keeps.
    fn error_in_reply(&mut self, keys: &[u32], cursor: usize, error: Error) -> Result<bool> {
        self.error_lines += 1;
        if self.error_lines > keys.len() {
            return Err(Error::Protocol(
                "more error lines than keys in a get reply".into(),
            ));
        }
        if !self.errors.last().is_some_and(|e| e.to.is_none()) {
            self.errors.push(GetError {
                from: cursor,
                to: None,
                error,
            });
        }
        Ok(false)
    }

    /// A hit for `key`: ahead of the cursor (skipping misses), or a key skipped earlier.
    fn value(
        &mut self,
        keys: &[u32],
        cursor: &mut usize,
        r: (&[u8], u32, Option<u64>, &[u8]),
    ) -> Result<bool> {
        let (key, flags, cas, data) = r;
        let ahead = keys[(*cursor).min(keys.len())..]
            .iter()
            .position(|&k| self.wire.key(k) == key);
        if let Some(offset) = ahead {
            let pos = *cursor + offset;
            for &k in &keys[*cursor..pos] {
                // (if not empty: a binary batch may have failed this key on its own)
                self.out.set_if_empty(k, Ok(None));
            }
            // (only the last error line kept can still be open: see `error_in_reply`)
            if let Some(e) = self.errors.last_mut().filter(|e| e.to.is_none()) {
                e.to = Some(pos);
            }
            // The cursor passes the key only once its value is kept: a refused allocation fails
            // it with the keys after it, instead of leaving it with no outcome.
            self.hit(keys[pos], flags, cas, data)?;
            *cursor = pos + 1;
            return Ok(false);
        }
        let behind = keys[..(*cursor).min(keys.len())]
            .iter()
            .copied()
            .find(|&k| self.wire.key(k) == key && self.out.is_miss(k));
        match behind {
            Some(k) => {
                self.reordered = true;
                self.hit(k, flags, cas, data)?;
                Ok(false)
            }
            None => Err(Error::Protocol(
                "value for a key that was not requested".into(),
            )),
        }
    }

    /// `END`: the keys without a hit are misses, except where an error line stood for them.
    /// When those keys outnumber the error lines, some are misses: all are ambiguous.
    fn end(&mut self, keys: &[u32], cursor: &mut usize) {
        for &k in &keys[(*cursor).min(keys.len())..] {
            self.out.set_if_empty(k, Ok(None));
        }
        let first = self.ambiguous.len();
        for e in std::mem::take(&mut self.errors) {
            let range = if self.reordered {
                keys
            } else {
                &keys[e.from..e.to.unwrap_or(keys.len())]
            };
            for &k in range {
                if self.out.is_miss(k) {
                    self.out.set(k, Err(e.error.clone()));
                    self.ambiguous.push(k);
                }
            }
        }
        if self.ambiguous.len() - first <= self.error_lines {
            self.ambiguous.truncate(first);
        }
        self.reordered = false;
        self.error_lines = 0;
        *cursor = keys.len();
    }
}

impl<W: WireKeys> Sink for GetSink<W> {
    fn reply(
        &mut self,
        _: ReplyKind,
        keys: &[u32],
        cursor: &mut usize,
        r: Reply<'_>,
    ) -> Result<bool> {
        match r {
            Reply::Value {
                key,
                flags,
                cas,
                data,
            } => self.value(keys, cursor, (key, flags, cas, data)),
            Reply::End => {
                self.end(keys, cursor);
                Ok(true)
            }
            // A server error line in place of a value (memcached's proxy, for a key whose
            // backend failed): the reply goes on to `END`. To a get of one key, the line is the
            // whole reply (as a proxy passes a single get through); memcached itself never sends
            // one inside a reply but "out of memory writing get response", which ends it.
            Reply::Failed(e @ (Error::ServerError(_) | Error::TooBig)) if keys.len() > 1 => {
                self.error_in_reply(keys, *cursor, e)
            }
            Reply::Failed(e) if *cursor == 0 && self.errors.is_empty() => Err(e),
            Reply::Failed(e) => Err(Error::Protocol(format!(
                "error in the middle of a get reply: {e}"
            ))),
            _ => Err(Error::Protocol("unexpected reply to get".into())),
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        self.errors.clear();
        self.error_lines = 0;
        self.reordered = false;
        self.out.fail(keys, e);
    }
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        self.errors.clear();
        self.error_lines = 0;
        self.reordered = false;
        self.ambiguous.retain(|k| !keys.contains(k));
        self.out.revoke(keys, e);
    }
    /// An error line stood for fewer keys than it failed (see `op::get`, `pin_errors`).
    fn needs_read_back(&self) -> bool {
        !self.ambiguous.is_empty()
    }
    fn assume_ok(&mut self, _: &[u32]) {}
    fn reject(&mut self, key: u32, e: Error) {
        self.out.set(key, Err(e));
    }
    fn claims(&mut self) -> Option<&mut Claims> {
        Some(&mut self.claims)
    }
    fn tally(&self, keys: &[u32], m: &ServerMetrics) {
        let (mut hits, mut misses) = (0, 0);
        for &k in keys {
            match self.out.slots.get(k as usize) {
                Some(Some(Ok(Some(_)))) => hits += 1,
                Some(Some(Ok(None))) => misses += 1,
                _ => {}
            }
        }
        m.counted.hits.fetch_add(hits, Relaxed);
        m.counted.misses.fetch_add(misses, Relaxed);
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
