//! Per-server metrics, always on, and their schema. `metric_table!` below declares every metric
//! once (snapshot field, key in `Client.metrics()`, Prometheus name, kind, help): the snapshot,
//! the counted atomics, the binding's dict and `SCHEMA` (which the Prometheus collector and the
//! docs' test read through the binding) all derive from it.
//!
//! Counters and latency histograms (`histogram`) are relaxed atomics, updated once per server
//! batch (not per key) by the driver, so that keeping them costs a few atomic adds per request.
//! `ServerMetrics::snapshot` copies them out for reporting. Its one lock is the opt-in hot-key
//! summary's (`hot`), taken for a sampled key only. Uses `error` for retcodes. Never Python.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::error::Error;

pub mod histogram;

use histogram::LatencySnapshot;
pub mod hot;

use histogram::Histogram;
use hot::HotKeys;

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

/// libmemcached's return codes stay below this.
const RETCODES: usize = 64;

/// How a metric counts, as Prometheus types it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows over the client's life.
    Counter,
    /// A level now.
    Gauge,
    /// Latencies: count, total and percentiles, by family.
    Histogram,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// What a metric's values are split by, beyond the server; its snapshot type decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// The operation family (`FAMILIES`).
    Family,
    /// pylibmc's exception class, named by the binding from libmemcached's return code.
    Class,
}

impl Label {
    pub fn name(self) -> &'static str {
        match self {
            Label::Family => "family",
            Label::Class => "class",
        }
    }
}

/// One row of the metric table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metric {
    /// Its key in the binding's `Client.metrics()` dict.
    pub key: &'static str,
    /// Its name in the Prometheus exposition (with `_total` for counters).
    pub prometheus: &'static str,
    pub kind: Kind,
    pub label: Option<Label>,
    /// What it counts, without the label (the collector adds ", by family").
    pub help: &'static str,
}

/// One metric's value in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Count(u64),
    ByFamily(&'a [u64; 6]),
    /// (libmemcached return code, count) for every error seen.
    ByRetcode(&'a [(u32, u64)]),
    Latency(&'a [LatencySnapshot; 6]),
}

/// The snapshot types a metric may have, and the label each implies.
pub trait Reading {
    const LABEL: Option<Label>;
    fn value(&self) -> Value<'_>;
}

impl Reading for u64 {
    const LABEL: Option<Label> = None;
    fn value(&self) -> Value<'_> {
        Value::Count(*self)
    }
}

impl Reading for [u64; 6] {
    const LABEL: Option<Label> = Some(Label::Family);
    fn value(&self) -> Value<'_> {
        Value::ByFamily(self)
    }
}

impl Reading for Vec<(u32, u64)> {
    const LABEL: Option<Label> = Some(Label::Class);
    fn value(&self) -> Value<'_> {
        Value::ByRetcode(self)
    }
}

impl Reading for [LatencySnapshot; 6] {
    const LABEL: Option<Label> = Some(Label::Family);
    fn value(&self) -> Value<'_> {
        Value::Latency(self)
    }
}

/// Declares every metric once; see the table below for its rows.
macro_rules! metric_table {
    ($(
        $(#[$doc:meta])*
        $field:ident: $ty:ty, $source:ident,
            $key:literal, $prometheus:literal, $kind:ident, $help:literal;
    )*) => {
        /// A copy of one server's metrics: one field per row of the table.
        #[derive(Clone, Debug, Default)]
        pub struct MetricsSnapshot {
            $($(#[$doc])* pub $field: $ty,)*
        }

        /// The metric table, in `Client.metrics()` order.
        pub const SCHEMA: &[Metric] = &[$(Metric {
            key: $key,
            prometheus: $prometheus,
            kind: Kind::$kind,
            label: <$ty as Reading>::LABEL,
            help: $help,
        },)*];

        impl MetricsSnapshot {
            /// Every metric's row and value, in table order.
            pub fn values(&self) -> impl Iterator<Item = (&'static Metric, Value<'_>)> {
                SCHEMA.iter().zip([$(Reading::value(&self.$field),)*])
            }
        }

        counted_struct!([] $($source $field)*);
    };
}

/// `Counted`: one atomic for each `counted` row of the table (a muncher: it keeps those rows).
macro_rules! counted_struct {
    ([$($done:ident)*]) => {
        /// The table's `counted` metrics: relaxed atomics, added to where the event happens.
        #[derive(Default)]
        pub struct Counted {
            $(pub $done: AtomicU64,)*
        }

        impl Counted {
            fn copy_into(&self, s: &mut MetricsSnapshot) {
                $(s.$done = self.$done.load(Relaxed);)*
            }
        }
    };
    ([$($done:ident)*] counted $field:ident $($rest:tt)*) => {
        counted_struct!([$($done)* $field] $($rest)*);
    };
    ([$($done:ident)*] derived $field:ident $($rest:tt)*) => {
        counted_struct!([$($done)*] $($rest)*);
    };
}

// The metrics. A `counted` row is a `u64` kept in `ServerMetrics::counted` (add to it where the
// event happens: nothing else to write); a `derived` one is computed by
// `ServerMetrics::snapshot` (or `Server::metrics_snapshot`) from storage of its own.
metric_table! {
    // field: snapshot type, source,
    //     key in `Client.metrics()`, Prometheus name, kind, help;
    /// Requests (server batches) by family (`FAMILIES` order).
    requests: [u64; 6], derived,
        "requests", "fastmc_requests_total", Counter, "Requests sent to a server";
    /// Keys in those requests, by family.
    keys: [u64; 6], derived,
        "keys", "fastmc_keys_total", Counter, "Keys in the requests sent to a server";
    hits: u64, counted,
        "hits", "fastmc_hits_total", Counter, "Keys found by get requests";
    misses: u64, counted,
        "misses", "fastmc_misses_total", Counter, "Keys not found by get requests";
    stored: u64, counted,
        "stored", "fastmc_stored_total", Counter, "Keys stored by storage requests";
    not_stored: u64, counted,
        "not_stored", "fastmc_not_stored_total", Counter,
        "Keys not stored by storage requests (NOT_STORED, EXISTS, NOT_FOUND)";
    /// (libmemcached return code, count) for every error seen.
    errors: Vec<(u32, u64)>, derived,
        "errors", "fastmc_errors_total", Counter, "Failed keys or requests";
    timeouts: u64, counted,
        "timeouts", "fastmc_timeouts_total", Counter, "Requests that timed out";
    connects: u64, counted,
        "connections_opened", "fastmc_connections_opened_total", Counter, "Connections opened";
    /// Counted by the server's connections when they are dropped.
    closes: u64, derived,
        "connections_closed", "fastmc_connections_closed_total", Counter, "Connections closed";
    open: u64, derived,
        "connections_open", "fastmc_connections_open", Gauge, "Connections open";
    /// Idle connections in the pool now (`Server::metrics_snapshot`).
    idle: u64, derived,
        "connections_idle", "fastmc_connections_idle", Gauge, "Idle pooled connections";
    down_skips: u64, counted,
        "server_down_skips", "fastmc_server_down_skips_total", Counter,
        "Requests failed at once because the server was marked down";
    /// Stalls checked on a fresh connection that found the server alive: a read answered
    /// there, or a write that failed without marking the server down.
    transient: u64, counted,
        "transient_failures", "fastmc_transient_failures_total", Counter,
        "Stalled requests that a fresh connection showed the server alive for (not marked down)";
    ejections: u64, counted,
        "ejections", "fastmc_ejections_total", Counter, "Times the server was ejected from the ring";
    rejoins: u64, counted,
        "rejoins", "fastmc_rejoins_total", Counter,
        "Times an ejected server came back into the ring";
    bytes_out: u64, counted,
        "bytes_sent", "fastmc_sent_bytes_total", Counter, "Bytes sent";
    bytes_in: u64, counted,
        "bytes_received", "fastmc_received_bytes_total", Counter, "Bytes received";
    /// Latencies by family, of the requests whose answer was waited for.
    latency: [LatencySnapshot; 6], derived,
        "latency", "fastmc_request_duration_seconds", Histogram, "Request duration";
}

/// One server's metrics: the table's counted ones, and what its derived ones are computed from.
#[derive(Default)]
pub struct ServerMetrics {
    pub counted: Counted,
    requests: [AtomicU64; 6],
    /// Keys are counted as what differs from one per request (most requests have one key:
    /// then only `requests` is touched): those beyond the first, and requests without any.
    extra_keys: [AtomicU64; 6],
    keyless: [AtomicU64; 6],
    errors: ErrorCounts,
    /// Shared with the server's connections, which count themselves when dropped.
    closes: Arc<AtomicU64>,
    latency: [Histogram; 6],
    /// The keys asked for most (`hot`), when hot-key telemetry is on.
    pub hot: HotKeys,
}

struct ErrorCounts(Vec<AtomicU64>);

impl Default for ErrorCounts {
    fn default() -> Self {
        ErrorCounts((0..RETCODES).map(|_| AtomicU64::new(0)).collect())
    }
}

impl ServerMetrics {
    /// One batch of `keys` keys of `family` took `elapsed_ns` nanoseconds, sending `out` and
    /// reading `inn` bytes: `elapsed_ns` is its latency, `None` for `noreply` writes, whose
    /// answer nobody waits for (they are counted, not timed). Errors are counted apart
    /// (`error`).
    pub fn batch(
        &self,
        family: Family,
        keys: usize,
        elapsed_ns: Option<u64>,
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
        if let (Some(h), Some(ns)) = (self.latency.get(f), elapsed_ns) {
            h.record_ns(ns);
        }
        self.counted.bytes_out.fetch_add(out as u64, Relaxed);
        if inn != 0 {
            self.counted.bytes_in.fetch_add(inn, Relaxed);
        }
    }

    pub fn error(&self, e: &Error) {
        if let Some(c) = self.errors.0.get(e.retcode() as usize) {
            c.fetch_add(1, Relaxed);
        }
        if matches!(e, Error::Timeout) {
            self.counted.timeouts.fetch_add(1, Relaxed);
        }
    }

    pub fn closes_handle(&self) -> Arc<AtomicU64> {
        self.closes.clone()
    }

    /// The counted metrics, and the derived ones but `idle` (the server's pool knows it).
    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |a: &AtomicU64| a.load(Relaxed);
        let mut s = MetricsSnapshot {
            requests: self.requests.each_ref().map(load),
            keys: std::array::from_fn(|f| {
                (load(&self.requests[f]) + load(&self.extra_keys[f]))
                    .saturating_sub(load(&self.keyless[f]))
            }),
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
            closes: load(&self.closes),
            latency: self.latency.each_ref().map(Histogram::snapshot),
            ..MetricsSnapshot::default()
        };
        self.counted.copy_into(&mut s);
        s.open = s.connects.saturating_sub(s.closes);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_counted_per_request_and_noreply_writes_are_not_timed() {
        let m = ServerMetrics::default();
        let ms = 1_000_000;
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
    fn every_row_is_named_and_typed_consistently() {
        let s = MetricsSnapshot::default();
        assert_eq!(s.values().count(), SCHEMA.len());
        let mut seen = std::collections::HashSet::new();
        for (m, v) in s.values() {
            assert!(seen.insert(m.key) && seen.insert(m.prometheus), "{m:?}");
            assert!(m.prometheus.starts_with("fastmc_"), "{m:?}");
            assert_eq!(m.prometheus.ends_with("_total"), m.kind == Kind::Counter);
            assert_eq!(m.kind == Kind::Histogram, matches!(v, Value::Latency(_)));
            if m.kind == Kind::Histogram {
                assert!(m.prometheus.ends_with("_seconds"), "{m:?}");
            }
            let label = match v {
                Value::Count(_) => None,
                Value::ByFamily(_) | Value::Latency(_) => Some(Label::Family),
                Value::ByRetcode(_) => Some(Label::Class),
            };
            assert_eq!(m.label, label, "{m:?}");
            assert!(!m.help.is_empty() && !m.help.contains(", by "), "{m:?}");
        }
    }

    #[test]
    fn counted_and_derived_metrics_reach_the_snapshot() {
        let m = ServerMetrics::default();
        m.counted.hits.fetch_add(3, Relaxed);
        m.counted.connects.fetch_add(2, Relaxed);
        m.closes_handle().fetch_add(1, Relaxed);
        m.error(&Error::Timeout);
        let s = m.snapshot();
        assert_eq!((s.hits, s.connects, s.closes, s.open), (3, 2, 1, 1));
        assert_eq!(s.timeouts, 1);
        assert_eq!(s.errors, vec![(Error::Timeout.retcode(), 1)]);
        let hits = s.values().find(|(m, _)| m.key == "hits");
        assert_eq!(hits.map(|(_, v)| v), Some(Value::Count(3)));
    }
}
