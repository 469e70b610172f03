//! The native asyncio client, `_fastmc.aio_client` (Rust `PyAioClient`): a subclass of the
//! blocking client's native class (same construction, behaviors, codec and overrides) whose
//! `_`-prefixed methods return a future (`future::PyAioFuture`, asyncio's kind) instead of
//! blocking. `fastmc.aio.Client` wraps each one in a coroutine with the blocking method's name
//! and signature.
//!
//! A call converts its arguments with its family's `prepare_*` function (the blocking
//! method's own conversions, `py::client`), makes a future for the running loop and hands an
//! owned request to the `dispatch::Dispatcher`, whose worker threads run the blocking core.
//! Outcomes come back through a `dispatch::mailbox::Mailbox` whose descriptor the loop watches
//! (`_attach_loop` in Python registers a `PyReader` that calls `drain`); `drain` converts each
//! outcome with its method's finish (declared by the family, listed in `finish`) and resolves
//! the futures. No thread per request, no interpreter on the workers, and a cancelled future
//! simply drops its outcome: the worker's blocking call finishes the exchange, so no reply is
//! ever read for another request.
//!
//! One client serves one event loop at a time (a new loop may take over once the old one is
//! closed). Uses `py::client` (base class, codec, the families), `dispatch`, `py::errors`.
//!
//! This file: the class and its `_x` method table (one line per method); `finish`: the table of
//! finishes; `binding`: the loop a client is bound to, its mailbox and direct descriptors and
//! their reader; `submit`: a call's way from its future to its result (`submit`, `progress`,
//! `drain`, `resolve`).

pub(super) mod binding;
pub(super) mod future;
mod idle_wait;
mod order;
mod submit;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::args::{pin, MaybeArg};
use super::client::admin::{flush_delay, stats_args, FlushFinish, StatsFinish};
use super::client::finish::Prepared;
use super::client::multi::store::StoreMultiArgs;
use super::client::state::PyClient;
use super::client::{lease, multi, near};
use crate::client::op::admin::{Flush, Stats};
use crate::dispatch::Dispatcher;
use crate::protocol::StoreCmd;
use binding::Binding;
use submit::Order;

#[pyclass(name = "aio_client", module = "_fastmc", extends = PyClient, subclass, frozen)]
pub struct PyAioClient {
    dispatch: RwLock<Option<Arc<Dispatcher>>>,
    binding: Mutex<Option<Binding>>,
    /// Requests submitted and not resolved yet.
    pending: AtomicUsize,
    closed: AtomicBool,
    /// Requests for one key run in the order they were issued (`order`).
    order: Arc<Order>,
}

fn store_cmd(name: &str) -> PyResult<StoreCmd> {
    Ok(match name {
        "set" => StoreCmd::Set,
        "add" => StoreCmd::Add,
        "replace" => StoreCmd::Replace,
        "append" => StoreCmd::Append,
        "prepend" => StoreCmd::Prepend,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown store command {name:?}"
            )))
        }
    })
}

#[pymethods]
impl PyAioClient {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyClassInitializer<Self> {
        PyClassInitializer::from(PyClient::empty()).add_subclass(PyAioClient {
            dispatch: RwLock::new(None),
            binding: Mutex::new(None),
            pending: AtomicUsize::new(0),
            order: Arc::new(Mutex::new(order::KeyOrder::default())),
            closed: AtomicBool::new(false),
        })
    }

    #[pyo3(signature = (keys, key_prefix=MaybeArg::Missing, with_cas=false, server_key=None))]
    fn _get_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        with_cas: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(
            slf,
            multi::fetch::prepare_fetch(keys, key_prefix, with_cas)?,
        )
    }

    #[pyo3(signature = (cmd, keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing,
                        min_compress_len=MaybeArg::Missing, compress_level=MaybeArg::Missing,
                        noreply=false, server_key=None))]
    #[allow(clippy::too_many_arguments)]
    fn _store_multi(
        slf: &Bound<'_, Self>,
        cmd: &str,
        keys: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        key_prefix: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        let cmd = store_cmd(cmd)?;
        let args = StoreMultiArgs::parse(
            keys,
            time,
            key_prefix,
            min_compress_len,
            compress_level,
            noreply,
        )?;
        Self::submit(
            slf,
            multi::store::prepare_store_multi(slf.as_super(), cmd, args)?,
        )
    }

    #[pyo3(signature = (keys, key_prefix=MaybeArg::Missing, noreply=false, server_key=None))]
    fn _delete_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        noreply: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(
            slf,
            multi::delete::prepare_delete_multi(keys, key_prefix, noreply)?,
        )
    }

    #[pyo3(signature = (keys, key_prefix=MaybeArg::Missing, delta=MaybeArg::Missing, server_key=None))]
    fn _incr_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        delta: MaybeArg<'_, '_>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(
            slf,
            multi::incr::prepare_incr_multi(keys, key_prefix, delta)?,
        )
    }

    #[pyo3(signature = (keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing, noreply=false, server_key=None))]
    fn _touch_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        key_prefix: MaybeArg<'_, '_>,
        noreply: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(
            slf,
            multi::touch::prepare_touch_multi(keys, time, key_prefix, noreply)?,
        )
    }

    #[pyo3(signature = (time=MaybeArg::Missing))]
    fn _flush_all(slf: &Bound<'_, Self>, time: MaybeArg<'_, '_>) -> PyResult<Py<PyAny>> {
        let delay = flush_delay(time)?;
        Self::submit(slf, Prepared::whole(Flush { delay }, FlushFinish))
    }

    #[pyo3(signature = (stat_args=MaybeArg::Missing))]
    fn _get_stats(slf: &Bound<'_, Self>, stat_args: MaybeArg<'_, '_>) -> PyResult<Py<PyAny>> {
        let args = stats_args(stat_args)?;
        Self::submit(
            slf,
            Prepared::whole(Stats { args: args.into() }, StatsFinish),
        )
    }

    #[pyo3(signature = (keys, time, key_prefix=MaybeArg::Missing, server_key=None))]
    fn _gat_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(slf, lease::prepare_gat_multi(keys, time, key_prefix)?)
    }

    /// The lease read of `get_or_set`: a future of `(state, value, cas)`.
    #[pyo3(signature = (key, lease, recache, server_key=None))]
    fn _alease_get(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        lease: u32,
        recache: u32,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(slf, lease::prepare_lease_get(key, lease, recache)?)
    }

    /// The near cache's check of a value it holds with `cas`: a future of `(state, value, cas)`.
    #[pyo3(signature = (key, cas, conditional, server_key=None))]
    fn _anear_check(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        cas: u64,
        conditional: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(slf, near::prepare_check(key, cas, conditional)?)
    }

    /// The near cache's check of many held values by their CAS alone: a future of each CAS.
    #[pyo3(signature = (keys, server_key=None))]
    fn _anear_cas_multi(
        slf: &Bound<'_, Self>,
        keys: Vec<Bound<'_, PyAny>>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(slf, near::prepare_cas_multi(&keys)?)
    }

    /// Give a lease back: a future of whether it was.
    #[pyo3(signature = (key, cas, stale, server_key=None))]
    fn _alease_release(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        cas: u64,
        stale: bool,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        Self::submit(slf, lease::prepare_lease_release(key, cas, stale)?)
    }

    /// Mark keys stale: a future of `(every key found, [keys on servers without meta])`.
    #[pyo3(signature = (keys, stale_time=0, key_prefix=MaybeArg::Missing, server_key=None))]
    fn _invalidate_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        stale_time: u32,
        key_prefix: MaybeArg<'_, '_>,
        server_key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _pin = pin(server_key)?;
        let items = super::args::sized_items(keys)?;
        Self::submit(
            slf,
            lease::prepare_invalidate_multi(&items, stale_time, key_prefix)?,
        )
    }

    /// The blocking client's `set_servers` (no I/O), then the workers follow the new list at
    /// once: new servers get theirs, removed ones' workers run what is queued to them and exit.
    fn set_servers(
        slf: &Bound<'_, Self>,
        servers: &Bound<'_, PyAny>,
    ) -> PyResult<super::client::membership::Change> {
        let change = super::client::membership::set_servers(slf.as_super(), servers)?;
        let dispatch = slf.get().dispatch.read().clone();
        if let Some(d) = dispatch {
            super::io::released(slf.py(), || d.follow_servers());
        }
        Ok(change)
    }

    /// Stop the worker threads once they have run what they were given; later calls fail.
    fn _shutdown(slf: &Bound<'_, Self>) {
        let mut slot = slf.get().dispatch.write();
        slf.get().closed.store(true, Ordering::Relaxed);
        if let Some(d) = slot.take() {
            d.shut_down();
        }
    }

    /// Requests the loop's thread began itself on this loop, and how many of those it handed
    /// to a thread of their own.
    #[getter]
    fn _direct_counts(slf: &Bound<'_, Self>) -> (u64, u64) {
        Self::read_direct(slf, |d| (d.begun, d.handed_off))
    }

    /// How the waits for a reply inside a call ended (`idle_wait`): the request moved on, the
    /// loop had work, the wait's time ran out.
    #[getter]
    fn _idle_waits(slf: &Bound<'_, Self>) -> (u64, u64, u64) {
        Self::read_direct(slf, |d| (d.idle.moved_on, d.idle.woken, d.idle.timed_out))
    }

    /// How many requests are in flight.
    #[getter]
    fn _in_flight(slf: &Bound<'_, Self>) -> usize {
        slf.get().pending.load(Ordering::Relaxed)
    }
}
