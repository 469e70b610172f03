//! A call of the asyncio client as it is handed on: answered at once (`Prepared::Ready`), or a
//! request with the `Finish` that will turn its outcome into the method's value. Each method's
//! finish is declared by its family, next to the reply function its blocking method uses (see
//! `py::client::finish`); `Prepared::keys`, `items` and `whole` take the request's operation as that
//! finish's `Op`, so a request and a finish that disagree do not compile. The table below lists
//! every finish once and makes the enum a pending call carries. Attached only; no I/O.

use pyo3::prelude::*;

use crate::client::keys::Keys;
use crate::client::op::{Kind, Outcome};
use crate::dispatch::request::{Items, Request};
use crate::py::client::finish::Finish;
use crate::py::client::state::PyClient;
use crate::py::client::{admin, lease, multi, near, single};
use crate::py::errors;

// Lives on the stack for the length of one call: boxing the request would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Prepared {
    /// Answered without I/O.
    Ready(Py<PyAny>),
    Submit(Request, Finishes),
}

impl Prepared {
    /// `op` on `keys`, finished by `f`.
    pub(super) fn keys<F: Finish>(op: F::Op, keys: Keys, f: F) -> Prepared
    where
        Finishes: From<F>,
    {
        Prepared::Submit(Request::new(op, keys), f.into())
    }

    /// `op` sending `items` (a store), finished by `f`.
    pub(super) fn items<F: Finish>(op: F::Op, items: Items, f: F) -> Prepared
    where
        Finishes: From<F>,
    {
        Prepared::Submit(Request::items(op, items), f.into())
    }

    /// A whole-client command, finished by `f`.
    pub(super) fn whole<F: Finish>(op: F::Op, f: F) -> Prepared
    where
        Finishes: From<F>,
    {
        Prepared::Submit(Request::whole(op), f.into())
    }
}

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
    Get(single::GetFinish),
    Gets(single::GetsFinish),
    Store(single::StoreFinish),
    Delete(single::DeleteFinish),
    Touch(single::TouchFinish),
    Arith(single::ArithFinish),
    Fetch(multi::FetchFinish),
    StoreMulti(multi::store::StoreMultiFinish),
    DeleteMulti(multi::DeleteMultiFinish),
    IncrMulti(multi::IncrMultiFinish),
    TouchMulti(multi::TouchMultiFinish),
    Flush(admin::FlushFinish),
    Stats(admin::StatsFinish),
    LeaseGet(lease::LeaseGetFinish),
    LeaseRelease(lease::LeaseReleaseFinish),
    Invalidate(lease::InvalidateFinish),
    NearCheck(near::CheckFinish),
    NearCasMulti(near::CasMultiFinish),
}
