//! The future an asynchronous call returns, `_fastmc.aio_future` (Rust `PyAioFuture`): what
//! asyncio's `Task` needs of a future (`_asyncio_future_blocking`, `get_loop`,
//! `add_done_callback`, `result`, `cancel`), plus the rest of `asyncio.Future`'s reading side
//! (`done`, `cancelled`, `exception`, `remove_done_callback`), and `aio_future[T]` as
//! `asyncio.Future[T]` (the stub is generic in the result). Only the client resolves it.
//!
//! Why not `loop.create_future()`: an asyncio future schedules its callbacks with
//! `loop.call_soon`, so a task awaiting a reply resumes one turn of the loop after the reader
//! callback that resolved it (a second `epoll_wait`, a handle, a pass of `_run_once`). This
//! one, resolved from the client's own reader callbacks when the loop has nothing else ready
//! (`wake`), calls them there, as the loop would have on its next turn: the awaiting task
//! resumes in the same turn and overtakes nothing. Those reader callbacks run outside any
//! task, so entering the task is what the loop itself does. Otherwise (something else is
//! ready, a cancellation, a call that needs no I/O) callbacks go through `call_soon` as
//! asyncio's do. Attached only, on the loop's thread.

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use pyo3::{PyTraverseError, PyVisit};

pyo3::import_exception!(asyncio, CancelledError);
pyo3::import_exception!(asyncio, InvalidStateError);

static COPY_CONTEXT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static GENERIC_ALIAS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

enum State {
    Pending,
    Result(Py<PyAny>),
    /// The exception instance.
    Failed(Py<PyAny>),
    /// The message given to `cancel`.
    Cancelled(Option<Py<PyAny>>),
}

/// A done callback and the context it runs in.
type Callback = (Py<PyAny>, Py<PyAny>);

struct Inner {
    state: State,
    callbacks: Vec<Callback>,
    blocking: bool,
}

#[pyclass(name = "aio_future", module = "_fastmc", frozen)]
pub struct PyAioFuture {
    event_loop: Py<PyAny>,
    inner: Mutex<Inner>,
}

impl PyAioFuture {
    pub(super) fn new(event_loop: Py<PyAny>) -> Self {
        PyAioFuture {
            event_loop,
            inner: Mutex::new(Inner {
                state: State::Pending,
                callbacks: Vec::new(),
                blocking: false,
            }),
        }
    }

    pub(super) fn is_done(&self) -> bool {
        !matches!(self.inner.lock().state, State::Pending)
    }

    /// Resolve with `r` unless already done (cancelled): the future and the callbacks that
    /// resolving it calls, for `wake`.
    pub(super) fn settle<'py>(
        slf: &Bound<'py, Self>,
        r: PyResult<Py<PyAny>>,
    ) -> Option<Woken<'py>> {
        let state = match r {
            Ok(v) => State::Result(v),
            Err(e) => State::Failed(e.into_value(slf.py()).into_any()),
        };
        let callbacks = {
            let mut inner = slf.get().inner.lock();
            if !matches!(inner.state, State::Pending) {
                return None;
            }
            inner.state = state;
            std::mem::take(&mut inner.callbacks)
        };
        Some(Woken {
            fut: slf.clone(),
            callbacks,
        })
    }

    /// Run `callbacks` on the loop's next turn, as `asyncio.Future` does.
    pub(super) fn schedule(slf: &Bound<'_, Self>, callbacks: Vec<Callback>) -> PyResult<()> {
        let py = slf.py();
        let event_loop = slf.get().event_loop.bind(py);
        for (cb, ctx) in callbacks {
            let kwargs = PyDict::new(py);
            kwargs.set_item(intern!(py, "context"), ctx)?;
            event_loop.call_method(intern!(py, "call_soon"), (cb, slf), Some(&kwargs))?;
        }
        Ok(())
    }

    /// What awaiting it gives once done: `Ok` the result, `Err` the exception to raise.
    fn outcome(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.inner.lock().state {
            State::Pending => Err(InvalidStateError::new_err("Result is not set.")),
            State::Result(v) => Ok(v.clone_ref(py)),
            State::Failed(e) => Err(PyErr::from_value(e.bind(py).clone())),
            State::Cancelled(msg) => Err(cancelled_error(py, msg)),
        }
    }
}

/// A future just resolved and the callbacks that resolving it calls.
pub(super) struct Woken<'py> {
    fut: Bound<'py, PyAioFuture>,
    callbacks: Vec<Callback>,
}

/// Call what resolving these futures calls, in asyncio's order. With `inline` (the client's
/// reader callbacks, which the loop runs outside any task) and nothing else ready on the loop,
/// the first future's callbacks run here, once the others' are queued: first the first, then
/// the others, then whatever the first one's scheduled, as with asyncio's futures, one turn
/// of the loop sooner. Otherwise, or on a loop whose ready queue cannot be seen (uvloop), all
/// go through `call_soon`. An error a callback raises here (a task's step lets only
/// `KeyboardInterrupt` and `SystemExit` out) is returned once the rest are queued, so that it
/// reaches the loop as it would from the loop's own handle.
pub(super) fn wake(py: Python<'_>, woken: Vec<Woken<'_>>, inline: bool) -> PyResult<()> {
    let mut all = woken.into_iter();
    let Some(first) = all.next() else {
        return Ok(());
    };
    let now = inline && nothing_ready(first.fut.get().event_loop.bind(py));
    let (fut, callbacks) = (first.fut, first.callbacks);
    let callbacks = if now {
        callbacks
    } else {
        PyAioFuture::schedule(&fut, callbacks)?;
        Vec::new()
    };
    for w in all {
        PyAioFuture::schedule(&w.fut, w.callbacks)?;
    }
    let mut rest = callbacks.into_iter();
    while let Some((cb, ctx)) = rest.next() {
        if let Err(e) = ctx.bind(py).call_method1(intern!(py, "run"), (cb, &fut)) {
            PyAioFuture::schedule(&fut, rest.collect())?;
            return Err(e);
        }
    }
    Ok(())
}

/// Whether the loop has no callback waiting to run (asyncio's loops keep them in `_ready`).
fn nothing_ready(event_loop: &Bound<'_, PyAny>) -> bool {
    event_loop
        .getattr(intern!(event_loop.py(), "_ready"))
        .and_then(|r| r.len())
        .is_ok_and(|n| n == 0)
}

fn cancelled_error(py: Python<'_>, msg: &Option<Py<PyAny>>) -> PyErr {
    match msg {
        Some(m) => CancelledError::new_err((m.clone_ref(py),)),
        None => CancelledError::new_err(()),
    }
}

#[pymethods]
impl PyAioFuture {
    /// The garbage collector's view: a task waiting on this future holds it through its
    /// coroutine's frame, and the future holds the task's wakeup among its callbacks.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.event_loop)?;
        // Never held across Python code, so free whenever the collector runs.
        if let Some(inner) = self.inner.try_lock() {
            match &inner.state {
                State::Result(v) | State::Failed(v) | State::Cancelled(Some(v)) => visit.call(v)?,
                State::Pending | State::Cancelled(None) => {}
            }
            for (cb, ctx) in &inner.callbacks {
                visit.call(cb)?;
                visit.call(ctx)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let (callbacks, state) = {
            let mut inner = self.inner.lock();
            let callbacks = std::mem::take(&mut inner.callbacks);
            let state = match inner.state {
                State::Pending => State::Pending,
                _ => std::mem::replace(&mut inner.state, State::Cancelled(None)),
            };
            (callbacks, state)
        };
        // Released here, with the lock free: their finalizers may run any code.
        drop((callbacks, state));
    }

    /// `aio_future[T]`, as `asyncio.Future[T]`: the stub's type is generic in its result.
    #[classmethod]
    fn __class_getitem__<'py>(
        cls: &Bound<'py, PyType>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        GENERIC_ALIAS
            .import(cls.py(), "types", "GenericAlias")?
            .call1((cls, item))
    }

    #[getter(_asyncio_future_blocking)]
    fn blocking(&self) -> bool {
        self.inner.lock().blocking
    }

    #[setter(_asyncio_future_blocking)]
    fn set_blocking(&self, value: bool) {
        self.inner.lock().blocking = value;
    }

    fn get_loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.event_loop.clone_ref(py)
    }

    #[getter(_loop)]
    fn loop_attr(&self, py: Python<'_>) -> Py<PyAny> {
        self.event_loop.clone_ref(py)
    }

    fn done(&self) -> bool {
        self.is_done()
    }

    fn cancelled(&self) -> bool {
        matches!(self.inner.lock().state, State::Cancelled(_))
    }

    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.outcome(py)
    }

    fn exception(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.inner.lock().state {
            State::Pending => Err(InvalidStateError::new_err("Exception is not set.")),
            State::Result(_) => Ok(None),
            State::Failed(e) => Ok(Some(e.clone_ref(py))),
            State::Cancelled(msg) => Err(cancelled_error(py, msg)),
        }
    }

    #[pyo3(signature = (r#fn, *, context=None))]
    fn add_done_callback(
        slf: &Bound<'_, Self>,
        r#fn: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let ctx = match context {
            Some(c) if !c.is_none(py) => c,
            _ => COPY_CONTEXT
                .import(py, "contextvars", "copy_context")?
                .call0()?
                .unbind(),
        };
        {
            let mut inner = slf.get().inner.lock();
            if matches!(inner.state, State::Pending) {
                inner.callbacks.push((r#fn, ctx));
                return Ok(());
            }
        }
        Self::schedule(slf, vec![(r#fn, ctx)])
    }

    fn remove_done_callback(slf: &Bound<'_, Self>, r#fn: &Bound<'_, PyAny>) -> PyResult<usize> {
        let py = slf.py();
        // Compared with the lock free (`==` is Python code, which may add callbacks, or
        // resolve or cancel this future); whatever happens, no callback is lost.
        let callbacks = std::mem::take(&mut slf.get().inner.lock().callbacks);
        let mut kept = Vec::with_capacity(callbacks.len());
        let (mut removed, mut failed) = (0, None);
        for (cb, ctx) in callbacks {
            match failed.is_none().then(|| cb.bind(py).eq(r#fn)) {
                Some(Ok(true)) => removed += 1,
                Some(Err(e)) => {
                    failed = Some(e);
                    kept.push((cb, ctx));
                }
                _ => kept.push((cb, ctx)),
            }
        }
        let late = {
            let mut inner = slf.get().inner.lock();
            if matches!(inner.state, State::Pending) {
                // Callbacks added while comparing stay after the kept ones.
                kept.append(&mut inner.callbacks);
                inner.callbacks = kept;
                Vec::new()
            } else {
                kept
            }
        };
        // Resolved meanwhile: what was kept runs as if it had been there when it was.
        Self::schedule(slf, late)?;
        failed.map_or(Ok(removed), Err)
    }

    /// Cancel it: its callbacks run on the loop's next turn, and the client drops the reply
    /// when it comes (the exchange itself finishes, so the connection stays in step).
    #[pyo3(signature = (msg=None))]
    fn cancel(slf: &Bound<'_, Self>, msg: Option<Py<PyAny>>) -> PyResult<bool> {
        let callbacks = {
            let mut inner = slf.get().inner.lock();
            if !matches!(inner.state, State::Pending) {
                return Ok(false);
            }
            inner.state = State::Cancelled(msg);
            std::mem::take(&mut inner.callbacks)
        };
        Self::schedule(slf, callbacks)?;
        Ok(true)
    }

    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// `yield self` while pending (the task then waits on it), its result once done.
    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        {
            let mut inner = slf.get().inner.lock();
            if matches!(inner.state, State::Pending) {
                // A task that waits on it clears the flag first: still set, the one that
                // asked before is iterating it by hand (any number of tasks may await it).
                if inner.blocking {
                    return Err(PyRuntimeError::new_err("await wasn't used with future"));
                }
                inner.blocking = true;
                return Ok(slf.clone().into_any().unbind());
            }
        }
        let v = slf.get().outcome(py)?;
        Err(pyo3::exceptions::PyStopIteration::new_err((v,)))
    }

    fn __repr__(&self) -> String {
        let state = match self.inner.lock().state {
            State::Pending => "pending",
            State::Result(_) => "finished",
            State::Failed(_) => "finished (exception)",
            State::Cancelled(_) => "cancelled",
        };
        format!("<fastmc aio_future {state}>")
    }
}

/// A future already resolved with `v` (a call that needed no I/O).
pub(super) fn ready(
    py: Python<'_>,
    event_loop: Py<PyAny>,
    v: Py<PyAny>,
) -> PyResult<Bound<'_, PyAioFuture>> {
    let f = PyAioFuture::new(event_loop);
    f.inner.lock().state = State::Result(v);
    Bound::new(py, f)
}
