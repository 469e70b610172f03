//! The latency histogram: log-linear (four sub-buckets per power of two of nanoseconds), so a
//! percentile read from it is within 19% of the true value, from 1 ns to hours, and never above
//! the maximum recorded. Relaxed atomics, no locks; used by `metrics` only.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SUB: usize = 4;
const BUCKETS: usize = 64 * SUB;

fn bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros() as usize; // ns >= 4, so exp >= 2
    let sub = ((ns >> (exp - 2)) & (SUB as u64 - 1)) as usize;
    (exp * SUB + sub).min(BUCKETS - 1)
}

/// The upper bound (ns) of bucket `i`.
fn bucket_top(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let (exp, sub) = (i / SUB, (i % SUB) as u64);
    let base = 1u64 << exp;
    base.saturating_add((sub + 1) * (base / SUB as u64))
        .saturating_sub(1)
}

pub struct Histogram {
    buckets: Vec<AtomicU64>,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// One latency of `ns` nanoseconds (`clock::nanos` converts a `Duration`).
    pub fn record_ns(&self, ns: u64) {
        if let Some(b) = self.buckets.get(bucket(ns)) {
            b.fetch_add(1, Relaxed);
        }
        // (The count is the buckets' sum.) A new maximum is rare: read before writing.
        self.sum_ns.fetch_add(ns, Relaxed);
        if ns > self.max_ns.load(Relaxed) {
            self.max_ns.fetch_max(ns, Relaxed);
        }
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let pct = |p: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = ((total as f64) * p).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_top(i);
                }
            }
            0
        };
        // A bucket's top may lie above the largest value recorded in it.
        let max_ns = self.max_ns.load(Relaxed);
        LatencySnapshot {
            count: total,
            sum_ns: self.sum_ns.load(Relaxed),
            p50_ns: pct(0.50).min(max_ns),
            p90_ns: pct(0.90).min(max_ns),
            p99_ns: pct(0.99).min(max_ns),
            max_ns,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySnapshot {
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_percentiles_close() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            100,
            1_000,
            65_535,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            assert!(bucket_top(b) >= ns.min(bucket_top(BUCKETS - 1)), "{ns}");
            last = b;
        }
        let h = Histogram::default();
        for us in 1..=1000u64 {
            h.record_ns(crate::clock::nanos(std::time::Duration::from_micros(us)));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 1000);
        assert_eq!(s.max_ns, 1_000_000);
        for (got, want) in [
            (s.p50_ns, 500_000.0),
            (s.p90_ns, 900_000.0),
            (s.p99_ns, 990_000.0),
        ] {
            let err = (got as f64 - want).abs() / want;
            assert!(err < 0.2, "{got} vs {want}");
        }
    }
}
