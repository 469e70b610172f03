//! The one way from a Python method into the core: `detached` (and `released`, for blocking work
//! that needs no core handle: a TLS setup, a large value compressed, an asyncio call's wait).
//! Owns the rule below; uses `client::state::PyClient` for its core handle and
//! `crate::client::Client`; builds no result and no message of its own.
//!
//! The rule, for every method that does I/O or takes a core lock:
//! 1. convert every argument while attached to the interpreter (this may run Python code: a
//!    `__str__`, an `__and__`, a user `serialize`);
//! 2. detach, run the core in the closure, and return plain Rust data from it;
//! 3. re-attach, build the Python results, and raise what the closure returned as `Err`.
//!
//! So no core lock is taken while attached: a thread blocked on a core lock while attached would
//! keep every other thread out of the interpreter, including the one holding that lock if it is
//! waiting to attach. And no Python code runs inside the closure, so none runs under a core lock.
//! The client's own slot (`PyClient::core`, read to get the core handle) is not a core lock: it is
//! held only to clone an `Arc`, never across Python code or a core call.

use pyo3::marker::Ungil;
use pyo3::prelude::*;

use super::client::state::{not_initialized, PyClient};
use crate::client::drive::noreply::Quick;
use crate::client::sink::Tally;
use crate::client::Client;
use crate::error::Result as CoreResult;

/// Run `f` on `client`'s core with the interpreter released; re-attached, return what it returned.
/// `Err` if the client was never initialized or `f` failed; the constructors of `errors` need no
/// interpreter, so `f` may build its error detached.
#[inline(always)]
pub(super) fn detached<T, F>(py: Python<'_>, client: &PyClient, f: F) -> PyResult<T>
where
    F: Send + FnOnce(&Client) -> PyResult<T>,
    T: Send,
{
    let core = client.core()?;
    let r = released(py, || f(&core));
    // Server state changes this call (or another thread's) noted: log them, call listeners.
    super::events::deliver(py, &client.listeners, &core);
    r
}

/// A single `noreply` write with the interpreter kept: `start` is the core's `*_now`, which
/// never blocks (one non-blocking `send` on an idle connection), and the interpreter is released
/// only for what it could not do: the rest of a partial send, or the whole general path
/// (`general`: connecting, a sync). Keeping it saves a release and re-acquire per write, as
/// much as the `send` itself costs in a loop of such writes.
pub(super) fn noreply_write<T, S, G>(
    py: Python<'_>,
    client: &PyClient,
    start: S,
    general: G,
) -> PyResult<Option<CoreResult<T>>>
where
    T: Send + Clone + Tally,
    S: FnOnce(&Client) -> Quick<T>,
    G: Send + FnOnce(&Client) -> Option<CoreResult<T>>,
{
    // The core in place under its read lock while `start` runs (it never blocks); a clone of
    // it, without the lock, for anything else: work with the interpreter released, or the
    // listeners (Python code, which may do anything).
    let guard = client.core.read();
    let core = guard.as_deref().ok_or_else(not_initialized)?;
    let r = match start(core) {
        Quick::Done(r) if !core.events_pending() => return Ok(Some(r)),
        q => q,
    };
    let core = guard.clone().ok_or_else(not_initialized)?;
    drop(guard);
    let r = match r {
        Quick::Done(r) => Some(r),
        Quick::Blocking => released(py, || general(&core)),
        rest => released(py, || core.forget_end(rest)),
    };
    super::events::deliver(py, &client.listeners, &core);
    Ok(r)
}

/// Run `f` with the interpreter released: the only place in the binding that detaches.
#[inline(always)]
pub(super) fn released<T, F>(py: Python<'_>, f: F) -> T
where
    F: Ungil + FnOnce() -> T,
    T: Ungil,
{
    py.detach(f)
}
