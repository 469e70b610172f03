//! The table of every method's finish (each declared by its family, see `py::client::finish`),
//! one line each: it makes the enum a pending asyncio call carries, and its `reply`, which
//! hands the outcome to the method's own finish. Attached only; no I/O.

use pyo3::prelude::*;

use crate::client::op::{Kind, Outcome};
use crate::py::client::finish::{Finish, Prepared};
use crate::py::client::state::PyClient;
use crate::py::client::{admin, lease, multi, near, single};
use crate::py::errors;

/// `f` applied to `outcome`, which a request of `F::Op` ended with.
fn finish<F: Finish>(f: F, slf: &Bound<'_, PyClient>, outcome: Outcome) -> PyResult<Py<PyAny>> {
    match F::Op::outcome(outcome) {
        Some(out) => f.finish(slf, out),
        // No request of `F::Op` ends with another operation's outcome.
        None => Err(errors::no_result()),
    }
}

/// Every method's finish, once: the enum `Finishes` a pending call carries, and its `reply`.
macro_rules! finishes {
    ($($name:ident($ty:ty),)*) => {
        pub(super) enum Finishes {
            $($name($ty),)*
        }

        $(impl From<$ty> for Finishes {
            fn from(f: $ty) -> Finishes {
                Finishes::$name(f)
            }
        })*

        /// A call as the asyncio client submits it: its finish one of the table's.
        pub(super) type Submitted = Prepared<Finishes>;

        impl Finishes {
            /// The method's return value (or exception) for `outcome`.
            pub(super) fn reply(
                self,
                slf: &Bound<'_, PyClient>,
                outcome: Outcome,
            ) -> PyResult<Py<PyAny>> {
                match self {
                    $(Finishes::$name(f) => finish(f, slf, outcome),)*
                }
            }
        }
    };
}

finishes! {
    Get(single::get::GetFinish),
    Gets(single::get::GetsFinish),
    Store(single::store::StoreFinish),
    Delete(single::delete::DeleteFinish),
    Touch(single::touch::TouchFinish),
    Arith(single::arith::ArithFinish),
    Fetch(multi::fetch::FetchFinish),
    StoreMulti(multi::store::StoreMultiFinish),
    DeleteMulti(multi::delete::DeleteMultiFinish),
    IncrMulti(multi::incr::IncrMultiFinish),
    TouchMulti(multi::touch::TouchMultiFinish),
    Flush(admin::FlushFinish),
    Stats(admin::StatsFinish),
    LeaseGet(lease::LeaseGetFinish),
    LeaseRelease(lease::LeaseReleaseFinish),
    Invalidate(lease::InvalidateFinish),
    NearCheck(near::CheckFinish),
    NearCasMulti(near::CasMultiFinish),
}
