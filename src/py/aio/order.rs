//! Per-key order for the asyncio client: a request that shares a key with an earlier one still
//! in flight (and the two conflict: `Access::conflicts`) waits here until that one is
//! resolved, then goes. So
//! requests for one key take effect in the order they were issued, whichever path runs them
//! (the loop's own thread, a server's worker, a spanning worker, a merged batch, a thread of
//! its own) and whether their callers awaited them, were cancelled or timed out: a cancelled
//! request still runs, in its turn. Requests that share no key, reads of the same key (lease
//! reads included), and touches and gats to one expiry run as before, at once and side by
//! side: a hot key's readers never queue behind each other.
//!
//! Keys are compared by a 64-bit hash (FNV-1a): two keys with one hash are ordered as if they
//! were one, which costs only a wait. A request of few keys counts its hashes in one table; a
//! wide one (a large `get_multi`) keeps its own list, turned into a set the first time another
//! request is checked against it. No Python, no threads: the client holds it under a lock, each
//! request in flight holds a `Ticket`, and the client runs what `take_ready` hands back.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::client::op::Access;
use crate::dispatch::request::Request;

/// What the order compares of a request: its keys' hashes (none for flush and stats), and
/// what it may do to them.
pub fn keys_of(req: &Request) -> (Option<Vec<u64>>, Access) {
    let hashes = req
        .keys()
        .map(|k| (0..k.len()).map(|i| key_hash(k.get(i))).collect());
    (hashes, req.op.access())
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

/// The registered requests of one key hash, by access.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Counts {
    reads: u32,
    writes: u32,
    /// Repeatable ones: how many, the tag of the first, and whether another tag came while
    /// any were registered (then every repeatable request of another tag waits, until none is
    /// left: a wait too many at worst, never one too few).
    repeats: u32,
    tag: u64,
    mixed: bool,
}

impl Counts {
    /// Whether a request of `access` issued now must wait for these.
    fn blocks(&self, access: Access) -> bool {
        match access {
            Access::Read => self.writes > 0,
            Access::Write => self.writes > 0 || self.reads > 0 || self.repeats > 0,
            Access::Repeatable(t) => {
                self.writes > 0 || (self.repeats > 0 && (self.mixed || self.tag != t))
            }
        }
    }

    fn add(&mut self, access: Access) {
        match access {
            Access::Read => self.reads += 1,
            Access::Write => self.writes += 1,
            Access::Repeatable(t) => {
                if self.repeats == 0 {
                    self.tag = t;
                } else if self.tag != t {
                    self.mixed = true;
                }
                self.repeats += 1;
            }
        }
    }

    fn remove(&mut self, access: Access) {
        match access {
            Access::Read => self.reads = self.reads.saturating_sub(1),
            Access::Write => self.writes = self.writes.saturating_sub(1),
            Access::Repeatable(_) => {
                self.repeats = self.repeats.saturating_sub(1);
                if self.repeats == 0 {
                    self.tag = 0;
                    self.mixed = false;
                }
            }
        }
    }
}

/// A wide request's hashes, and their set once another request needed it.
struct Wide {
    access: Access,
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
    access: Access,
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
    /// Register a request of `hashes` and `access`, issued now. `None` for a request with no
    /// key (flush, stats): it is ordered with nothing.
    pub fn admit(&mut self, hashes: Option<Vec<u64>>, access: Access, payload: P) -> Admitted<P> {
        let Some(hashes) = hashes else {
            return Admitted::Go(u64::MAX, payload);
        };
        let ticket = self.next;
        self.next += 1;
        let blocked = self.blocked(&hashes, access);
        self.register(ticket, hashes, access);
        if blocked {
            self.parked.push_back((ticket, payload));
            Admitted::Parked
        } else {
            Admitted::Go(ticket, payload)
        }
    }

    /// Whether a request of `hashes`, not registered yet, must wait for a registered one.
    fn blocked(&mut self, hashes: &[u64], access: Access) -> bool {
        if self.entries.is_empty() {
            return false;
        }
        let narrow = hashes
            .iter()
            .any(|h| self.narrow.get(h).is_some_and(|c| c.blocks(access)));
        narrow
            || self
                .wide
                .values_mut()
                .filter(|w| access.conflicts(w.access))
                .any(|w| w.shares(hashes))
    }

    fn register(&mut self, ticket: u64, hashes: Vec<u64>, access: Access) {
        let wide = hashes.len() > NARROW_MAX;
        let hashes = if wide {
            let w = Wide {
                access,
                hashes,
                set: None,
            };
            self.wide.insert(ticket, w);
            Vec::new()
        } else {
            for h in &hashes {
                self.narrow.entry(*h).or_default().add(access);
            }
            hashes
        };
        self.entries.insert(
            ticket,
            Entry {
                access,
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
                c.remove(e.access);
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
    /// (and the two conflict).
    fn held_back(&mut self, ticket: u64) -> bool {
        let Some(e) = self.entries.get(&ticket) else {
            return false;
        };
        let access = e.access;
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
            if !access.conflicts(other.access) {
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

    const R: Access = Access::Read;
    const W: Access = Access::Write;

    /// A touch's or gat's access.
    fn ttl(seconds: u32) -> Access {
        Access::expiry(seconds)
    }

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
        let set = go(o.admit(h(&["k"]), W, "set"));
        assert!(parked(o.admit(h(&["k"]), W, "delete")));
        assert!(parked(o.admit(h(&["k"]), R, "get")));
        let other = go(o.admit(h(&["other"]), W, "set other"));
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
        let r1 = go(o.admit(h(&["k"]), R, "get1"));
        let r2 = go(o.admit(h(&["k"]), R, "get2"));
        assert!(parked(o.admit(h(&["k"]), W, "set")));
        // a read issued after the waiting write waits too
        assert!(parked(o.admit(h(&["k"]), R, "get3")));
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
        let wide = go(o.admit(h(&refs), W, "set_multi"));
        assert!(parked(o.admit(h(&["k42"]), R, "get k42")));
        let free = go(o.admit(h(&["x"]), R, "get x"));
        assert!(parked(o.admit(h(&refs[50..]), R, "get_multi")));
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
        let a = go(o.admit(h(&["a"]), W, "set a"));
        let b = go(o.admit(h(&["b"]), W, "set b"));
        // needs both; then one that needs only b must wait behind it
        assert!(parked(o.admit(h(&["a", "b"]), W, "set a b")));
        assert!(parked(o.admit(h(&["b"]), W, "set b again")));
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
            o.admit(None, W, "flush"),
            Admitted::Go(u64::MAX, _)
        ));
        assert!(rel(&mut o, u64::MAX).is_empty() && o.is_empty());
        assert_eq!(key_hash(b""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn touches_to_one_expiry_run_side_by_side_with_each_other_and_with_reads() {
        let mut o = KeyOrder::default();
        let a = go(o.admit(h(&["k"]), ttl(30), "touch a"));
        let b = go(o.admit(h(&["k"]), ttl(30), "gat b"));
        let r = go(o.admit(h(&["k"]), R, "get"));
        let c = go(o.admit(h(&["k"]), ttl(30), "touch c"));
        for t in [a, b, r, c] {
            assert!(rel(&mut o, t).is_empty());
        }
        assert!(o.is_empty() && o.narrow.is_empty());
    }

    #[test]
    fn a_touch_waits_for_an_earlier_write_and_a_later_write_waits_for_it() {
        let mut o = KeyOrder::default();
        let set = go(o.admit(h(&["k"]), W, "set"));
        assert!(parked(o.admit(h(&["k"]), ttl(30), "touch 1")));
        assert!(parked(o.admit(h(&["k"]), ttl(30), "gat 2")));
        assert!(parked(o.admit(h(&["k"]), W, "delete")));
        // a touch issued after the waiting delete waits for it too
        assert!(parked(o.admit(h(&["k"]), ttl(30), "touch 3")));
        let touches = rel(&mut o, set);
        assert_eq!(
            touches.iter().map(|p| p.1).collect::<Vec<_>>(),
            ["touch 1", "gat 2"]
        );
        assert!(rel(&mut o, touches[0].0).is_empty());
        let del = rel(&mut o, touches[1].0);
        assert_eq!(del.iter().map(|p| p.1).collect::<Vec<_>>(), ["delete"]);
        let last = rel(&mut o, del[0].0);
        assert_eq!(last.iter().map(|p| p.1).collect::<Vec<_>>(), ["touch 3"]);
    }

    #[test]
    fn touches_to_other_expiries_keep_their_order() {
        let mut o = KeyOrder::default();
        let a = go(o.admit(h(&["k"]), ttl(30), "touch 30"));
        assert!(parked(o.admit(h(&["k"]), ttl(60), "touch 60")));
        // once two tags are registered, even the first one's waits (a wait too many, no less)
        assert!(parked(o.admit(h(&["k"]), ttl(30), "touch 30 again")));
        let next = rel(&mut o, a);
        assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["touch 60"]);
        let last = rel(&mut o, next[0].0);
        assert_eq!(
            last.iter().map(|p| p.1).collect::<Vec<_>>(),
            ["touch 30 again"]
        );
        rel(&mut o, last[0].0);
        assert!(o.is_empty() && o.narrow.is_empty());
    }

    #[test]
    fn wide_requests_conflict_by_access_too() {
        let mut o = KeyOrder::default();
        let many: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let gat = go(o.admit(h(&refs), ttl(30), "gat_multi"));
        go(o.admit(h(&["k7"]), ttl(30), "gat k7"));
        go(o.admit(h(&["k8"]), R, "get k8"));
        assert!(parked(o.admit(h(&["k9"]), ttl(60), "gat k9 60")));
        assert!(parked(o.admit(h(&["k10"]), W, "set k10")));
        let next = rel(&mut o, gat);
        assert_eq!(
            next.iter().map(|p| p.1).collect::<Vec<_>>(),
            ["gat k9 60", "set k10"]
        );
    }

    #[test]
    fn many_readers_of_one_key_never_wait_and_a_write_waits_for_all_of_them() {
        let mut o = KeyOrder::default();
        let readers: Vec<u64> = (0..256)
            .map(|i| go(o.admit(h(&["hot"]), if i % 2 == 0 { R } else { ttl(10) }, "read")))
            .collect();
        assert!(parked(o.admit(h(&["hot"]), W, "set")));
        for t in &readers[..255] {
            assert!(rel(&mut o, *t).is_empty());
        }
        let set = rel(&mut o, readers[255]);
        assert_eq!(set.iter().map(|p| p.1).collect::<Vec<_>>(), ["set"]);
    }
}
