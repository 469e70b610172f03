//! touch: the key and time converted and checked, the core's touch, the answer; and the
//! asynchronous half.

use std::ops::Deref;

use pyo3::prelude::*;

use crate::client::op::touch::Touch;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::method::{Finish, Kept, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

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

/// `touch(key, time, noreply=False)`: whether the key was there.
pub(crate) struct TouchKey<K> {
    key: K,
    op: Touch,
}

impl<'k> TouchKey<&'k [u8]> {
    pub(crate) fn parse(
        key: &'k Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        noreply: bool,
    ) -> PyResult<Parsed<Self>> {
        let (k, exptime) = touch_args(key, time)?;
        if k.is_empty() {
            return Ok(Parsed::Ready(false));
        }
        Ok(Parsed::Call(TouchKey {
            key: k,
            op: Touch { exptime, noreply },
        }))
    }
}

impl<K: Deref<Target = [u8]>> Finish for TouchKey<K> {
    type Op = Touch;
    type Value = bool;

    fn finish(
        self,
        _: &Bound<'_, PyClient>,
        mut v: Vec<Result<bool, CoreError>>,
    ) -> PyResult<bool> {
        touch_reply(&self.key, v.pop())
    }
}

impl Method for TouchKey<&[u8]> {
    type Later = TouchKey<Kept>;

    type Wire<'w>
        = [&'w [u8]; 1]
    where
        Self: 'w;

    fn op(&self) -> Touch {
        self.op
    }

    fn wire(&self) -> [&[u8]; 1] {
        [self.key]
    }

    fn later(self) -> TouchKey<Kept> {
        TouchKey {
            key: Kept::from_slice(self.key),
            op: self.op,
        }
    }

    /// One key's own call (`Client::touch_one`).
    fn call(self, slf: &Bound<'_, PyClient>) -> PyResult<bool> {
        let (k, Touch { exptime, noreply }) = (self.key, self.op);
        let r = detached(slf.py(), slf.get(), |core| {
            Ok(core.touch_one(k, exptime, noreply))
        })?;
        touch_reply(k, r)
    }
}
