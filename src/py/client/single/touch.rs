//! touch: the key and time converted and checked, the core's touch, the answer; and the
//! asynchronous half.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::client::op::touch::Touch;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::finish::{one, Finish, Prepared};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// Change the expiry time of a key.
pub(crate) fn touch(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let (k, exptime) = touch_args(key, time)?;
    if k.is_empty() {
        return Ok(false);
    }
    let r = detached(py, this, |core| Ok(core.touch_one(k, exptime, noreply)))?;
    touch_reply(k, r)
}

/// touch's key and time, converted and checked.
pub(crate) fn touch_args<'k>(
    key: &'k Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
) -> PyResult<(&'k [u8], u32)> {
    // `s#k`: the key, the time (an int proper, 64 bits: wrapped to memcached's 32), the length.
    let k = str_or_bytes(key, ArgPos::nth(1))?;
    let exptime = ulong_mask(time, ArgPos::nth(2))? as u32;
    check_key_len(k)?;
    Ok((k, exptime))
}

/// What `touch` returns for the core's outcome `r`.
pub(crate) fn touch_reply(k: &[u8], r: Option<Result<bool, CoreError>>) -> PyResult<bool> {
    match r {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(errors::op_error(Op::Touch, Some(k), &e)),
        None => Ok(false),
    }
}

/// The asynchronous `touch`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_touch(
    key: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    noreply: bool,
) -> PyResult<Prepared<TouchFinish>> {
    let (k, exptime) = touch_args(key, time)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(false.into_py_any(key.py())?));
    }
    let finish = TouchFinish { key: k.to_vec() };
    Ok(Prepared::keys(Touch { exptime, noreply }, one(k), finish))
}

/// `touch`: whether the key was there.
pub(crate) struct TouchFinish {
    pub key: Vec<u8>,
}

impl Finish for TouchFinish {
    type Op = crate::client::op::touch::Touch;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<bool, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        touch_reply(&self.key, v.pop())?.into_py_any(slf.py())
    }
}
