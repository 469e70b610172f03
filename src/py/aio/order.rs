//! Per-key order for the asyncio client: a request that shares a key with an earlier one still
//! in flight (and either of them writes) waits here until that one is resolved, then goes. So
//! requests for one key take effect in the order they were issued, whichever path runs them
//! (the loop's own thread, a server's worker, a spanning worker, a merged batch, a thread of
//! its own) and whether their callers awaited them, were cancelled or timed out: a cancelled
//! request still runs, in its turn. Requests that share no key, and reads of the same key, run
//! as before, at once and side by side.
//!
//! Keys are compared by a 64-bit hash (FNV-1a): two keys with one hash are ordered as if they
//! were one, which costs only a wait. A request of few keys counts its hashes in one table; a
//! wide one (a large `get_multi`) keeps its own list, turned into a set the first time another
//! request is checked against it. No Python, no threads: the client holds it under a lock, each
//! request in flight holds a `Ticket`, and the client runs what `take_ready` hands back.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::dispatch::request::Request;

/// What the order compares of a request: its keys' hashes (none for flush and stats), and
/// whether it may change them (everything but a plain read).
pub fn keys_of(req: &Request) -> (Option<Vec<u64>>, bool) {
    let hashes = req
        .keys()
        .map(|k| (0..k.len()).map(|i| key_hash(k.get(i))).collect());
    (hashes, req.op.writes())
}

/// A request's registration in a client's order: dropping it (the request resolved, or lost
/// with a mailbox) releases its keys; what that lets go waits in `take_ready`.
pub struct Ticket<P> {
    order: Weak<Mutex<KeyOrder<P>>>,
    id: u64,
}

impl<P> Ticket<P> {
    /// The ticket `admit` or `take_ready` gave; `None` for a request with no key.
    pub fn new(order: &Arc<Mutex<KeyOrder<P>>>, id: u64) -> Option<Ticket<P>> {
        (id != u64::MAX).then(|| Ticket {
            order: Arc::downgrade(order),
            id,
        })
    }
}

impl<P> Drop for Ticket<P> {
    fn drop(&mut self) {
        if let Some(order) = self.order.upgrade() {
            order.lock().release(self.id);
        }
    }
}

/// Above this many keys a request keeps its hashes to itself (`Wide`).
const NARROW_MAX: usize = 16;

/// A key's hash (FNV-1a, 64 bits).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Counts {
    reads: u32,
    writes: u32,
}

impl Counts {
    fn blocks(&self, write: bool) -> bool {
        self.writes > 0 || (write && self.reads > 0)
    }
}

/// A wide request's hashes, and their set once another request needed it.
struct Wide {
    write: bool,
    hashes: Vec<u64>,
    set: Option<HashSet<u64>>,
}

impl Wide {
    fn shares(&mut self, hashes: &[u64]) -> bool {
        if hashes.len() == 1 {
            return self.hashes.contains(&hashes[0]);
        }
        let set = self
            .set
            .get_or_insert_with(|| self.hashes.iter().copied().collect());
        hashes.iter().any(|h| set.contains(h))
    }
}

/// One registered request.
struct Entry {
    write: bool,
    /// Narrow: its hashes are counted in `KeyOrder::narrow`; wide: in `KeyOrder::wide`.
    hashes: Vec<u64>,
    wide: bool,
}

/// Requests in flight and those waiting for them, by ticket (issue order).
pub struct KeyOrder<P> {
    next: u64,
    entries: BTreeMap<u64, Entry>,
    narrow: HashMap<u64, Counts>,
    wide: BTreeMap<u64, Wide>,
    /// Waiting, in issue order: the ticket and what to run.
    parked: VecDeque<(u64, P)>,
    /// Let go by `release`, to be run (`take_ready`).
    ready: Vec<(u64, P)>,
}

impl<P> Default for KeyOrder<P> {
    fn default() -> Self {
        KeyOrder {
            next: 0,
            entries: BTreeMap::new(),
            narrow: HashMap::new(),
            wide: BTreeMap::new(),
            parked: VecDeque::new(),
            ready: Vec::new(),
        }
    }
}

/// What `admit` decided.
pub enum Admitted<P> {
    /// Run it now; resolve it with `release(ticket)`.
    Go(u64, P),
    /// It waits: `take_ready` hands it back once its turn comes.
    Parked,
}

impl<P> KeyOrder<P> {
    /// Register a request of `hashes` (writing or not), issued now. `None` for a request with
    /// no key (flush, stats): it is ordered with nothing.
    pub fn admit(&mut self, hashes: Option<Vec<u64>>, write: bool, payload: P) -> Admitted<P> {
        let Some(hashes) = hashes else {
            return Admitted::Go(u64::MAX, payload);
        };
        let ticket = self.next;
        self.next += 1;
        let blocked = self.blocked(&hashes, write);
        self.register(ticket, hashes, write);
        if blocked {
            self.parked.push_back((ticket, payload));
            Admitted::Parked
        } else {
            Admitted::Go(ticket, payload)
        }
    }

    /// Whether a request of `hashes`, not registered yet, must wait for a registered one.
    fn blocked(&mut self, hashes: &[u64], write: bool) -> bool {
        if self.entries.is_empty() {
            return false;
        }
        let narrow = hashes
            .iter()
            .any(|h| self.narrow.get(h).is_some_and(|c| c.blocks(write)));
        narrow
            || self
                .wide
                .values_mut()
                .filter(|w| write || w.write)
                .any(|w| w.shares(hashes))
    }

    fn register(&mut self, ticket: u64, hashes: Vec<u64>, write: bool) {
        let wide = hashes.len() > NARROW_MAX;
        let hashes = if wide {
            let w = Wide {
                write,
                hashes,
                set: None,
            };
            self.wide.insert(ticket, w);
            Vec::new()
        } else {
            for h in &hashes {
                let c = self.narrow.entry(*h).or_default();
                if write {
                    c.writes += 1;
                } else {
                    c.reads += 1;
                }
            }
            hashes
        };
        self.entries.insert(
            ticket,
            Entry {
                write,
                hashes,
                wide,
            },
        );
    }

    /// The request of `ticket` is resolved: the waiting requests whose turn it now is go to
    /// `take_ready`, in issue order.
    pub fn release(&mut self, ticket: u64) {
        let Some(e) = self.entries.remove(&ticket) else {
            return;
        };
        if e.wide {
            self.wide.remove(&ticket);
        }
        for h in &e.hashes {
            if let Some(c) = self.narrow.get_mut(h) {
                if e.write {
                    c.writes = c.writes.saturating_sub(1);
                } else {
                    c.reads = c.reads.saturating_sub(1);
                }
                if *c == Counts::default() {
                    self.narrow.remove(h);
                }
            }
        }
        let runnable = self.runnable();
        self.ready.extend(runnable);
    }

    /// The requests `release` let go, each with its ticket, in issue order.
    pub fn take_ready(&mut self) -> Vec<(u64, P)> {
        std::mem::take(&mut self.ready)
    }

    /// The parked requests that no earlier registered request holds back any more.
    fn runnable(&mut self) -> Vec<(u64, P)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.parked.len() {
            let ticket = self.parked[i].0;
            if self.held_back(ticket) {
                i += 1;
                continue;
            }
            if let Some(p) = self.parked.remove(i) {
                out.push(p);
            }
        }
        out
    }

    /// Whether a request issued before `ticket` and still registered shares a key with it
    /// (and one of the two writes).
    fn held_back(&mut self, ticket: u64) -> bool {
        let Some(e) = self.entries.get(&ticket) else {
            return false;
        };
        let write = e.write;
        let hashes: Vec<u64> = if e.wide {
            self.wide
                .get(&ticket)
                .map(|w| w.hashes.clone())
                .unwrap_or_default()
        } else {
            e.hashes.clone()
        };
        let earlier: Vec<u64> = self.entries.range(..ticket).map(|(t, _)| *t).collect();
        for t in earlier {
            let Some(other) = self.entries.get(&t) else {
                continue;
            };
            if !(write || other.write) {
                continue;
            }
            let shares = if other.wide {
                self.wide.get_mut(&t).is_some_and(|w| w.shares(&hashes))
            } else {
                other.hashes.iter().any(|h| hashes.contains(h))
            };
            if shares {
                return true;
            }
        }
        false
    }

    /// Whether no request is registered (in flight or waiting).
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(keys: &[&str]) -> Option<Vec<u64>> {
        Some(keys.iter().map(|k| key_hash(k.as_bytes())).collect())
    }

    fn rel(o: &mut KeyOrder<&'static str>, t: u64) -> Vec<(u64, &'static str)> {
        o.release(t);
        o.take_ready()
    }

    fn go(a: Admitted<&'static str>) -> u64 {
        match a {
            Admitted::Go(t, _) => t,
            Admitted::Parked => panic!("parked"),
        }
    }

    fn parked(a: Admitted<&'static str>) -> bool {
        matches!(a, Admitted::Parked)
    }

    #[test]
    fn a_write_waits_for_an_earlier_request_of_its_key_and_goes_after_it() {
        let mut o = KeyOrder::default();
        let set = go(o.admit(h(&["k"]), true, "set"));
        assert!(parked(o.admit(h(&["k"]), true, "delete")));
        assert!(parked(o.admit(h(&["k"]), false, "get")));
        let other = go(o.admit(h(&["other"]), true, "set other"));
        let next = rel(&mut o, set);
        assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["delete"]);
        assert!(rel(&mut o, other).is_empty());
        let next = rel(&mut o, next[0].0);
        assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["get"]);
        rel(&mut o, next[0].0);
        assert!(o.is_empty() && o.narrow.is_empty());
    }

    #[test]
    fn reads_of_one_key_run_side_by_side_but_not_past_a_write() {
        let mut o = KeyOrder::default();
        let r1 = go(o.admit(h(&["k"]), false, "get1"));
        let r2 = go(o.admit(h(&["k"]), false, "get2"));
        assert!(parked(o.admit(h(&["k"]), true, "set")));
        // a read issued after the waiting write waits too
        assert!(parked(o.admit(h(&["k"]), false, "get3")));
        assert!(rel(&mut o, r1).is_empty());
        let w = rel(&mut o, r2);
        assert_eq!(w.iter().map(|p| p.1).collect::<Vec<_>>(), ["set"]);
        let r3 = rel(&mut o, w[0].0);
        assert_eq!(r3.iter().map(|p| p.1).collect::<Vec<_>>(), ["get3"]);
    }

    #[test]
    fn wide_requests_are_ordered_against_narrow_and_wide_ones() {
        let mut o = KeyOrder::default();
        let many: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let wide = go(o.admit(h(&refs), true, "set_multi"));
        assert!(parked(o.admit(h(&["k42"]), false, "get k42")));
        let free = go(o.admit(h(&["x"]), false, "get x"));
        assert!(parked(o.admit(h(&refs[50..]), false, "get_multi")));
        assert!(rel(&mut o, free).is_empty());
        let next = rel(&mut o, wide);
        assert_eq!(
            next.iter().map(|p| p.1).collect::<Vec<_>>(),
            ["get k42", "get_multi"]
        );
    }

    #[test]
    fn a_later_request_is_never_let_past_an_earlier_waiting_one() {
        let mut o = KeyOrder::default();
        let a = go(o.admit(h(&["a"]), true, "set a"));
        let b = go(o.admit(h(&["b"]), true, "set b"));
        // needs both; then one that needs only b must wait behind it
        assert!(parked(o.admit(h(&["a", "b"]), true, "set a b")));
        assert!(parked(o.admit(h(&["b"]), true, "set b again")));
        assert!(rel(&mut o, b).is_empty()); // a b still waits for a
        let next = rel(&mut o, a);
        assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["set a b"]);
        let last = rel(&mut o, next[0].0);
        assert_eq!(
            last.iter().map(|p| p.1).collect::<Vec<_>>(),
            ["set b again"]
        );
    }

    #[test]
    fn requests_without_keys_and_unknown_tickets_change_nothing() {
        let mut o: KeyOrder<&str> = KeyOrder::default();
        assert!(matches!(
            o.admit(None, true, "flush"),
            Admitted::Go(u64::MAX, _)
        ));
        assert!(rel(&mut o, u64::MAX).is_empty() && o.is_empty());
        assert_eq!(key_hash(b""), 0xcbf2_9ce4_8422_2325);
    }
}
