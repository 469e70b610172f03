//! get and gets: the key converted and checked, the core's fetch, the value decoded (`codec`);
//! and the asynchronous half: the call prepared, its finish.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::IntoPyObjectExt;

use crate::client::fetched::Fetched;
use crate::client::op::get::Get;
use crate::py::args::*;
use crate::py::client::finish::{one, Finish, Prepared};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// Retrieve a key from a memcached.
pub(crate) fn get(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    default: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let this = slf.get();
    let default = default.unwrap_or_else(|| py.None());
    let k = get_key(key)?;
    if k.is_empty() {
        return Ok(default);
    }
    let f = detached(py, this, |core| Ok(core.get_multi(&[k], false)))?;
    get_reply(slf, k, default, f)
}

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

/// Retrieve a key and cas_id from a memcached.
pub(crate) fn gets(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let py = slf.py();
    let this = slf.get();
    let Some(k) = gets_key(slf, key)? else {
        return Ok((py.None(), py.None()));
    };
    let f = detached(py, this, |core| Ok(core.get_multi(&[k], true)))?;
    gets_reply(slf, k, f)
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

const GET: Get = Get {
    cas: false,
    touch: None,
};

const GETS: Get = Get {
    cas: true,
    touch: None,
};

/// The asynchronous `get`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_get(
    key: &Bound<'_, PyAny>,
    default: Option<Py<PyAny>>,
) -> PyResult<Prepared<GetFinish>> {
    let default = default.unwrap_or_else(|| key.py().None());
    let k = get_key(key)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(default));
    }
    let finish = GetFinish {
        key: k.to_vec(),
        default,
    };
    Ok(Prepared::keys(GET, one(k), finish))
}

/// The asynchronous `gets`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_gets(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
) -> PyResult<Prepared<GetsFinish>> {
    let py = slf.py();
    let Some(k) = gets_key(slf, key)? else {
        let none = PyTuple::new(py, [py.None(), py.None()])?;
        return Ok(Prepared::Ready(none.into_any().unbind()));
    };
    Ok(Prepared::keys(GETS, one(k), GetsFinish { key: k.to_vec() }))
}

/// `get` and `gat`: the value, or `default`.
pub(crate) struct GetFinish {
    pub key: Vec<u8>,
    pub default: Py<PyAny>,
}

impl Finish for GetFinish {
    type Op = crate::client::op::get::Get;
    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Py<PyAny>> {
        get_reply(slf, &self.key, self.default, f)
    }
}

/// `gets`: `(value, cas)`.
pub(crate) struct GetsFinish {
    pub key: Vec<u8>,
}

impl Finish for GetsFinish {
    type Op = crate::client::op::get::Get;
    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Py<PyAny>> {
        gets_reply(slf, &self.key, f)?.into_py_any(slf.py())
    }
}
