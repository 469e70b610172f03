//! Get's reply sink (`GetSink`): each hit's bytes go into one arena, matched to its key in
//! request order (or by key, for a proxy that answers out of order); error lines inside a reply
//! pinned to the keys they may stand for. No I/O: unit-tested in `sink_tests.rs`.
//!
//! Uses the sinks' `Sink`, `Outcomes` and `WireKeys`, the large-value claims and `Fetched`.

use std::sync::atomic::Ordering::Relaxed;

use smallvec::SmallVec;

use crate::client::claim::Claims;
use crate::client::fetched::Fetched;
use crate::client::keys::{spare_bytes, Origin};
use crate::client::results::Item;
use crate::client::sink::{Outcomes, Sink, WireKeys};
use crate::error::{Error, Result};
use crate::metrics::ServerMetrics;
use crate::protocol::{Reply, ReplyKind};

/// Retrievals: each hit's bytes go into one arena (`data`), the outcome records where.
///
/// Hits are matched to keys by the key they carry. memcached answers in request order, which the
/// common path follows at no cost (a key skipped over is a miss); a proxy (twemproxy) may answer
/// out of order, so a hit for a key skipped earlier turns that miss into the hit. A hit for a key
/// the request did not ask for (or asked for once and already got) breaks the stream.
pub(in crate::client) struct GetSink<W: WireKeys> {
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
        matches!(self.get(i), Some(Ok(None)))
    }
}

/// Most bytes reserved up front for the values of one fetch.
const ARENA_START: usize = 256 * 1024;

/// Room for small values of every key of a fetch of `keys` keys (a `GetSink`'s arena): the
/// arena rarely has to grow.
pub(in crate::client) fn fetch_arena(keys: usize) -> usize {
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
            match self.out.get(k) {
                Some(Ok(Some(_))) => hits += 1,
                Some(Ok(None)) => misses += 1,
                _ => {}
            }
        }
        m.counted.hits.fetch_add(hits, Relaxed);
        m.counted.misses.fetch_add(misses, Relaxed);
    }
}

/// A fetch's sink, finished.
impl<W: WireKeys> GetSink<W> {
    /// The outcomes and the values' bytes, as a fetch returns them.
    pub(in crate::client) fn into_fetched(self) -> Fetched {
        Fetched {
            items: SmallVec::from_vec(self.out.finish()),
            data: self.data,
            owned: self.claims.owned,
            origin: self.origin,
        }
    }
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
