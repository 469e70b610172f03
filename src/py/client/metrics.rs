//! `Client.metrics()` and `metric_schema()`: the core's per-server metrics as a dict keyed by
//! server, one key per row of the core's metric table (`metrics::SCHEMA`), with errors counted
//! under pylibmc's exception class names and latencies in seconds; and the table itself. Attached
//! only; no I/O. Uses `metrics` (core) and `py::errors` for the class names.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;

use super::PyClient;
use crate::metrics::{LatencySnapshot, MetricsSnapshot, Value, FAMILIES, SCHEMA};
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

/// fastmc extension: every server's metrics, `{"host:port": {...}}` in server order.
pub(super) fn metrics(slf: &Bound<'_, PyClient>) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let all = detached(py, slf.get(), |core| Ok(core.metrics()))?;
    let out = PyDict::new(py);
    for (addr, m) in &all {
        out.set_item(addr.display_name(), server(py, m)?)?;
    }
    Ok(out.unbind())
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
