//! `Client.metrics()`: the core's per-server metrics as a dict keyed by server, with errors
//! counted under pylibmc's exception class names and latencies in seconds. Attached only; no
//! I/O. Uses `metrics` (core) and `py::errors` for the class names.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::PyClient;
use crate::metrics::{LatencySnapshot, MetricsSnapshot, FAMILIES};
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

fn server<'py>(py: Python<'py>, m: &MetricsSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let by_family = |v: &[u64; 6]| -> PyResult<Bound<'py, PyDict>> {
        let f = PyDict::new(py);
        for (name, n) in FAMILIES.iter().zip(v) {
            f.set_item(*name, *n)?;
        }
        Ok(f)
    };
    d.set_item("requests", by_family(&m.requests)?)?;
    d.set_item("keys", by_family(&m.keys)?)?;
    d.set_item("hits", m.hits)?;
    d.set_item("misses", m.misses)?;
    d.set_item("stored", m.stored)?;
    d.set_item("not_stored", m.not_stored)?;
    let errors = PyDict::new(py);
    for &(rc, n) in &m.errors {
        let name = errors::class_name_of_retcode(rc);
        let before: u64 = match errors.get_item(name)? {
            Some(v) => v.extract()?,
            None => 0,
        };
        errors.set_item(name, before + n)?;
    }
    d.set_item("errors", errors)?;
    d.set_item("timeouts", m.timeouts)?;
    d.set_item("connections_opened", m.connects)?;
    d.set_item("connections_closed", m.closes)?;
    d.set_item("connections_open", m.connects.saturating_sub(m.closes))?;
    d.set_item("connections_idle", m.idle)?;
    d.set_item("server_down_skips", m.down_skips)?;
    d.set_item("transient_failures", m.transient)?;
    d.set_item("ejections", m.ejections)?;
    d.set_item("rejoins", m.rejoins)?;
    d.set_item("bytes_sent", m.bytes_out)?;
    d.set_item("bytes_received", m.bytes_in)?;
    let lat = PyDict::new(py);
    for (name, l) in FAMILIES.iter().zip(&m.latency) {
        lat.set_item(*name, latency(py, l)?)?;
    }
    d.set_item("latency", lat)?;
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
