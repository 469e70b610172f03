//! The asyncio client's binding to its event loop: the loop it resolves futures on, the
//! mailbox outcomes come back through and the direct request's epoll descriptor (each handed
//! to the loop as a `PyMailbox`/`PyDirect` and watched through a native `PyReader`), made on
//! the first call from a loop (`bind`), and the dispatcher's workers, started on first use.
//!
//! Uses `dispatch` (`Mailbox`, `Direct`, `Dispatcher`) and `idle_wait`.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use super::idle_wait::IdleWait;
use super::submit::{Delivery, Loopside, Sides};
use super::PyAioClient;
use crate::dispatch::direct::Direct;
use crate::dispatch::mailbox::Mailbox;
use crate::dispatch::Dispatcher;
use crate::py::errors;

/// The event loop this client resolves futures on, the mailbox it watches, and the request it
/// drives itself (`dispatch::direct`).
pub(super) struct Binding {
    pub(super) event_loop: Py<PyAny>,
    pub(super) mailbox: Arc<Mailbox<Delivery>>,
    pub(super) direct: Loopside,
    /// Waiting inside a call while the loop is idle (`idle_wait`); `None` where the loop is not
    /// one of asyncio's epoll selector loops.
    pub(super) idle: Option<Arc<IdleWait>>,
    /// The fork generation it was made in: a forked child makes its own mailbox.
    pub(super) generation: u64,
}

/// The direct request's epoll descriptor as the event loop holds it (see `PyMailbox`).
#[pyclass(name = "aio_direct", module = "_fastmc", frozen)]
pub struct PyDirect {
    /// Held: it keeps the descriptor open. Never locked here: the loop's thread holds the
    /// lock without the interpreter while it waits in a call (`idle_wait`).
    _direct: Loopside,
    fd: i32,
}

#[pymethods]
impl PyDirect {
    fn fileno(&self) -> i32 {
        self.fd
    }
}

/// The mailbox's descriptor as the event loop holds it: the loop's reader keeps this object
/// alive, so the descriptor stays open for as long as the loop watches it (a client dropped
/// without `close()` never leaves the loop watching a closed, reusable descriptor number).
#[pyclass(name = "aio_mailbox", module = "_fastmc", frozen)]
pub struct PyMailbox {
    mailbox: Arc<Mailbox<Delivery>>,
}

#[pymethods]
impl PyMailbox {
    fn fileno(&self) -> i32 {
        self.mailbox.fd().as_raw_fd()
    }
}

/// What the loop calls when one of a client's descriptors is readable: the client's
/// `direct_ready` (the direct request's epoll descriptor) or `drain` (the mailbox), called
/// here without a Python frame or a method lookup. It holds the client only through a weak
/// reference (a client dropped without `close()` is not kept alive by its loop) and the
/// descriptor's owner strongly (so the descriptor stays open while the loop watches it); once
/// the client is gone, it removes itself from the loop.
#[pyclass(name = "aio_reader", module = "_fastmc", frozen)]
pub struct PyReader {
    /// A `weakref.ref` to the client.
    client: Py<PyAny>,
    source: Source,
    event_loop: Py<PyAny>,
}

/// The descriptor a `PyReader` is for (held: it stays open while the loop watches it).
enum Source {
    Mailbox(Py<PyMailbox>),
    Direct(Py<PyDirect>),
}

#[pymethods]
impl PyReader {
    #[new]
    fn new(client: Py<PyAny>, owner: &Bound<'_, PyAny>, event_loop: Py<PyAny>) -> PyResult<Self> {
        let source = match owner.cast::<PyDirect>() {
            Ok(d) => Source::Direct(d.clone().unbind()),
            Err(_) => Source::Mailbox(owner.cast::<PyMailbox>()?.clone().unbind()),
        };
        Ok(PyReader {
            client,
            source,
            event_loop,
        })
    }

    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client.bind(py).call0()?;
        if client.is_none() {
            let fd = match &self.source {
                Source::Mailbox(m) => m.get().fileno(),
                Source::Direct(d) => d.get().fileno(),
            };
            self.event_loop
                .bind(py)
                .call_method1(intern!(py, "remove_reader"), (fd,))?;
            return Ok(());
        }
        let client = client.cast::<PyAioClient>()?;
        match self.source {
            Source::Direct(_) => PyAioClient::direct_ready(client),
            Source::Mailbox(_) => PyAioClient::drain(client),
        }
    }
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

pub(super) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
}

impl PyAioClient {
    /// The running loop, the mailbox outcomes come through on it, its direct request, and how
    /// a call waits while the loop is idle.
    pub(super) fn future<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Sides)> {
        let py = slf.py();
        let running = running_loop(py)?;
        let generation = crate::fork::generation();
        let bound = {
            let b = slf.get().binding.lock();
            b.as_ref()
                .filter(|b| b.generation == generation && b.event_loop.is(&running))
                .map(|b| (b.mailbox.clone(), b.direct.clone(), b.idle.clone()))
        };
        let sides = match bound {
            Some(m) => m,
            None => Self::bind(slf, &running, generation)?,
        };
        Ok((running, sides))
    }

    /// Serve `running` from now on (the first loop, or one after the previous loop closed).
    pub(super) fn bind(
        slf: &Bound<'_, Self>,
        running: &Bound<'_, PyAny>,
        generation: u64,
    ) -> PyResult<Sides> {
        let py = slf.py();
        let old = slf
            .get()
            .binding
            .lock()
            .as_ref()
            .map(|b| (b.event_loop.clone_ref(py), b.generation));
        if let Some((old_loop, old_generation)) = old {
            let closed = old_loop
                .bind(py)
                .call_method0(intern!(py, "is_closed"))?
                .is_truthy()?;
            if old_generation == generation && !closed {
                return Err(PyRuntimeError::new_err(
                    "this fastmc.aio.Client is bound to another event loop that is still \
                     open; use one client per event loop",
                ));
            }
        }
        let io_err = |e: std::io::Error| errors::plain_error(e.to_string());
        let mailbox = Arc::new(Mailbox::new().map_err(io_err)?);
        let direct = Arc::new(Mutex::new(Direct::new().map_err(io_err)?));
        let idle = IdleWait::new(running).map(Arc::new);
        let handle = PyMailbox {
            mailbox: mailbox.clone(),
        };
        let direct_handle = PyDirect {
            fd: direct.lock().fd().as_raw_fd(),
            _direct: direct.clone(),
        };
        slf.call_method1(
            intern!(py, "_attach_loop"),
            (running, handle, direct_handle),
        )?;
        *slf.get().binding.lock() = Some(Binding {
            event_loop: running.clone().unbind(),
            mailbox: mailbox.clone(),
            direct: direct.clone(),
            idle: idle.clone(),
            generation,
        });
        Ok((mailbox, direct, idle))
    }

    pub(super) fn dispatcher(slf: &Bound<'_, Self>) -> PyResult<Arc<Dispatcher>> {
        if let Some(d) = slf.get().dispatch.read().clone() {
            return Ok(d);
        }
        let mut slot = slf.get().dispatch.write();
        if let Some(d) = slot.clone() {
            return Ok(d);
        }
        if slf.get().closed.load(Ordering::Relaxed) {
            return Err(errors::plain_error("the client is closed"));
        }
        let core = slf.as_super().get().core()?;
        let d = Arc::new(Dispatcher::new(core).map_err(|e| errors::plain_error(e.to_string()))?);
        *slot = Some(d.clone());
        Ok(d)
    }
}
