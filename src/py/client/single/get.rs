//! get and gets: the key converted and checked, the core's fetch, the value decoded (`codec`);
//! and the asynchronous half: the call prepared, its finish.

use pyo3::exceptions::PyValueError;
use std::ops::Deref;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::client::fetched::Fetched;
use crate::client::op::get::Get as FetchOp;
use crate::py::args::*;
use crate::py::client::method::{Finish, Kept, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};

/// get's key, converted and checked.
pub(crate) fn get_key<'k>(key: &'k Bound<'_, PyAny>) -> PyResult<&'k [u8]> {
    let k = key_obj(key)?;
    check_key_len(k)?;
    Ok(k)
}

/// What `get` returns for the core's outcome `f` (one key).
pub(crate) fn get_reply(
    slf: &Bound<'_, PyClient>,
    k: &[u8],
    default: Py<PyAny>,
    mut f: Fetched,
) -> PyResult<Py<PyAny>> {
    let this = slf.get();
    match f.items.pop() {
        Some(Ok(Some(item))) => Ok(this
            .decode_item(slf, k, f.bytes(&item), item.flags)?
            .unwrap_or(default)),
        Some(Ok(None)) => Ok(default),
        Some(Err(e)) => Err(errors::op_error(Op::Get, Some(k), &e)),
        None => Ok(default),
    }
}

/// gets' key, converted and checked (with the cas behavior); `None` for an empty key, which
/// answers (None, None) without I/O.
pub(crate) fn gets_key<'k>(
    slf: &Bound<'_, PyClient>,
    key: &'k Bound<'_, PyAny>,
) -> PyResult<Option<&'k [u8]>> {
    let k = key_obj(key)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok(None);
    }
    if !slf.get().flags()?.cas {
        return Err(PyValueError::new_err("gets without cas behavior"));
    }
    Ok(Some(k))
}

/// What `gets` returns for the core's outcome `f` (one key).
pub(crate) fn gets_reply(
    slf: &Bound<'_, PyClient>,
    k: &[u8],
    mut f: Fetched,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let py = slf.py();
    let this = slf.get();
    match f.items.pop() {
        Some(Ok(Some(item))) => match this.decode_item(slf, k, f.bytes(&item), item.flags)? {
            Some(v) => Ok((v, item.cas.unwrap_or(0).into_py_any(py)?)),
            None => Ok((py.None(), py.None())),
        },
        Some(Ok(None)) | None => Ok((py.None(), py.None())),
        // pylibmc names no key in gets' messages.
        Some(Err(e)) => Err(errors::op_error(Op::Gets, None, &e)),
    }
}

/// `get` and `gat`: the value, or `default`.
pub(crate) struct Get<K> {
    key: K,
    default: Py<PyAny>,
    /// `gat`'s expiry.
    touch: Option<u32>,
}

impl<'k> Get<&'k [u8]> {
    /// `get(key, default=None)`.
    #[inline(always)]
    pub(crate) fn parse(
        key: &'k Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Parsed<Self>> {
        Ok(Self::of(get_key(key)?, default, None, key.py()))
    }

    /// `gat(key, time, default=None)`: the key's expiry set to `time` as it is read.
    pub(crate) fn parse_gat(
        key: &'k Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Parsed<Self>> {
        let k = get_key(key)?;
        let exptime = uint_mask(time)?;
        Ok(Self::of(k, default, Some(exptime), key.py()))
    }

    #[inline(always)]
    fn of(
        k: &'k [u8],
        default: Option<Py<PyAny>>,
        touch: Option<u32>,
        py: Python<'_>,
    ) -> Parsed<Self> {
        let default = default.unwrap_or_else(|| py.None());
        if k.is_empty() {
            return Parsed::Ready(default);
        }
        Parsed::Call(Get {
            key: k,
            default,
            touch,
        })
    }
}

impl<K: Deref<Target = [u8]>> Finish for Get<K> {
    type Op = FetchOp;
    type Value = Py<PyAny>;

    #[inline(always)]
    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Py<PyAny>> {
        get_reply(slf, &self.key, self.default, f)
    }
}

impl Method for Get<&[u8]> {
    type Later = Get<Kept>;

    type Wire<'w>
        = [&'w [u8]; 1]
    where
        Self: 'w;

    #[inline(always)]
    fn op(&self) -> FetchOp {
        FetchOp {
            cas: false,
            touch: self.touch,
        }
    }

    #[inline(always)]
    fn wire(&self) -> [&[u8]; 1] {
        [self.key]
    }

    fn later(self) -> Get<Kept> {
        Get {
            key: Kept::from_slice(self.key),
            default: self.default,
            touch: self.touch,
        }
    }
}

/// `gets`: `(value, cas)`.
pub(crate) struct Gets<K> {
    key: K,
}

impl<'k> Gets<&'k [u8]> {
    /// `gets(key)`.
    pub(crate) fn parse(
        slf: &Bound<'_, PyClient>,
        key: &'k Bound<'_, PyAny>,
    ) -> PyResult<Parsed<Self>> {
        let py = slf.py();
        Ok(match gets_key(slf, key)? {
            Some(k) => Parsed::Call(Gets { key: k }),
            None => Parsed::Ready((py.None(), py.None())),
        })
    }
}

impl<K: Deref<Target = [u8]>> Finish for Gets<K> {
    type Op = FetchOp;
    type Value = (Py<PyAny>, Py<PyAny>);

    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Self::Value> {
        gets_reply(slf, &self.key, f)
    }
}

impl Method for Gets<&[u8]> {
    type Later = Gets<Kept>;

    type Wire<'w>
        = [&'w [u8]; 1]
    where
        Self: 'w;

    fn op(&self) -> FetchOp {
        FetchOp {
            cas: true,
            touch: None,
        }
    }

    fn wire(&self) -> [&[u8]; 1] {
        [self.key]
    }

    fn later(self) -> Gets<Kept> {
        Gets {
            key: Kept::from_slice(self.key),
        }
    }
}
