//! Per-server metrics, always on: counters and latency histograms in relaxed atomics, updated
//! once per server batch (not per key) by the driver, so that keeping them costs a few atomic
//! adds per request. `ServerMetrics::snapshot` copies them out for reporting.
//!
//! The histograms are log-linear (four sub-buckets per power of two of nanoseconds): a
//! percentile read from them is within 19% of the true value, from 1 ns to hours. Owns no
//! locks; uses `error` for retcodes. Never Python.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;

/// The operation families requests are counted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Get = 0,
    Store = 1,
    Delete = 2,
    Arith = 3,
    Touch = 4,
    Admin = 5,
}

pub const FAMILIES: [&str; 6] = ["get", "store", "delete", "arith", "touch", "admin"];

const SUB: usize = 4;
const BUCKETS: usize = 64 * SUB;
/// libmemcached's return codes stay below this.
const RETCODES: usize = 64;

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
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
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

/// One server's counters.
#[derive(Default)]
pub struct ServerMetrics {
    requests: [AtomicU64; 6],
    /// Keys are counted as what differs from one per request (most requests have one key:
    /// then only `requests` is touched): those beyond the first, and requests without any.
    extra_keys: [AtomicU64; 6],
    keyless: [AtomicU64; 6],
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub stored: AtomicU64,
    pub not_stored: AtomicU64,
    errors: ErrorCounts,
    pub timeouts: AtomicU64,
    pub connects: AtomicU64,
    /// Shared with the server's connections, which count themselves when dropped.
    closes: Arc<AtomicU64>,
    pub down_skips: AtomicU64,
    /// Stalls that a fresh connection showed to be the connection's, not the server's.
    pub transient: AtomicU64,
    pub ejections: AtomicU64,
    pub rejoins: AtomicU64,
    pub bytes_out: AtomicU64,
    pub bytes_in: AtomicU64,
    latency: [Histogram; 6],
}

struct ErrorCounts(Vec<AtomicU64>);

impl Default for ErrorCounts {
    fn default() -> Self {
        ErrorCounts((0..RETCODES).map(|_| AtomicU64::new(0)).collect())
    }
}

impl ServerMetrics {
    /// One batch of `keys` keys of `family` took `elapsed`, sending `out` and reading `inn`
    /// bytes; `failed` when it ended with an error.
    /// One request to the server: `elapsed` is its latency, `None` for `noreply` writes, whose
    /// answer nobody waits for (they are counted, not timed).
    pub fn batch(
        &self,
        family: Family,
        keys: usize,
        elapsed: Option<Duration>,
        out: usize,
        inn: u64,
    ) {
        let f = family as usize;
        if let Some(r) = self.requests.get(f) {
            r.fetch_add(1, Relaxed);
        }
        let more = match keys {
            1 => None,
            0 => self.keyless.get(f).map(|c| (c, 1)),
            n => self.extra_keys.get(f).map(|c| (c, n as u64 - 1)),
        };
        if let Some((c, n)) = more {
            c.fetch_add(n, Relaxed);
        }
        if let (Some(h), Some(d)) = (self.latency.get(f), elapsed) {
            h.record(d);
        }
        self.bytes_out.fetch_add(out as u64, Relaxed);
        if inn != 0 {
            self.bytes_in.fetch_add(inn, Relaxed);
        }
    }

    pub fn error(&self, e: &Error) {
        if let Some(c) = self.errors.0.get(e.retcode() as usize) {
            c.fetch_add(1, Relaxed);
        }
        if matches!(e, Error::Timeout) {
            self.timeouts.fetch_add(1, Relaxed);
        }
    }

    pub fn closes_handle(&self) -> Arc<AtomicU64> {
        self.closes.clone()
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |a: &AtomicU64| a.load(Relaxed);
        MetricsSnapshot {
            requests: self.requests.each_ref().map(load),
            keys: std::array::from_fn(|f| {
                (load(&self.requests[f]) + load(&self.extra_keys[f]))
                    .saturating_sub(load(&self.keyless[f]))
            }),
            hits: load(&self.hits),
            misses: load(&self.misses),
            stored: load(&self.stored),
            not_stored: load(&self.not_stored),
            errors: self
                .errors
                .0
                .iter()
                .enumerate()
                .filter_map(|(rc, c)| {
                    let n = load(c);
                    (n > 0).then_some((rc as u32, n))
                })
                .collect(),
            timeouts: load(&self.timeouts),
            connects: load(&self.connects),
            closes: load(&self.closes),
            down_skips: load(&self.down_skips),
            transient: load(&self.transient),
            ejections: load(&self.ejections),
            rejoins: load(&self.rejoins),
            bytes_out: load(&self.bytes_out),
            bytes_in: load(&self.bytes_in),
            latency: self.latency.each_ref().map(Histogram::snapshot),
            idle: 0,
        }
    }
}

/// A copy of one server's metrics.
#[derive(Clone, Debug, Default)]
pub struct MetricsSnapshot {
    /// Requests (server batches) and keys, by family (`FAMILIES` order).
    pub requests: [u64; 6],
    pub keys: [u64; 6],
    pub hits: u64,
    pub misses: u64,
    pub stored: u64,
    pub not_stored: u64,
    /// (libmemcached return code, count) for every error seen.
    pub errors: Vec<(u32, u64)>,
    pub timeouts: u64,
    pub connects: u64,
    pub closes: u64,
    pub down_skips: u64,
    /// Stalls checked on a fresh connection that found the server alive: a read answered
    /// there, or a write that failed without marking the server down.
    pub transient: u64,
    pub ejections: u64,
    pub rejoins: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub latency: [LatencySnapshot; 6],
    /// Idle connections in the pool now.
    pub idle: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_counted_per_request_and_noreply_writes_are_not_timed() {
        let m = ServerMetrics::default();
        let ms = Duration::from_millis(1);
        m.batch(Family::Get, 1, Some(ms), 10, 20);
        m.batch(Family::Get, 5, Some(ms), 10, 20);
        m.batch(Family::Get, 0, Some(ms), 10, 20);
        m.batch(Family::Delete, 1, None, 10, 0);
        m.batch(Family::Delete, 3, None, 10, 0);
        let s = m.snapshot();
        let (g, d) = (Family::Get as usize, Family::Delete as usize);
        assert_eq!((s.requests[g], s.keys[g]), (3, 6));
        assert_eq!((s.requests[d], s.keys[d]), (2, 4));
        assert_eq!(m.latency[g].snapshot().count, 3);
        assert_eq!(m.latency[d].snapshot().count, 0);
        assert_eq!((s.bytes_out, s.bytes_in), (50, 60));
    }

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
            h.record(Duration::from_micros(us));
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
