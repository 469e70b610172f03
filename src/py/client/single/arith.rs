//! incr and decr (creating a missing counter with `initial=`): the arguments converted and
//! checked, the core's arithmetic, the new value; and the asynchronous half.

use crate::client::op::arith::{Arith, Create};
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::method::{Finish, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self};
use crate::py::io::detached;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

/// incr/decr's `initial=` and `time=` (fastmc's own): a missing counter is created at
/// `initial`, an unsigned 64-bit number, expiring as `set`'s `time` says. Without `initial`, a
/// miss stays `NotFound`, and a nonzero `time` would have nothing to apply to.
pub(crate) fn arith_create(
    initial: Option<&Bound<'_, PyAny>>,
    time: MaybeArg<'_, '_>,
) -> PyResult<Option<Create>> {
    let exptime = time.map_or(0, uint_mask)?;
    let Some(initial) = initial.filter(|v| !v.is_none()) else {
        if exptime != 0 {
            return Err(PyTypeError::new_err("time= applies only with initial="));
        }
        return Ok(None);
    };
    if !initial.is_instance_of::<PyInt>() || initial.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("initial must be an integer"));
    }
    let initial = initial
        .extract::<u64>()
        .map_err(|_| PyValueError::new_err("initial must be between 0 and 2**64-1"))?;
    Ok(Some(Create { initial, exptime }))
}

/// incr/decr's key and delta, converted and checked (an empty key fails here).
pub(crate) fn arith_args<'k>(
    key: &'k Bound<'_, PyAny>,
    delta: MaybeArg<'_, '_>,
) -> PyResult<(&'k [u8], u64)> {
    // `s#|i`: the key, the delta; then the key's length and the delta's sign.
    let k = str_or_bytes(key, ArgPos::nth(1))?;
    let d = delta.map_or(1, c_int)?;
    check_key_len(k)?;
    if d < 0 {
        return Err(PyValueError::new_err("delta must be positive"));
    }
    if k.is_empty() {
        // As libmemcached counts it: one key failed, refused as a bad key.
        let bad = CoreError::BadKey(String::new());
        return Err(errors::keys_failed(1, false, errors::ArithRc::Failed(&bad)));
    }
    Ok((k, d as u64))
}

/// What `incr`/`decr` return for the core's outcome `r`.
pub(crate) fn arith_reply(r: Option<Result<Option<u64>, CoreError>>) -> PyResult<u64> {
    match r {
        Some(Ok(Some(n))) => Ok(n),
        Some(Ok(None)) => Err(errors::keys_failed(1, true, errors::ArithRc::NotFound)),
        Some(Err(e)) => Err(errors::keys_failed(1, false, errors::ArithRc::Failed(&e))),
        None => Err(errors::no_result()),
    }
}

/// `incr` and `decr` (`incr(key, delta=1, *, initial=None, time=0)`): the new value.
pub(crate) struct Count<'k> {
    key: &'k [u8],
    op: Arith,
}

impl<'k> Count<'k> {
    pub(crate) fn parse(
        incr: bool,
        key: &'k Bound<'_, PyAny>,
        delta: MaybeArg<'_, '_>,
        initial: Option<&Bound<'_, PyAny>>,
        time: MaybeArg<'_, '_>,
    ) -> PyResult<Parsed<Self>> {
        let (k, delta) = arith_args(key, delta)?;
        let create = arith_create(initial, time)?;
        Ok(Parsed::Call(Count {
            key: k,
            op: Arith {
                incr,
                delta,
                create,
            },
        }))
    }
}

impl Finish for Count<'_> {
    type Op = Arith;
    type Value = u64;

    /// As `Counted`'s: the answer needs nothing of the call.
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<Result<Option<u64>, CoreError>>,
    ) -> PyResult<u64> {
        Counted.finish(slf, v)
    }
}

impl Method for Count<'_> {
    type Later = Counted;

    type Wire<'w>
        = [&'w [u8]; 1]
    where
        Self: 'w;

    fn op(&self) -> Arith {
        self.op
    }

    fn wire(&self) -> [&[u8]; 1] {
        [self.key]
    }

    /// (The key and delta stay with the request: the answer needs neither.)
    fn later(self) -> Counted {
        Counted
    }

    /// One key's own call (`Client::arith_one`).
    fn call(self, slf: &Bound<'_, PyClient>) -> PyResult<u64> {
        let (
            k,
            Arith {
                incr,
                delta,
                create,
            },
        ) = (self.key, self.op);
        let r = detached(slf.py(), slf.get(), |core| {
            Ok(core.arith_one(incr, k, delta, create))
        })?;
        arith_reply(r)
    }
}

/// A `Count` finished later: the new value needs nothing kept.
pub(crate) struct Counted;

impl Finish for Counted {
    type Op = Arith;
    type Value = u64;

    fn finish(
        self,
        _: &Bound<'_, PyClient>,
        mut v: Vec<Result<Option<u64>, CoreError>>,
    ) -> PyResult<u64> {
        arith_reply(v.pop())
    }
}
