//! Waiting for a lone request's reply inside the call, while the loop has nothing else to do.
//!
//! A request the loop's thread began itself (`dispatch::direct`) normally returns a pending
//! future; the loop then sleeps in its selector until the reply makes the direct request's
//! epoll descriptor readable, and its reader callback resolves the future. When nothing else
//! is ready to run (no callback queued, no timer due, the loop not stopping), that turn of
//! the loop is pure overhead: the call can wait for the reply itself, on the loop's own
//! selector as well, so that anything the loop would have woken for (a socket, a timer's
//! deadline, `call_soon_threadsafe`, a signal) ends the wait at once, and the request goes on
//! as usual. The waiting task then gets a resolved future: it resumes without a turn.
//!
//! Only for asyncio's selector loops on epoll, told by their types (`BaseSelectorEventLoop`
//! and `selectors.EpollSelector`, or subclasses), never by attributes that look right: the
//! loop's selector descriptor is borrowed (the binding's one `unsafe` block, below), which is
//! sound only for a descriptor the loop owns. Not on uvloop, which is neither. The wait itself
//! is `dispatch::direct::Direct::wait_here`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// The longest one wait inside a call lasts (asyncio's debug mode reports callbacks that run
/// for 100 ms); after it, the request waits on the loop as usual.
const LONGEST: Duration = Duration::from_millis(10);

/// How a call waits while the loop is idle: the loop's selector, and where it keeps its work.
pub(super) struct IdleWait {
    /// The loop's selector descriptor, duplicated: it stays valid for as long as this does.
    selector: OwnedFd,
    /// The loop's queue of callbacks ready to run (`loop._ready`, a deque it never replaces).
    ready: Py<PyAny>,
}

impl IdleWait {
    /// For `running`, when it is one of asyncio's selector loops on epoll; else `None`.
    pub(super) fn new(running: &Bound<'_, PyAny>) -> Option<IdleWait> {
        // Elsewhere no request is driven on the loop's thread (dispatch/direct_off.rs), so
        // there is nothing to wait for here; macOS's selector is a kqueue besides.
        if cfg!(not(target_os = "linux")) {
            return None;
        }
        let py = running.py();
        let class = |module: &str, name: &str| py.import(module).ok()?.getattr(name).ok();
        let selector_loop = class("asyncio.selector_events", "BaseSelectorEventLoop")?;
        let epoll = class("selectors", "EpollSelector")?;
        if !running.is_instance(&selector_loop).ok()? {
            return None;
        }
        let selector = running.getattr(intern!(py, "_selector")).ok()?;
        if !selector.is_instance(&epoll).ok()? {
            return None;
        }
        // (`_ready`, `_scheduled`, `_stopping`: `BaseEventLoop`'s, read by `budget`)
        let ready = running.getattr(intern!(py, "_ready")).ok()?;
        let fd: i32 = selector
            .call_method0(intern!(py, "fileno"))
            .and_then(|f| f.extract())
            .ok()
            .filter(|&fd| fd >= 0)?;
        // SAFETY: `borrow_raw` needs `fd` to be open, and to stay open, for as long as the
        // borrow lives. The borrow lives for the one `fcntl_dupfd_cloexec` call below, during
        // which the GIL is held, so no Python code runs. `fd` is `running._selector.fileno()`,
        // and `running` is checked above to be asyncio's selector loop and `_selector` an
        // `EpollSelector` (by type, not by look): its `fileno()` is the descriptor of the
        // `select.epoll` object the selector owns, which the loop keeps open until
        // `loop.close()`, and `running` is the loop this very call runs on, so it is not
        // closed. What is kept is the duplicate (an `OwnedFd`), never the borrowed number.
        #[allow(unsafe_code)]
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let selector = rustix::io::fcntl_dupfd_cloexec(borrowed, 0).ok()?;
        Some(IdleWait {
            selector,
            ready: ready.unbind(),
        })
    }

    /// The loop's selector: readable when the loop has a descriptor to serve.
    pub(super) fn selector(&self) -> BorrowedFd<'_> {
        self.selector.as_fd()
    }

    /// How long the call may wait: `None` when the loop has something to do now (a callback
    /// queued, stopping, a timer due), else until its next timer's deadline, at most
    /// `LONGEST`.
    pub(super) fn budget(&self, running: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
        let py = running.py();
        if self.ready.bind(py).len()? > 0
            || running.getattr(intern!(py, "_stopping"))?.is_truthy()?
        {
            return Ok(None);
        }
        let scheduled = running.getattr(intern!(py, "_scheduled"))?;
        let scheduled = scheduled.cast::<PyList>()?;
        if scheduled.is_empty() {
            return Ok(Some(LONGEST));
        }
        // The loop's own clock (a loop may keep a clock of its own, as test loops do).
        let when: f64 = scheduled
            .get_item(0)?
            .getattr(intern!(py, "_when"))?
            .extract()?;
        let now: f64 = running.call_method0(intern!(py, "time"))?.extract()?;
        let left = when - now;
        // A timer beyond what a `Duration` holds (`asyncio.sleep(math.inf)`) is far enough.
        Ok((left > 0.0)
            .then(|| Duration::try_from_secs_f64(left).map_or(LONGEST, |d| d.min(LONGEST))))
    }
}
