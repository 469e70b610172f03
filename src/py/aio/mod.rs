//! The native asyncio client, `_fastmc.aio_client` (Rust `PyAioClient`): a subclass of the
//! blocking client's native class (same construction, behaviors, codec and overrides) whose
//! `_`-prefixed methods return a future (`future::PyAioFuture`, asyncio's kind) instead of
//! blocking. `fastmc.aio.Client` wraps each one in a coroutine with the blocking method's name
//! and signature.
//!
//! A call converts its arguments (`prepare`), makes a future for the running loop and hands
//! an owned request to the `dispatch::Dispatcher`, whose worker threads run the blocking core.
//! Outcomes come back through a `dispatch::Mailbox` whose descriptor the loop watches
//! (`_attach_loop` in Python registers a `PyReader` that calls `drain`); `drain` converts each
//! outcome with the blocking method's own functions (`finish`) and resolves the futures. No
//! thread per request, no interpreter on the workers, and a cancelled future simply drops its
//! outcome: the worker's blocking call finishes the exchange, so no reply is ever read for
//! another request.
//!
//! One client serves one event loop at a time (a new loop may take over once the old one is
//! closed). Uses `py::client` (base class, codec, reply functions), `dispatch`, `py::errors`.

mod finish;
mod future;
mod order;
mod prepare;
mod quiet;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

use super::args::MaybeArg;
use super::client::admin::{flush_delay, stats_args};
use super::client::multi::StoreMultiArgs;
use super::client::single::{cas_args, StoreArgs};
use super::client::PyClient;
use super::errors;
use crate::dispatch::direct::Progress;
use crate::dispatch::request::{Outcome, Request};
use crate::dispatch::{Direct, Dispatcher, Done, Mailbox};
use crate::protocol::StoreCmd;
use finish::Finish;
pub use future::PyAioFuture;
use prepare::Prepared;
use quiet::Quiet;

/// A request on its way: the future to resolve and how to build its result.
struct Pending {
    fut: Py<PyAioFuture>,
    finish: Finish,
    /// Its place in the per-key order, given up when it is dropped (`order`).
    ticket: Option<Ticket>,
}

/// The per-key order of a client's requests, a request waiting in it, and a place in it.
type Order = Mutex<order::KeyOrder<(Request, Pending)>>;
type Ticket = order::Ticket<(Request, Pending)>;

type Delivery = (Pending, Option<Outcome>);

type Loopside = Arc<Mutex<Direct<Pending>>>;

/// A binding's parts a call uses: the mailbox, the direct request and its idle wait.
type Sides = (Arc<Mailbox<Delivery>>, Loopside, Option<Arc<Quiet>>);

/// The event loop this client resolves futures on, the mailbox it watches, and the request it
/// drives itself (`dispatch::direct`).
struct Binding {
    event_loop: Py<PyAny>,
    mailbox: Arc<Mailbox<Delivery>>,
    direct: Loopside,
    /// Waiting inside a call while the loop is idle (`quiet`); `None` where the loop is not
    /// one of asyncio's epoll selector loops.
    quiet: Option<Arc<Quiet>>,
    /// The fork generation it was made in: a forked child makes its own mailbox.
    generation: u64,
}

/// The direct request's epoll descriptor as the event loop holds it (see `PyMailbox`).
#[pyclass(name = "aio_direct", module = "_fastmc", frozen)]
pub struct PyDirect {
    /// Held: it keeps the descriptor open. Never locked here: the loop's thread holds the
    /// lock without the interpreter while it waits in a call (`quiet`).
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

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()
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

impl PyAioClient {
    /// The running loop, the mailbox outcomes come through on it, its direct request, and how
    /// a call waits while the loop is idle.
    fn future<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Sides)> {
        let py = slf.py();
        let running = running_loop(py)?;
        let generation = crate::fork::generation();
        let bound = {
            let b = slf.get().binding.lock();
            b.as_ref()
                .filter(|b| b.generation == generation && b.event_loop.is(&running))
                .map(|b| (b.mailbox.clone(), b.direct.clone(), b.quiet.clone()))
        };
        let sides = match bound {
            Some(m) => m,
            None => Self::bind(slf, &running, generation)?,
        };
        Ok((running, sides))
    }

    /// Serve `running` from now on (the first loop, or one after the previous loop closed).
    fn bind(slf: &Bound<'_, Self>, running: &Bound<'_, PyAny>, generation: u64) -> PyResult<Sides> {
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
        let quiet = Quiet::new(running).map(Arc::new);
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
            quiet: quiet.clone(),
            generation,
        });
        Ok((mailbox, direct, quiet))
    }

    fn dispatcher(slf: &Bound<'_, Self>) -> PyResult<Arc<Dispatcher>> {
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

    /// The future for a prepared call.
    fn submit(slf: &Bound<'_, Self>, prepared: Prepared) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (running, (mailbox, direct, quiet)) = Self::future(slf)?;
        let fut = match prepared {
            Prepared::Ready(v) => future::ready(py, running.unbind(), v)?,
            Prepared::Submit(req, finish) => {
                let fut = Bound::new(py, PyAioFuture::new(running.clone().unbind()))?;
                let dispatch = Self::dispatcher(slf)?;
                let pending = Pending {
                    fut: fut.clone().unbind(),
                    finish,
                    ticket: None,
                };
                // After an earlier request of one of its keys: it waits for that one's outcome.
                let (hashes, write) = order::keys_of(&req);
                let this = slf.get();
                let admitted = this.order.lock().admit(hashes, write, (req, pending));
                let (req, pending) = match admitted {
                    order::Admitted::Parked => {
                        this.pending.fetch_add(1, Ordering::Relaxed);
                        return Ok(fut.into_any().unbind());
                    }
                    order::Admitted::Go(id, (req, mut pending)) => {
                        pending.ticket = this.ticket(id);
                        (req, pending)
                    }
                };
                // While the loop is idle, a lone call waits for the reply itself (`quiet`),
                // until a deadline taken now; a loop whose internals are not as expected is
                // waited on as usual. (Before the count below: nothing here may leave it
                // raised.)
                let quiet = quiet
                    .filter(|_| slf.get().pending.load(Ordering::Relaxed) == 0)
                    .and_then(|q| Some((Instant::now() + q.budget(&running).ok()??, q)));
                // Alone: on this thread (see `dispatch::direct`); else to the workers, where
                // it travels with the others.
                let alone = slf.get().pending.fetch_add(1, Ordering::Relaxed) == 0;
                let quiet = quiet.filter(|_| alone);
                let core = dispatch.client();
                // Its own statement: the lock is let go before `progress` (which may call
                // listeners, which may call this client).
                let started = if alone {
                    direct.lock().start(core, req, pending, quiet.is_none())
                } else {
                    Err((req, pending))
                };
                match (started, quiet) {
                    (Ok(Progress::Waiting), Some((until, quiet))) => {
                        let progress = super::io::released(py, || {
                            direct.lock().wait_here(core, quiet.selector(), until)
                        });
                        Self::progress(slf, core, &mailbox, progress, false)?
                    }
                    (Ok(progress), _) => Self::progress(slf, core, &mailbox, progress, false)?,
                    (Err((req, pending)), _) => {
                        dispatch.submit(req, Done::new(move |o| mailbox.post((pending, o))))
                    }
                }
                fut
            }
        };
        Ok(fut.into_any().unbind())
    }

    /// Act on where the direct request stands: resolve it, or hand it to a thread of its own.
    /// `inline`: called from the loop's reader callback (see `future`).
    fn progress(
        slf: &Bound<'_, Self>,
        core: &Arc<crate::client::Client>,
        mailbox: &Arc<Mailbox<Delivery>>,
        progress: Progress<Pending>,
        inline: bool,
    ) -> PyResult<()> {
        match progress {
            Progress::Waiting => Ok(()),
            Progress::Done(pending, outcome) => {
                let woken = Self::resolve(slf, pending, Some(outcome));
                Self::pump(slf, mailbox);
                let r = future::wake(slf.py(), woken.into_iter().collect(), inline);
                let base = slf.as_super().get();
                super::events::deliver(slf.py(), &base.listeners, core);
                r
            }
            Progress::HandOff(h) => {
                let theirs = mailbox.clone();
                let started = h.spawn(core, move |pending, outcome| {
                    theirs.post((pending, Some(outcome)));
                });
                // A future is never left waiting: without a thread, it gets the error.
                if let Err((Some(pending), e)) = started {
                    let err = errors::plain_error(format!("cannot start an I/O thread: {e}"));
                    slf.get().pending.fetch_sub(1, Ordering::Relaxed);
                    let woken = PyAioFuture::settle(pending.fut.bind(slf.py()), Err(err));
                    drop(pending);
                    Self::pump(slf, mailbox);
                    future::wake(slf.py(), woken.into_iter().collect(), inline)?;
                }
                Ok(())
            }
        }
    }

    /// A ticket in this client's order.
    fn ticket(&self, id: u64) -> Option<Ticket> {
        order::Ticket::new(&self.order, id)
    }

    /// Send the requests whose turn came (their earlier requests of the same keys were
    /// resolved) to the workers. Called on the loop's thread after outcomes are resolved.
    fn pump(slf: &Bound<'_, Self>, mailbox: &Arc<Mailbox<Delivery>>) {
        let this = slf.get();
        loop {
            let ready = this.order.lock().take_ready();
            if ready.is_empty() {
                return;
            }
            let dispatch = Self::dispatcher(slf).ok();
            for (id, (req, mut pending)) in ready {
                pending.ticket = this.ticket(id);
                let mailbox = mailbox.clone();
                let done = Done::new(move |o| mailbox.post((pending, o)));
                match &dispatch {
                    Some(d) => d.submit(req, done),
                    // Closed: the request is answered as unanswered (`Done`'s drop).
                    None => drop(done),
                }
            }
        }
    }

    /// Resolve one future with its outcome, unless it was cancelled meanwhile: what to wake
    /// (`future::wake`).
    fn resolve<'py>(
        slf: &Bound<'py, Self>,
        p: Pending,
        outcome: Option<Outcome>,
    ) -> Option<future::Woken<'py>> {
        let py = slf.py();
        slf.get().pending.fetch_sub(1, Ordering::Relaxed);
        let fut = p.fut.bind(py);
        if fut.get().is_done() {
            return None;
        }
        let r = match outcome {
            Some(o) => p.finish.reply(slf.as_super(), o),
            None => Err(errors::plain_error(
                "the client was closed before this request ran",
            )),
        };
        PyAioFuture::settle(fut, r)
    }

    /// `f` of the direct request's state (`T::default()` before the first loop), read without
    /// the interpreter: the loop's thread may hold the lock while it waits in a call.
    fn read_direct<T: Default + Send>(
        slf: &Bound<'_, Self>,
        f: impl FnOnce(&Direct<Pending>) -> T + Send,
    ) -> T {
        let direct = slf.get().binding.lock().as_ref().map(|b| b.direct.clone());
        direct.map_or_else(T::default, |d| {
            super::io::released(slf.py(), || f(&d.lock()))
        })
    }

    /// Serve the direct request's connections (its `PyReader`: the epoll descriptor is
    /// readable).
    fn direct_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        let bound = slf
            .get()
            .binding
            .lock()
            .as_ref()
            .map(|b| (b.direct.clone(), b.mailbox.clone()));
        let Some((direct, mailbox)) = bound else {
            return Ok(());
        };
        let core = slf.as_super().get().core()?;
        let progress = direct.lock().ready(&core);
        Self::progress(slf, &core, &mailbox, progress, true)
    }

    /// Resolve the futures whose outcomes arrived (its `PyReader`: the mailbox's descriptor is
    /// readable). A future whose result cannot be built gets the exception.
    fn drain(slf: &Bound<'_, Self>) -> PyResult<()> {
        let mailbox = slf.get().binding.lock().as_ref().map(|b| b.mailbox.clone());
        let Some(mailbox) = mailbox else {
            return Ok(());
        };
        let woken = mailbox
            .take()
            .into_iter()
            .filter_map(|(p, o)| Self::resolve(slf, p, o))
            .collect();
        Self::pump(slf, &mailbox);
        let r = future::wake(slf.py(), woken, true);
        // Server state changes the workers' calls noted: logged and called back here, on the
        // loop's thread.
        let base = slf.as_super().get();
        if let Ok(core) = base.core() {
            super::events::deliver(slf.py(), &base.listeners, &core);
        }
        r
    }
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

    #[pyo3(signature = (key, default=None))]
    fn _get(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::get(key, default)?)
    }

    fn _gets(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::gets(slf.as_super(), key)?)
    }

    /// The arguments as the blocking method's; a left-out one is `MaybeArg::Missing`.
    #[pyo3(signature = (cmd, key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                        compress_level=MaybeArg::Missing, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn _store(
        slf: &Bound<'_, Self>,
        cmd: &str,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        let cmd = store_cmd(cmd)?;
        let args = StoreArgs::parse(key, time, min_compress_len, compress_level, noreply)?;
        Self::submit(slf, prepare::store(slf.as_super(), cmd, val, args)?)
    }

    #[pyo3(signature = (key, val, cas, time=MaybeArg::Missing))]
    fn _cas(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        cas: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
    ) -> PyResult<Py<PyAny>> {
        let args = cas_args(slf.as_super(), key, cas, time)?;
        Self::submit(
            slf,
            prepare::store(slf.as_super(), StoreCmd::Cas, val, args)?,
        )
    }

    fn _delete(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::delete(key, noreply)?)
    }

    fn _touch(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::touch(key, time, noreply)?)
    }

    #[pyo3(signature = (incr, key, delta=MaybeArg::Missing))]
    fn _arith(
        slf: &Bound<'_, Self>,
        incr: bool,
        key: &Bound<'_, PyAny>,
        delta: MaybeArg<'_, '_>,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::arith(incr, key, delta)?)
    }

    #[pyo3(signature = (keys, key_prefix=MaybeArg::Missing, with_cas=false))]
    fn _get_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        with_cas: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::fetch(keys, key_prefix, with_cas)?)
    }

    #[pyo3(signature = (cmd, keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing,
                        min_compress_len=MaybeArg::Missing, compress_level=MaybeArg::Missing,
                        noreply=false))]
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
    ) -> PyResult<Py<PyAny>> {
        let cmd = store_cmd(cmd)?;
        let args = StoreMultiArgs::parse(
            keys,
            time,
            key_prefix,
            min_compress_len,
            compress_level,
            noreply,
        )?;
        Self::submit(slf, prepare::store_multi(slf.as_super(), cmd, args)?)
    }

    #[pyo3(signature = (keys, key_prefix=MaybeArg::Missing, noreply=false))]
    fn _delete_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::delete_multi(keys, key_prefix, noreply)?)
    }

    #[pyo3(signature = (keys, key_prefix=MaybeArg::Missing, delta=MaybeArg::Missing))]
    fn _incr_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
        delta: MaybeArg<'_, '_>,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::incr_multi(keys, key_prefix, delta)?)
    }

    #[pyo3(signature = (keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing, noreply=false))]
    fn _touch_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        key_prefix: MaybeArg<'_, '_>,
        noreply: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::touch_multi(keys, time, key_prefix, noreply)?)
    }

    #[pyo3(signature = (time=MaybeArg::Missing))]
    fn _flush_all(slf: &Bound<'_, Self>, time: MaybeArg<'_, '_>) -> PyResult<Py<PyAny>> {
        let delay = flush_delay(time)?;
        Self::submit(
            slf,
            Prepared::Submit(Request::Flush { delay }, Finish::Flush),
        )
    }

    #[pyo3(signature = (stat_args=MaybeArg::Missing))]
    fn _get_stats(slf: &Bound<'_, Self>, stat_args: MaybeArg<'_, '_>) -> PyResult<Py<PyAny>> {
        let args = stats_args(stat_args)?;
        Self::submit(
            slf,
            Prepared::Submit(Request::Stats { args }, Finish::Stats),
        )
    }

    #[pyo3(signature = (key, time, default=None))]
    fn _gat(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::gat(key, time, default)?)
    }

    #[pyo3(signature = (keys, time, key_prefix=MaybeArg::Missing))]
    fn _gat_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        key_prefix: MaybeArg<'_, '_>,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::gat_multi(keys, time, key_prefix)?)
    }

    /// The lease read of `get_or_set`: a future of `(state, value, cas)`.
    fn _alease_get(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        lease: u32,
        recache: u32,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::lease_get(key, lease, recache)?)
    }

    /// Give a lease back: a future of whether it was.
    fn _alease_release(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        cas: u64,
        stale: bool,
    ) -> PyResult<Py<PyAny>> {
        Self::submit(slf, prepare::lease_release(key, cas, stale)?)
    }

    /// Mark keys stale: a future of `(every key found, [keys on servers without meta])`.
    #[pyo3(signature = (keys, stale_time=0, key_prefix=MaybeArg::Missing))]
    fn _invalidate_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        stale_time: u32,
        key_prefix: MaybeArg<'_, '_>,
    ) -> PyResult<Py<PyAny>> {
        let items = super::args::sized_items(keys)?;
        Self::submit(
            slf,
            prepare::invalidate_multi(&items, stale_time, key_prefix)?,
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

    /// How the waits for a reply inside a call ended (`quiet`): the request moved on, the
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
