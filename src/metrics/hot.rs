//! Hot-key telemetry, opt-in (behaviors `hot_keys`, `hot_keys_sample`): which keys this client
//! asks one server for most, estimated from a sample of the keys it plans.
//!
//! Each key a request is planned for is sampled with probability 1/`one_in` (`random`); a
//! sampled key is counted in its server's `HotKeys`, a Space-Saving summary (Metwally, Agrawal
//! and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data Streams", 2005)
//! of `top` counters. A key already held adds one to its counter; a new key takes a free
//! counter, or else the smallest one's place (a min-heap finds it), inheriting its count (plus
//! one) and recording that count as its error. Over `n` sampled keys: every estimate is at least the key's true sampled
//! count and at most `error` (≤ n / `top`) above it, and every key sampled more than n / `top`
//! times is held. Reported counts are scaled by `one_in` (estimated requests).
//!
//! Off, nothing here runs: the planner checks `HotSampling::on` once per plan. Uses `random`;
//! never Python.

use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use hashbrown::HashTable;

/// The most keys a server's summary holds (`hot_keys`' largest value).
pub const MAX_TOP: u16 = 1000;
/// `hot_keys_sample`'s default: one key in 16.
pub const DEFAULT_ONE_IN: u32 = 16;
/// `hot_keys_sample`'s largest value.
pub const MAX_ONE_IN: u32 = 1 << 20;

/// The settings: `top` counters per server (0: off), one key in `one_in` sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotSampling {
    pub top: u16,
    pub one_in: u32,
}

impl Default for HotSampling {
    fn default() -> Self {
        HotSampling {
            top: 0,
            one_in: DEFAULT_ONE_IN,
        }
    }
}

impl HotSampling {
    #[inline(always)]
    pub fn on(self) -> bool {
        self.top != 0
    }

    /// Whether to count the key at hand: one in `one_in`.
    #[inline]
    pub fn sampled(self) -> bool {
        crate::random::one_in(self.one_in)
    }

    /// Count a sampled `key` in `hot`.
    pub fn count(self, hot: &HotKeys, key: &[u8]) {
        hot.count(key, usize::from(self.top));
    }
}

/// One held key: its estimated sampled count, and how much of it may be overestimate.
struct Counter {
    /// Reused by the next key that takes this counter's place: no allocation once warm.
    key: Vec<u8>,
    hash: u64,
    count: u64,
    error: u64,
    /// Its place in `Summary::heap`.
    at: usize,
}

/// Space-Saving's counters, with a min-heap on their counts (the smallest gives its place in
/// O(log K), not by a scan) and an index from key to counter (a key hashed once per sample).
struct Summary {
    counters: Vec<Counter>,
    /// Counter indices, a min-heap by count.
    heap: Vec<usize>,
    index: HashTable<usize>,
    /// This process's seed of `hash`.
    seed: u64,
    /// Keys sampled since the summary was last cleared.
    sampled: u64,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            counters: Vec::new(),
            heap: Vec::new(),
            index: HashTable::new(),
            seed: seed(),
            sampled: 0,
        }
    }
}

/// A seed per process, from the standard library's random hasher keys.
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| RandomState::new().hash_one(0u8))
}

/// A key's hash for the index: a multiply-rotate over its 8-byte words, seeded, then mixed
/// (MurmurHash3's finalizer). Cheaper than SipHash; a caller flooding one hash only slows its
/// own sampled keys, as a summary never holds more than `top`.
fn hash(seed: u64, key: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(K);
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let mut b = [0u8; 8];
    b[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h.rotate_left(23) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl Summary {
    fn count(&mut self, key: &[u8], top: usize) {
        self.sampled += 1;
        let hash = hash(self.seed, key);
        let Summary {
            counters,
            heap,
            index,
            ..
        } = self;
        if let Some(&i) = index.find(hash, |&i| counters[i].key == key) {
            counters[i].count += 1;
            let at = counters[i].at;
            sift_down(heap, counters, at);
            return;
        }
        if counters.len() < top {
            let (i, at) = (counters.len(), heap.len());
            counters.push(Counter {
                key: key.to_vec(),
                hash,
                count: 1,
                error: 0,
                at,
            });
            heap.push(i);
            index.insert_unique(hash, i, |&j| counters[j].hash);
            sift_up(heap, counters, at);
            return;
        }
        // The smallest counter gives its place: the new key inherits its count, as its error.
        let Some(&i) = heap.first() else {
            return;
        };
        if let Ok(old) = index.find_entry(counters[i].hash, |&j| j == i) {
            old.remove();
        }
        let c = &mut counters[i];
        c.key.clear();
        c.key.extend_from_slice(key);
        c.hash = hash;
        c.error = c.count;
        c.count += 1;
        index.insert_unique(hash, i, |&j| counters[j].hash);
        sift_down(heap, counters, 0);
    }
}

fn swap(heap: &mut [usize], counters: &mut [Counter], a: usize, b: usize) {
    heap.swap(a, b);
    counters[heap[a]].at = a;
    counters[heap[b]].at = b;
}

fn sift_up(heap: &mut [usize], counters: &mut [Counter], mut at: usize) {
    while at > 0 {
        let parent = (at - 1) / 2;
        if counters[heap[parent]].count <= counters[heap[at]].count {
            break;
        }
        swap(heap, counters, parent, at);
        at = parent;
    }
}

fn sift_down(heap: &mut [usize], counters: &mut [Counter], mut at: usize) {
    loop {
        let (l, r) = (2 * at + 1, 2 * at + 2);
        let mut least = at;
        for child in [l, r] {
            if child < heap.len() && counters[heap[child]].count < counters[heap[least]].count {
                least = child;
            }
        }
        if least == at {
            return;
        }
        swap(heap, counters, at, least);
        at = least;
    }
}

/// One key of a report: estimated requests (sampled count × `one_in`) and the most of it that
/// may be overestimate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    pub key: Vec<u8>,
    pub count: u64,
    pub error: u64,
}

/// One server's summary. Locked only for a sampled key or a report.
#[derive(Default)]
pub struct HotKeys(Mutex<Summary>);

impl HotKeys {
    fn summary(&self) -> std::sync::MutexGuard<'_, Summary> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count one sampled `key` in a summary of at most `top` counters.
    fn count(&self, key: &[u8], top: usize) {
        self.summary().count(key, top);
    }

    /// The held keys, hottest first, counts scaled by `one_in`; with `clear`, the summary
    /// starts again empty.
    pub fn report(&self, one_in: u32, clear: bool) -> Vec<HotKey> {
        let mut s = self.summary();
        let scale = u64::from(one_in.max(1));
        let mut out: Vec<HotKey> = s
            .counters
            .iter()
            .map(|c| HotKey {
                key: c.key.to_vec(),
                count: c.count.saturating_mul(scale),
                error: c.error.saturating_mul(scale),
            })
            .collect();
        out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        if clear {
            *s = Summary::default();
        }
        out
    }

    /// `key`'s place among the held keys (1: the hottest) and its estimated sampled count.
    pub fn rank(&self, key: &[u8]) -> Option<(usize, u64)> {
        let s = self.summary();
        let hash = hash(s.seed, key);
        let i = *s.index.find(hash, |&i| s.counters[i].key == key)?;
        let count = s.counters[i].count;
        let above = s.counters.iter().filter(|c| c.count > count).count();
        Some((above + 1, count))
    }

    pub fn clear(&self) {
        *self.summary() = Summary::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(report: &[HotKey]) -> Vec<&[u8]> {
        report.iter().map(|h| &h.key[..]).collect()
    }

    #[test]
    fn the_heavy_keys_of_a_long_tail_are_held_within_the_bound() {
        let hot = HotKeys::default();
        let top = 10;
        // 3 heavy keys (1,250 each, above n / top) among 5,000 one-off keys, interleaved.
        let mut n = 0u64;
        for i in 0..5_000u32 {
            hot.count(format!("tail:{i}").as_bytes(), top);
            n += 1;
            if i % 4 == 0 {
                for k in ["a", "b", "c"] {
                    hot.count(k.as_bytes(), top);
                    n += 1;
                }
            }
        }
        let r = hot.report(1, false);
        assert_eq!(r.len(), top);
        let bound = n / top as u64;
        for k in ["a", "b", "c"] {
            let h = r.iter().find(|h| h.key == k.as_bytes()).expect(k);
            assert!(
                h.count >= 1250 && h.count - 1250 <= h.error && h.error <= bound,
                "{h:?}"
            );
        }
        assert!(r.iter().all(|h| h.error <= bound));
        assert!(r.windows(2).all(|w| w[0].count >= w[1].count));
    }

    #[test]
    fn counts_scale_by_the_sample_and_a_report_may_clear() {
        let hot = HotKeys::default();
        for _ in 0..3 {
            hot.count(b"x", 4);
        }
        hot.count(b"y", 4);
        let r = hot.report(16, false);
        assert_eq!(keys(&r), [&b"x"[..], b"y"]);
        assert_eq!((r[0].count, r[0].error), (48, 0));
        assert_eq!(hot.rank(b"y"), Some((2, 1)));
        assert_eq!(hot.rank(b"z"), None);
        assert_eq!(hot.report(1, true).len(), 2);
        assert!(hot.report(1, false).is_empty());
    }

    #[test]
    fn a_summary_never_holds_more_than_top_keys() {
        let hot = HotKeys::default();
        for i in 0..10_000u32 {
            hot.count(&i.to_be_bytes(), 3);
        }
        let s = hot.summary();
        assert_eq!((s.counters.len(), s.index.len(), s.sampled), (3, 3, 10_000));
        for (at, &i) in s.heap.iter().enumerate() {
            assert_eq!(s.counters[i].at, at);
            assert!(at == 0 || s.counters[s.heap[(at - 1) / 2]].count <= s.counters[i].count);
            let hash = hash(s.seed, &s.counters[i].key);
            assert_eq!(s.index.find(hash, |&j| j == i), Some(&i));
        }
    }
}
