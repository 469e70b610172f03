//! The PyO3 binding: the only part of the crate that touches Python. Registration only here; the
//! client class is `client`, its one way into the core `io`, its one error edge `errors`, argument
//! conversion `args` and `servers`, value conversion `serde`.

pub mod aio;
pub mod args;
pub mod client;
pub mod errors;
pub mod events;
pub mod fake;
mod io;
mod methods;
pub mod serde;
pub mod servers;
pub mod stored;
pub mod structured;
pub mod values;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::behaviors::ALL_BEHAVIORS;
use crate::ring::hash::HashKind;
use crate::ring::Distribution;

/// Whether the allow-list unpickler may hand `data` to `pickle.loads` unchecked (for the tests,
/// which hold the scan against CPython's own reading of pickles).
#[pyfunction]
fn _pickle_is_plain(data: &[u8]) -> bool {
    crate::pickle_scan::is_plain_data(data)
}

/// A zstd dictionary of at most `size` bytes trained on `samples` (`fastmc.values` wraps it).
#[pyfunction]
fn _zstd_train<'py>(
    py: Python<'py>,
    samples: Vec<Bound<'py, PyBytes>>,
    size: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let owned: Vec<Vec<u8>> = samples.iter().map(|s| s.as_bytes().to_vec()).collect();
    let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let dict = io::released(py, || crate::compress::train(&refs, size))
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(PyBytes::new(py, &dict))
}

#[pymodule(gil_used = false)]
fn _fastmc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<client::state::PyClient>()?;
    m.add_class::<aio::PyAioClient>()?;
    m.add_class::<aio::binding::PyMailbox>()?;
    m.add_class::<aio::binding::PyDirect>()?;
    m.add_class::<aio::future::PyAioFuture>()?;
    m.add_class::<aio::binding::PyReader>()?;
    m.add_class::<fake::PyFakeClock>()?;
    m.add_class::<fake::PyFakeCore>()?;
    m.add_class::<fake::PyFakeSession>()?;
    errors::init_retcodes(py)?;
    let excs = PyList::empty(py);
    for (name, cls, _) in errors::all_exceptions(py) {
        m.add(name, &cls)?;
        excs.append((name, cls))?;
    }
    m.add_function(wrap_pyfunction!(_pickle_is_plain, m)?)?;
    m.add_function(wrap_pyfunction!(client::metrics::metric_schema, m)?)?;
    m.add_function(wrap_pyfunction!(_zstd_train, m)?)?;
    // fastmc's own, outside pylibmc's `exceptions` list.
    m.add(
        "RefusedValueError",
        py.get_type::<errors::RefusedValueError>(),
    )?;
    m.add("MemcachedError", errors::all_exceptions(py)[0].1.clone())?;
    m.add("exceptions", excs)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // fastmc emulates libmemcached 1.0.16, the library inside the pylibmc 1.6.3 wheel.
    m.add("libmemcached_version", "1.0.16")?;
    m.add("libmemcached_version_hex", 0x0100_0016)?;
    m.add("support_compression", true)?;
    m.add("support_sasl", true)?;
    m.add("server_type_tcp", 1)?;
    m.add("server_type_udp", 2)?;
    m.add("server_type_unix", 4)?;
    for code in 0..10 {
        if let Some(h) = HashKind::from_code(code) {
            m.add(format!("hash_{}", h.name()), code)?;
        }
    }
    for code in 0..8 {
        if let Some(d) = Distribution::from_code(code) {
            m.add(format!("distribution_{}", d.name().replace(' ', "_")), code)?;
        }
    }
    m.add("all_behaviors", ALL_BEHAVIORS.to_vec())?;
    m.add(
        "fastmc_behaviors",
        crate::behaviors::FASTMC_BEHAVIORS.to_vec(),
    )?;
    m.add("callback_namespace", 0)?;
    m.add("all_callbacks", vec!["namespace"])?;
    Ok(())
}
