//! `Client.metrics()`, `hot_keys()` and `metric_schema()`: the core's per-server metrics as a
//! dict keyed by server, one key per row of the core's metric table (`metrics::SCHEMA`), with errors counted
//! under pylibmc's exception class names and latencies in seconds; and the table itself. Attached
//! only; no I/O. Uses `metrics` (core) and `py::errors` for the class names.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use pyo3::IntoPyObjectExt;

use super::state::PyClient;
use crate::metrics::histogram::LatencySnapshot;
use crate::metrics::hot::HotKey;
use crate::metrics::{MetricsSnapshot, Value, FAMILIES, SCHEMA};
use crate::py::args::{pin, str_or_bytes, ArgPos};
use crate::py::errors;
use crate::py::io::detached;

fn latency<'py>(py: Python<'py>, l: &LatencySnapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let secs = |ns: u64| ns as f64 / 1e9;
    d.set_item("count", l.count)?;
    d.set_item("p50", secs(l.p50_ns))?;
    d.set_item("p90", secs(l.p90_ns))?;
    d.set_item("p99", secs(l.p99_ns))?;
    d.set_item("max", secs(l.max_ns))?;
    d.set_item("total", secs(l.sum_ns))?;
    Ok(d)
}

/// `{family: value}` in `FAMILIES` order.
fn by_family<'py, T>(
    py: Python<'py>,
    values: &[T; 6],
    mut one: impl FnMut(&T) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    for (name, v) in FAMILIES.iter().zip(values) {
        d.set_item(*name, one(v)?)?;
    }
    Ok(d.into_any())
}

/// `{class name: count}`: return codes of one pylibmc class add up.
fn by_class<'py>(py: Python<'py>, counts: &[(u32, u64)]) -> PyResult<Bound<'py, PyAny>> {
    let d = PyDict::new(py);
    for &(rc, n) in counts {
        let name = errors::class_name_of_retcode(rc);
        let before: u64 = match d.get_item(name)? {
            Some(v) => v.extract()?,
            None => 0,
        };
        d.set_item(name, before + n)?;
    }
    Ok(d.into_any())
}

fn value<'py>(py: Python<'py>, v: Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    match v {
        Value::Count(n) => n.into_bound_py_any(py),
        Value::ByFamily(counts) => by_family(py, counts, |n| n.into_bound_py_any(py)),
        Value::ByRetcode(counts) => by_class(py, counts),
        Value::Latency(l) => by_family(py, l, |l| Ok(latency(py, l)?.into_any())),
    }
}

fn server<'py>(py: Python<'py>, m: &MetricsSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (metric, v) in m.values() {
        d.set_item(metric.key, value(py, v)?)?;
    }
    Ok(d)
}

/// fastmc extension: every server's metrics, `{"host:port": {...}}` in server order; while
/// hot-key telemetry is on, each server's also has `"hot_keys"` (as `hot_keys()` lists them).
pub(super) fn metrics(slf: &Bound<'_, PyClient>) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let (all, hot) = detached(py, slf.get(), |core| {
        let hot = core.behaviors().hot.on().then(|| core.hot_keys(false));
        Ok((core.metrics(), hot))
    })?;
    let out = PyDict::new(py);
    for (i, (addr, m)) in all.iter().enumerate() {
        let d = server(py, m)?;
        if let Some((_, keys)) = hot.as_ref().and_then(|h| h.get(i)) {
            d.set_item("hot_keys", hot_list(py, keys)?)?;
        }
        out.set_item(addr.display_name(), d)?;
    }
    Ok(out.unbind())
}

/// One server's hot keys as `[(key, count, error), ...]`, hottest first.
fn hot_list<'py>(py: Python<'py>, keys: &[HotKey]) -> PyResult<Bound<'py, PyList>> {
    let rows = keys
        .iter()
        .map(|h| (PyBytes::new(py, &h.key), h.count, h.error));
    PyList::new(py, rows)
}

/// fastmc extension: every server's hot keys, `{"host:port": [(key, count, error), ...]}` in
/// server order (`metrics::hot`); with `reset`, each server's summary starts again.
pub(super) fn hot_keys(slf: &Bound<'_, PyClient>, reset: bool) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let all = detached(py, slf.get(), |core| Ok(core.hot_keys(reset)))?;
    let out = PyDict::new(py);
    for (addr, keys) in &all {
        out.set_item(addr.display_name(), hot_list(py, keys)?)?;
    }
    Ok(out.unbind())
}

/// Where `key` (placed by `server_key`, if given) stands among its server's hot keys: `(rank,
/// estimated requests)`, rank 1 the hottest, or `None`. For the tracing integration.
pub(super) fn hot_rank(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    server_key: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<(usize, u64)>> {
    let k = str_or_bytes(key, ArgPos::of("_hot_rank", 1))?;
    let _pin = pin(server_key)?;
    detached(slf.py(), slf.get(), |core| Ok(core.hot_rank(k)))
}

/// One row of `metric_schema()`: key, Prometheus name, kind, label, help.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
);

/// fastmc extension: the metric table, one `(key, prometheus_name, kind, label, help)` per key
/// of a server's `metrics()` dict, in its order. `kind` is "counter", "gauge" or "histogram";
/// `label` is what the value is a dict by ("family", or "class": pylibmc's exception class), or
/// None for a number.
#[pyfunction]
pub fn metric_schema() -> Vec<Row> {
    SCHEMA
        .iter()
        .map(|m| {
            let label = m.label.map(|l| l.name());
            (m.key, m.prometheus, m.kind.name(), label, m.help)
        })
        .collect()
}
