//! fastmc's own methods of the native client class, `_pylibmc.client`, that are not a request
//! of one operation (those are rows of `py::methods`): a `#[pymethods]` table beside `mod.rs`'s
//! (PyO3's `multiple-pymethods`). Here: the event listeners, live membership, metrics and hot
//! keys, warm-up, `debug`, the serializer's name, the stats lines of the command line, and
//! `invalidate`/`invalidate_multi` (a meta request, then a delete where the server has no meta
//! protocol). Each body is one call into a family, as in `mod.rs`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::state::PyClient;
use super::{admin, lease, membership, metrics};
use crate::py::args::{pin, MaybeArg};

#[pymethods]
impl PyClient {
    /// Every stat each server sent, in its order (the command line's `stats GROUP`).
    #[pyo3(signature = (stat_args=MaybeArg::Missing, /))]
    fn _stats_lines(slf: &Bound<'_, Self>, stat_args: MaybeArg<'_, '_>) -> PyResult<Py<PyList>> {
        admin::stats_lines(slf, stat_args)
    }

    /// fastmc extension: call `callback(server, event, detail)` on a server state change:
    /// "server_down", "server_up", "server_ejected", "server_rejoined", and on a change of the
    /// server list: "server_added", "server_removed".
    fn on(slf: &Bound<'_, Self>, event: &str, callback: Py<PyAny>) -> PyResult<()> {
        slf.get().add_listener(event, callback)
    }

    /// fastmc extension: stop calling `callback` for `event`; whether it was registered.
    fn off(slf: &Bound<'_, Self>, event: &str, callback: &Bound<'_, PyAny>) -> PyResult<bool> {
        slf.get().remove_listener(slf.py(), event, callback)
    }

    /// fastmc extension: replace the server list (the constructor's forms); servers in both
    /// lists keep their connections, health and metrics. No I/O. Returns `(added, removed)`.
    fn set_servers(
        slf: &Bound<'_, Self>,
        servers: &Bound<'_, PyAny>,
    ) -> PyResult<membership::Change> {
        membership::set_servers(slf, servers)
    }

    /// fastmc extension: every server's counters and latency percentiles (no I/O).
    fn metrics(slf: &Bound<'_, Self>) -> PyResult<Py<PyDict>> {
        metrics::metrics(slf)
    }

    /// fastmc extension: each server's hot keys, `{"host:port": [(key, count, error), ...]}`,
    /// hottest first (behaviors `hot_keys`, `hot_keys_sample`); `reset=True` starts each
    /// server's summary again.
    #[pyo3(signature = (reset=false))]
    fn hot_keys(slf: &Bound<'_, Self>, reset: bool) -> PyResult<Py<PyDict>> {
        metrics::hot_keys(slf, reset)
    }

    /// Where a key stands among its server's hot keys: `(rank, estimated requests)` or None.
    #[pyo3(signature = (key, server_key=None))]
    fn _hot_rank(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(usize, u64)>> {
        metrics::hot_rank(slf, key, server_key)
    }

    /// Open and check `connections` connections to every server before traffic (fastmc's own);
    /// the servers that failed, by address, with their exceptions: an empty dict when every
    /// server is warm. Never raises for a server.
    #[pyo3(signature = (connections=1))]
    fn warm_up(slf: &Bound<'_, Self>, connections: usize) -> PyResult<Py<PyDict>> {
        admin::warm_up(slf, connections)
    }

    /// fastmc extension: the item's metadata as memcached reports it (`me`), or None if missing.
    #[pyo3(signature = (key, *, server_key=None))]
    fn debug(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyDict>>> {
        admin::debug(slf, key, server_key)
    }

    /// fastmc extension: what stores a value that is not bytes, str, int or bool: `"pickle"`,
    /// `"json"` or `"msgpack"` (docs/security.md#values-without-pickle).
    #[getter]
    fn serializer(slf: &Bound<'_, Self>) -> &'static str {
        slf.get().values().serializer.name()
    }

    /// fastmc extension: mark a key stale instead of deleting it (see docs/stampede.md).
    #[pyo3(signature = (key, stale_time=0, *, server_key=None))]
    fn invalidate(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        stale_time: u32,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _pin = pin(server_key)?;
        lease::invalidate(slf, key, stale_time)
    }

    /// fastmc extension: `invalidate` for many keys; True only if every key was found.
    #[pyo3(
        signature = (keys, stale_time=0, key_prefix=MaybeArg::Missing, *, server_key=None),
        text_signature = "($self, keys, stale_time=0, key_prefix=b'', *, server_key=None)"
    )]
    fn invalidate_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        stale_time: u32,
        key_prefix: MaybeArg<'_, '_>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _pin = pin(server_key)?;
        lease::invalidate_iterable(slf, keys, stale_time, key_prefix)
    }
}
