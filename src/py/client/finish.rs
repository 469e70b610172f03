//! A method's asynchronous half, as its family declares it next to the blocking method: the
//! call prepared from the arguments (`Prepared`: answered at once, or a request and its finish)
//! and the `Finish` that turns the operation's outcome into the method's Python value, through
//! the reply function the blocking method uses. `Finish::Op` names the operation the request is
//! made of, and `Prepared::keys`, `items` and `whole` take the request's operation as that
//! `Op`: a method whose request and finish disagree does not compile. The asyncio client
//! (`py::aio`) submits the request and carries the finish (its table: `py::aio::finish`).
//! Attached only; no I/O.

use pyo3::prelude::*;

use super::method::{Finishing, Submitted};
use super::state::PyClient;
use crate::client::keys::Keys;
use crate::client::op::{Kind, Outcome};
use crate::dispatch::request::{Items, Request};

/// A method's conversion of its operation's outcome into its value (or exception).
pub(crate) trait Finish: Send + 'static {
    /// The operation whose outcome this converts.
    type Op: Kind;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        out: <Self::Op as Kind>::Output,
    ) -> PyResult<Py<PyAny>>;
}

/// A call prepared from a method's arguments: answered without I/O, or a request with its
/// finish.
// Lives on the stack for the length of one call: boxing the request would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Prepared<F> {
    Submit(Request, F),
}

impl<F: Finish> Prepared<F> {
    /// `op` on `keys`, finished by `f`.
    pub(crate) fn keys(op: F::Op, keys: Keys, f: F) -> Prepared<F> {
        Prepared::Submit(Request::new(op, keys), f)
    }

    /// `op` sending `items` (a store), finished by `f`.
    pub(crate) fn items(op: F::Op, items: Items, f: F) -> Prepared<F> {
        Prepared::Submit(Request::items(op, items), f)
    }

    /// A whole-client command, finished by `f`.
    pub(crate) fn whole(op: F::Op, f: F) -> Prepared<F> {
        Prepared::Submit(Request::whole(op), f)
    }
}

impl<F: Finish> Prepared<F> {
    /// The call as the asyncio client takes it.
    pub(crate) fn submitted(self) -> Submitted {
        match self {
            Prepared::Submit(req, f) => Submitted::Submit(req, Box::new(Finished(f))),
        }
    }
}

/// A `Finish` as a pending asyncio call carries it.
struct Finished<F>(F);

impl<F: Finish> Finishing for Finished<F> {
    fn reply(self: Box<Self>, slf: &Bound<'_, PyClient>, outcome: Outcome) -> PyResult<Py<PyAny>> {
        match F::Op::outcome(outcome) {
            Some(out) => self.0.finish(slf, out),
            None => Err(crate::py::errors::no_result()),
        }
    }
}

/// One key, owned for a request.
pub(crate) fn one(k: &[u8]) -> Keys {
    Keys::of(&[k])
}

/// Key objects kept past the call, for its finish.
pub(crate) fn unbind(objs: &[&Bound<'_, PyAny>]) -> Vec<Py<PyAny>> {
    objs.iter().map(|o| (*o).clone().unbind()).collect()
}

/// Key objects a finish kept, back in the interpreter.
pub(crate) fn bound<'py>(py: Python<'py>, objs: Vec<Py<PyAny>>) -> Vec<Bound<'py, PyAny>> {
    objs.into_iter().map(|o| o.into_bound(py)).collect()
}
