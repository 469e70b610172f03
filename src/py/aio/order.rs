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
use std::hash::{BuildHasher, Hasher};
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

/// How the tables hash a key hash (already FNV-1a): XOR with a key, a multiply by an odd
/// constant and a fold, both drawn per table from the standard library's random state. SipHash
/// took about 440 of the 16,000 instructions of an awaited get; a caller who cannot know the
/// constants cannot choose keys that pile up in one bucket either.
#[derive(Clone, Copy)]
struct Spread {
    key: u64,
    mul: u64,
}

impl Spread {
    fn new() -> Spread {
        let r = std::collections::hash_map::RandomState::new();
        Spread {
            key: r.hash_one(0x5eed_u64),
            mul: r.hash_one(0x0dd_u64) | 1,
        }
    }
}

impl BuildHasher for Spread {
    type Hasher = SpreadHasher;
    fn build_hasher(&self) -> SpreadHasher {
        SpreadHasher {
            spread: *self,
            state: 0,
        }
    }
}

struct SpreadHasher {
    spread: Spread,
    state: u64,
}

impl Hasher for SpreadHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only u64s are hashed here; anything else is folded in byte by byte all the same.
        for &b in bytes {
            self.state = (self.state.rotate_left(8) ^ u64::from(b)).wrapping_mul(self.spread.mul);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.state ^= x;
    }
    fn finish(&self) -> u64 {
        let h = (self.state ^ self.spread.key).wrapping_mul(self.spread.mul);
        h ^ (h >> 32)
    }
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
    set: Option<HashSet<u64, Spread>>,
}

impl Wide {
    fn shares(&mut self, hashes: &[u64]) -> bool {
        if hashes.len() == 1 {
            return self.hashes.contains(&hashes[0]);
        }
        let hashes_of = &self.hashes;
        let set = self.set.get_or_insert_with(|| {
            let mut set = HashSet::with_capacity_and_hasher(hashes_of.len(), Spread::new());
            set.extend(hashes_of.iter().copied());
            set
        });
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
    narrow: HashMap<u64, Counts, Spread>,
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
            narrow: HashMap::with_hasher(Spread::new()),
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
#[path = "order_tests.rs"]
mod tests;
