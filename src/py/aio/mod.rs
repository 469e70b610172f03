//! The native asyncio client, `_fastmc.aio_client` (Rust `PyAioClient`): a subclass of the
//! blocking client's native class (same construction, behaviors, codec and overrides) whose
//! `_`-prefixed methods return a future (`future::PyAioFuture`, asyncio's kind) instead of
//! blocking. Those methods are made by the table of `py::methods`, each from the same row as
//! the blocking method; `fastmc.aio.Client` wraps each one in a coroutine with the blocking
//! method's name and signature.
//!
//! A call parses its arguments into its method's type (`py::client::method::Method`, the
//! blocking method's own conversions), makes a future for the running loop and hands an
//! owned request to the `dispatch::Dispatcher`, whose worker threads run the blocking core.
//! Outcomes come back through a `dispatch::mailbox::Mailbox` whose descriptor the loop watches
//! (`_attach_loop` in Python registers a `PyReader` that calls `drain`); `drain` converts each
//! outcome with the finish the call kept (`Method::later`, carried boxed as a `Finishing`) and
//! resolves the futures. No thread per request, no interpreter on the workers, and a cancelled future
//! simply drops its outcome: the worker's blocking call finishes the exchange, so no reply is
//! ever read for another request.
//!
//! One client serves one event loop at a time (a new loop may take over once the old one is
//! closed). Uses `py::client` (base class, codec, the families), `dispatch`, `py::errors`.
//!
//! This file: the class, `set_servers` and its plumbing (`_shutdown`, counters); `binding`: the
//! loop a client is bound to, its mailbox and direct descriptors and their reader; `submit`: a
//! call's way from its future to its result (`submit`, `progress`, `drain`, `resolve`).

pub(super) mod binding;
pub(super) mod future;
mod idle_wait;
mod order;
mod submit;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::client::state::PyClient;
use crate::dispatch::Dispatcher;
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
