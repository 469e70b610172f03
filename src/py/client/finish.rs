//! How a method's outcome becomes its Python value, typed by the operation it finishes: each
//! family declares a `Finish` per method next to the reply function its blocking method uses
//! (`py::client::single`, `multi`, `multi::store`, `admin`, `lease`, `near`), and the asyncio
//! client carries it with the call's request (`py::aio::finish`). `Op` names the operation the
//! request is made of, so a method whose request and finish disagree does not compile.
//! Attached only; no I/O.

use pyo3::prelude::*;

use super::state::PyClient;
use crate::client::op::Kind;

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
