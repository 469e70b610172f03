//! A method of the client, as its family file declares it: one type (`Method`) holding the
//! arguments it was called with, parsed (its `parse`, answered at once when no I/O is needed:
//! `Parsed::Ready`), which says the request it makes (`op`, an operation of the core, and
//! `wire`, what it is applied to) and turns that operation's outcome into the method's value
//! (`finish`, the `Finish` trait). The table (`py::methods`) makes both Python methods from
//! it: the blocking method runs the request here and now (`Method::call`, with its arguments
//! borrowed from the caller's objects), the asyncio client's submits it and finishes later
//! (`Method::later` keeps what the finish needs past the call; `Finishing` is how a pending
//! call carries it).
//!
//! `Finish::Op` names the operation both the request and the finish are typed by: a method
//! whose request and finish disagree does not compile. Attached only; no I/O of its own (the
//! blocking call detaches through `py::io`).

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use smallvec::SmallVec;

use super::state::PyClient;
use crate::client::keys::Keys;
use crate::client::op::{Args, Kind, Op, Outcome};
use crate::dispatch::request::{Items, Request};
use crate::protocol::StoreItem;
use crate::py::errors;
use crate::py::io::detached;

/// What a call needs to give its answer: the outcome of `Op` into the method's value.
pub(crate) trait Finish: Sized {
    /// The operation it runs; its outcome is what `finish` takes.
    type Op: Kind<Output: Send> + Sync;
    /// What the method returns.
    type Value: for<'py> IntoPyObject<'py> + Send;

    /// The method's value (or exception) for the operation's outcome.
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        out: <Self::Op as Kind>::Output,
    ) -> PyResult<Self::Value>;
}

/// One method's call, its arguments parsed.
pub(crate) trait Method: Finish {
    /// What `finish` needs, owned (`later`), to finish after the call returned: the same type
    /// owning its keys, or (where the call borrows the caller's objects) one of its own.
    type Later: Finish<Op = Self::Op, Value = Self::Value> + Send + 'static;

    /// What its request is applied to, borrowed from it for the call.
    type Wire<'w>: Wire
    where
        Self: 'w;

    /// Its operation.
    fn op(&self) -> Self::Op;

    /// What its operation is applied to: its keys, its items, or nothing (a whole-client
    /// command: flush, stats).
    fn wire(&self) -> Self::Wire<'_>;

    /// What `finish` needs, owned.
    fn later(self) -> Self::Later;

    /// The blocking method: the request run on the core with the interpreter released, then
    /// finished. (A family may take a shorter way: a lone `noreply` write.)
    #[inline(always)]
    fn call(self, slf: &Bound<'_, PyClient>) -> PyResult<Self::Value> {
        let out = {
            let (op, wire) = (self.op(), self.wire());
            detached(slf.py(), slf.get(), |core| Ok(op.run(core, wire.args())))?
        };
        self.finish(slf, out)
    }

    /// The asyncio method's request (its own copy of the keys or items), and what finishes it.
    fn submit(self) -> (Request, Self::Later) {
        let req = self.wire().request(self.op());
        (req, self.later())
    }
}

/// What a request is applied to, as a call holds it: the core's `Args` of it, and the
/// asyncio client's `Request` of it (its own copy).
pub(crate) trait Wire: Sync {
    fn args(&self) -> Args<'_, '_>;
    fn request(&self, op: impl Into<Op>) -> Request;
}

/// One key.
impl Wire for [&[u8]; 1] {
    #[inline(always)]
    fn args(&self) -> Args<'_, '_> {
        Args::keys(self)
    }
    fn request(&self, op: impl Into<Op>) -> Request {
        Request::new(op, Keys::of(self))
    }
}

impl Wire for Vec<&[u8]> {
    fn args(&self) -> Args<'_, '_> {
        Args::keys(self)
    }
    fn request(&self, op: impl Into<Op>) -> Request {
        Request::new(op, Keys::of(self))
    }
}

/// One item.
impl Wire for [StoreItem<'_>; 1] {
    #[inline(always)]
    fn args(&self) -> Args<'_, '_> {
        Args::items(self)
    }
    fn request(&self, op: impl Into<Op>) -> Request {
        Request::items(op, Items::of(self))
    }
}

impl Wire for Vec<StoreItem<'_>> {
    fn args(&self) -> Args<'_, '_> {
        Args::items(self)
    }
    fn request(&self, op: impl Into<Op>) -> Request {
        Request::items(op, Items::of(self))
    }
}

/// A whole-client command's: no keys.
impl Wire for () {
    fn args(&self) -> Args<'_, '_> {
        Args::default()
    }
    fn request(&self, op: impl Into<Op>) -> Request {
        Request::whole(op)
    }
}

/// A key kept past an asyncio call, for its finish: inline when short (most keys: no allocation
/// besides the finish's own box), on the heap when long. A single-key method's type is generic
/// over its key: `&[u8]`, borrowed from the caller's object for the blocking call, or `Kept`.
pub(crate) type Kept = SmallVec<[u8; 48]>;

/// A method's arguments parsed: its value at once, or the call to make.
pub(crate) enum Parsed<M: Method> {
    Ready(M::Value),
    Call(M),
}

/// The blocking method of a parsed call.
#[inline(always)]
pub(crate) fn blocking<M: Method>(
    slf: &Bound<'_, PyClient>,
    parsed: PyResult<Parsed<M>>,
) -> PyResult<M::Value> {
    match parsed? {
        Parsed::Ready(v) => Ok(v),
        Parsed::Call(m) => m.call(slf),
    }
}

/// A pending asyncio call's finish, whatever its method: the outcome into the Python value.
pub(crate) trait Finishing: Send {
    fn reply(self: Box<Self>, slf: &Bound<'_, PyClient>, outcome: Outcome) -> PyResult<Py<PyAny>>;
}

impl<F: Finish + Send + 'static> Finishing for F {
    fn reply(self: Box<Self>, slf: &Bound<'_, PyClient>, outcome: Outcome) -> PyResult<Py<PyAny>> {
        match F::Op::outcome(outcome) {
            Some(out) => self.finish(slf, out)?.into_py_any(slf.py()),
            // No request of `F::Op` ends with another operation's outcome.
            None => Err(errors::no_result()),
        }
    }
}

/// A call as the asyncio client takes it: answered at once, or a request and its finish.
pub(crate) enum Submitted {
    Ready(Py<PyAny>),
    Submit(Request, Box<dyn Finishing>),
}

/// The asyncio method of a parsed call.
pub(crate) fn submitted<M: Method>(
    py: Python<'_>,
    parsed: PyResult<Parsed<M>>,
) -> PyResult<Submitted> {
    Ok(match parsed? {
        Parsed::Ready(v) => Submitted::Ready(v.into_py_any(py)?),
        Parsed::Call(m) => {
            let (req, later) = m.submit();
            Submitted::Submit(req, Box::new(later))
        }
    })
}

/// Key objects kept past the call, for its finish.
pub(crate) fn unbind(objs: &[&Bound<'_, PyAny>]) -> Vec<Py<PyAny>> {
    objs.iter().map(|o| (*o).clone().unbind()).collect()
}

/// Key objects a finish kept, back in the interpreter.
pub(crate) fn bound<'py>(py: Python<'py>, objs: Vec<Py<PyAny>>) -> Vec<Bound<'py, PyAny>> {
    objs.into_iter().map(|o| o.into_bound(py)).collect()
}
