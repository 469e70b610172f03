//! The native client class, `_pylibmc.client` (Rust `PyClient`, its state in `state.rs`): the
//! `#[pymethods]` table of pylibmc's surface with its C-level signatures (fastmc's own methods
//! are the table in `extensions.rs`), where each body is one call into a family: `init`
//! (construction, behaviors, clone), `single` (one key), `multi` (many keys), `lease` (stampede
//! protection, `gat`), `admin` (whole client), `membership` (`set_servers`), `metrics`; `codec`
//! encodes and decodes values. Uses `py::args` for the arguments the table converts itself and
//! `protocol::StoreCmd`.

pub(crate) mod admin;
mod codec;
mod extensions;
pub(crate) mod finish;
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
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use super::args::{pin, MaybeArg};
use crate::protocol::StoreCmd;
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

    /// Get multiple keys at once; misses are absent from the result.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', server_key=None)"
    )]
    fn get_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDict>> {
        let _pin = pin(server_key)?;
        multi::fetch::fetch(slf, keys, key_prefix, false, None)
    }

    /// Set multiple keys at once; returns the keys that were not stored.
    #[pyo3(
        signature = (keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing,
                     min_compress_len=MaybeArg::Missing, compress_level=MaybeArg::Missing, *,
                     noreply=false, server_key=None),
        text_signature = "($self, keys, time=0, key_prefix=b'', min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn set_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        key_prefix: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyList>> {
        let _pin = pin(server_key)?;
        let opts = (time, key_prefix, min_compress_len, compress_level);
        multi::store::store(slf, StoreCmd::Set, keys, opts, noreply)
    }

    /// Add multiple keys at once; returns the keys that were not stored.
    #[pyo3(
        signature = (keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing,
                     min_compress_len=MaybeArg::Missing, compress_level=MaybeArg::Missing, *,
                     noreply=false, server_key=None),
        text_signature = "($self, keys, time=0, key_prefix=b'', min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn add_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        key_prefix: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyList>> {
        let _pin = pin(server_key)?;
        let opts = (time, key_prefix, min_compress_len, compress_level);
        multi::store::store(slf, StoreCmd::Add, keys, opts, noreply)
    }

    /// Delete multiple keys at once; True only if every key was deleted.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', *, noreply=False, server_key=None)"
    )]
    fn delete_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        noreply: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _pin = pin(server_key)?;
        multi::delete::delete_multi(slf, keys, key_prefix, noreply)
    }

    /// Increment multiple keys by a delta; returns None.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, delta=MaybeArg::Missing, *, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', delta=1, *, server_key=None)"
    )]
    fn incr_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        delta: MaybeArg<'_, '_>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _pin = pin(server_key)?;
        multi::incr::incr_multi(slf, keys, key_prefix, delta)
    }

    /// Flush all data on all servers.
    #[pyo3(signature = (time=MaybeArg::Missing), text_signature = "($self, time=0)")]
    fn flush_all(slf: &Bound<'_, Self>, time: MaybeArg<'_, '_>) -> PyResult<bool> {
        admin::flush_all(slf, time)
    }

    /// Retrieve statistics from all memcached servers.
    #[pyo3(
        signature = (stat_args=MaybeArg::Missing, /),
        text_signature = "($self, stat_args=..., /)"
    )]
    fn get_stats(slf: &Bound<'_, Self>, stat_args: MaybeArg<'_, '_>) -> PyResult<Py<PyList>> {
        admin::get_stats(slf, stat_args)
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
