//! The native client class, `_pylibmc.client` (Rust `PyClient`, its state in `state.rs`), and
//! its method families. The methods that make a request of the servers are each one type of a
//! family (`method::Method`), and one row each of the table in `py::methods`, which makes the
//! blocking method and its asyncio twin. This file's `#[pymethods]` table holds the rest of
//! pylibmc's surface (construction, `clone`, `hash`, the codec's, behaviors, `disconnect_all`);
//! `extensions.rs` fastmc's own (listeners, membership, metrics, warm-up, `debug`,
//! `invalidate`). The families: `init` (construction, behaviors, clone), `single` (one key),
//! `multi` (many keys), `lease` (stampede protection), `near` (the near cache's checks),
//! `admin` (whole client), `membership` (`set_servers`), `metrics`; `codec` encodes and decodes
//! values.

pub(crate) mod admin;
mod codec;
mod extensions;
mod init;
pub(crate) mod lease;
pub(crate) mod membership;
pub(crate) mod method;
pub(crate) mod metrics;
pub(crate) mod multi;
pub(crate) mod near;
pub(crate) mod single;
pub(crate) mod state;

use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use state::PyClient;

#[pymethods]
impl PyClient {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        PyClient::empty()
    }

    /// `_pylibmc.client(servers, binary=False, username=None, password=None, behaviors=None)`,
    /// plus fastmc's keyword-only TLS and value-policy arguments.
    #[pyo3(signature = (servers, binary=None, username=None, password=None, behaviors=None, *,
                        tls=false, tls_ca_file=None, tls_cert_file=None, tls_key_file=None,
                        tls_server_name=None, pickle="allow", signing_keys=Vec::new(),
                        accept_unsigned_pickles=false, pickle_loads=None, compression="zlib",
                        zstd_level=crate::compress::DEFAULT_LEVEL, zstd_dict=None,
                        zstd_min_len=0, serializer="pickle"))]
    #[allow(clippy::too_many_arguments)]
    fn __init__(
        slf: &Bound<'_, Self>,
        servers: &Bound<'_, PyAny>,
        binary: Option<&Bound<'_, PyAny>>,
        username: Option<&Bound<'_, PyAny>>,
        password: Option<&Bound<'_, PyAny>>,
        behaviors: Option<&Bound<'_, PyAny>>,
        tls: bool,
        tls_ca_file: Option<String>,
        tls_cert_file: Option<String>,
        tls_key_file: Option<String>,
        tls_server_name: Option<String>,
        pickle: &str,
        signing_keys: Vec<Vec<u8>>,
        accept_unsigned_pickles: bool,
        pickle_loads: Option<Py<PyAny>>,
        compression: &str,
        zstd_level: i32,
        zstd_dict: Option<Vec<u8>>,
        zstd_min_len: u32,
        serializer: &str,
    ) -> PyResult<()> {
        let pickles = (pickle, signing_keys, accept_unsigned_pickles, pickle_loads);
        let compression = (compression, zstd_level, zstd_dict, zstd_min_len);
        slf.get().set_values(init::value_policy(
            slf.py(),
            pickles,
            compression,
            serializer,
        )?);
        let files = (tls_ca_file, tls_cert_file, tls_key_file, tls_server_name);
        let sasl = (username, password);
        init::init(
            slf,
            servers,
            binary,
            sasl,
            behaviors,
            tls,
            init::tls_options(files),
        )
    }

    /// Disconnect from all servers and reset their failure state.
    fn disconnect_all(slf: &Bound<'_, Self>) -> PyResult<()> {
        admin::disconnect_all(slf)
    }

    /// Clone this client: same servers and behaviors, its own connections.
    fn clone(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        init::clone(slf)
    }

    /// The index of the server a key maps to.
    #[pyo3(signature = (key, /))]
    fn hash(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        admin::hash(slf, key)
    }

    /// Serialize a value to (bytes, flags) the way pylibmc does (no compression).
    #[pyo3(signature = (value, /))]
    fn serialize(slf: &Bound<'_, Self>, value: &Bound<'_, PyAny>) -> PyResult<(Py<PyBytes>, u32)> {
        admin::serialize(slf, value)
    }

    /// Deserialize (bytes, flags) the way pylibmc does (no decompression).
    #[pyo3(signature = (data, flags, /))]
    fn deserialize(
        slf: &Bound<'_, Self>,
        data: &Bound<'_, PyAny>,
        flags: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        admin::deserialize(slf, data, flags)
    }

    /// The behaviors as numbers, in pylibmc's order.
    fn get_behaviors(slf: &Bound<'_, Self>) -> PyResult<Py<PyDict>> {
        init::get_behaviors(slf)
    }

    /// Set behaviors from a dict of numbers (names as in `all_behaviors`, plus `namespace`).
    fn set_behaviors(slf: &Bound<'_, Self>, behaviors: &Bound<'_, PyAny>) -> PyResult<()> {
        init::set_behaviors(slf, behaviors)
    }

    #[getter]
    fn binary_protocol(slf: &Bound<'_, Self>) -> bool {
        slf.get().binary.load(Ordering::Relaxed)
    }
}
