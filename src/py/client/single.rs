//! The single-key methods: get, gets, the stores (set, add, replace, append, prepend, cas, through
//! one `store` and its `StoreArgs`), delete, touch, incr and decr. Arguments are converted with
//! `py::args`, values with `codec`, the core is called through `io::detached` and errors are built
//! by `py::errors`. Uses `client::{StoreItem, StoreStatus}` and the core's `Error`.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use super::PyClient;
use crate::client::{Fetched, StoreItem, StoreStatus};
use crate::error::Error as CoreError;
use crate::protocol::StoreCmd;
use crate::py::args::*;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// A single store's arguments, converted once in pylibmc's order: key, time, min_compress_len,
/// compress_level (the value is encoded later, by `store`).
pub(crate) struct StoreArgs<'k> {
    pub key: &'k [u8],
    pub exptime: u32,
    pub min_compress_len: u32,
    pub level: i32,
    pub cas: u64,
    pub noreply: bool,
}

impl<'k> StoreArgs<'k> {
    pub(crate) fn parse(
        key: &'k Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<Self> {
        let key = key_bytes(key, KeyErrorWording::BytesLike)?;
        check_key_len(key)?;
        Ok(StoreArgs {
            key,
            exptime: wrap_u32(time)?,
            min_compress_len: wrap_u32(min_compress_len)?,
            level: check_compress_level(compress_level)?,
            cas: 0,
            noreply,
        })
    }
}

/// set, add, replace, append, prepend and cas: one key, one value.
pub(super) fn store(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    val: &Bound<'_, PyAny>,
    args: StoreArgs<'_>,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let key = args.key;
    let (data, flags) = this.encode_value(slf, val, args.min_compress_len, args.level)?;
    if key.is_empty() {
        if cmd == StoreCmd::Cas {
            return Err(errors::bad_key(Op::Store(StoreCmd::Cas), "key is empty"));
        }
        return Ok(false);
    }
    let item = StoreItem {
        key,
        flags,
        exptime: args.exptime,
        data: &data,
        cas: args.cas,
    };
    let r = detached(py, this, |core| {
        Ok(core.store_multi(cmd, &[item], args.noreply).pop())
    })?;
    store_reply(this, cmd, key, r)
}

/// What a single store returns for the core's outcome `r`.
pub(crate) fn store_reply(
    this: &PyClient,
    cmd: StoreCmd,
    key: &[u8],
    r: Option<Result<StoreStatus, CoreError>>,
) -> PyResult<bool> {
    match r {
        Some(Ok(StoreStatus::Stored)) => Ok(true),
        // Binary replace of a missing key: NOT FOUND (text mode says NOT_STORED: False).
        Some(Ok(StoreStatus::NotFound)) if cmd == StoreCmd::Replace => {
            Err(errors::not_found(Op::Store(cmd), None))
        }
        Some(Ok(StoreStatus::NotFound)) if cmd == StoreCmd::Cas => {
            Err(errors::not_found(Op::Store(cmd), Some(key)))
        }
        Some(Ok(_)) => Ok(false),
        Some(Err(CoreError::BadKey(_))) if this.flags()?.verify_keys && cmd != StoreCmd::Cas => {
            Ok(false)
        }
        Some(Err(e)) => {
            let k = if cmd == StoreCmd::Cas {
                Some(key)
            } else {
                None
            };
            Err(errors::op_error(Op::Store(cmd), k, &e))
        }
        None => Err(errors::no_result()),
    }
}

/// Retrieve a key from a memcached.
pub(super) fn get(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    default: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let this = slf.get();
    let default = default.unwrap_or_else(|| py.None());
    let k = key_bytes(key, KeyErrorWording::MustBeBytes)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok(default);
    }
    let f = detached(py, this, |core| Ok(core.get_multi(&[k], false)))?;
    get_reply(slf, k, default, f)
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
            .decode_item(slf, f.bytes(&item), item.flags)?
            .unwrap_or(default)),
        Some(Ok(None)) => Ok(default),
        Some(Err(e)) => Err(errors::op_error(Op::Get, Some(k), &e)),
        None => Ok(default),
    }
}

/// Retrieve a key and cas_id from a memcached.
pub(super) fn gets(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let py = slf.py();
    let this = slf.get();
    let k = key_bytes(key, KeyErrorWording::MustBeBytes)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok((py.None(), py.None()));
    }
    if !this.flags()?.cas {
        return Err(PyValueError::new_err("gets without cas behavior"));
    }
    let f = detached(py, this, |core| Ok(core.get_multi(&[k], true)))?;
    gets_reply(slf, k, f)
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
        Some(Ok(Some(item))) => match this.decode_item(slf, f.bytes(&item), item.flags)? {
            Some(v) => Ok((v, item.cas.unwrap_or(0).into_py_any(py)?)),
            None => Ok((py.None(), py.None())),
        },
        Some(Ok(None)) | None => Ok((py.None(), py.None())),
        Some(Err(e)) => Err(errors::op_error(Op::Gets, Some(k), &e)),
    }
}

/// cas's token, converted first (pylibmc parses it with the `L` format).
pub(crate) fn cas_token(cas: &Bound<'_, PyAny>) -> PyResult<u64> {
    require_int(cas)?;
    Ok(cas.extract::<i64>()? as u64)
}

/// Attempt to compare-and-store a key by CAS ID.
pub(super) fn cas(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    val: &Bound<'_, PyAny>,
    token: u64,
    time: Option<&Bound<'_, PyAny>>,
) -> PyResult<bool> {
    store(slf, StoreCmd::Cas, val, cas_args(slf, key, token, time)?)
}

/// cas's arguments, checked in pylibmc's order: the key's type, then the cas behavior, before
/// the key is looked at.
pub(crate) fn cas_args<'k>(
    slf: &Bound<'_, PyClient>,
    key: &'k Bound<'_, PyAny>,
    token: u64,
    time: Option<&Bound<'_, PyAny>>,
) -> PyResult<StoreArgs<'k>> {
    key_bytes(key, KeyErrorWording::BytesLike)?;
    if !slf.get().flags()?.cas {
        return Err(PyValueError::new_err("cas without cas behavior"));
    }
    // No min_compress_len: cas never compresses.
    let args = StoreArgs::parse(key, time, None, -1, false)?;
    Ok(StoreArgs { cas: token, ..args })
}

/// Delete a key.
pub(super) fn delete(
    slf: &Bound<'_, PyClient>,
    key: Borrowed<'_, '_, PyAny>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let k = key_bytes(&key, KeyErrorWording::BytesLike)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok(false);
    }
    let r = detached(py, this, |core| Ok(core.delete_multi(&[k], noreply).pop()))?;
    delete_reply(this, k, r)
}

/// What `delete` returns for the core's outcome `r`.
pub(crate) fn delete_reply(
    this: &PyClient,
    k: &[u8],
    r: Option<Result<bool, CoreError>>,
) -> PyResult<bool> {
    match r {
        Some(Ok(d)) => Ok(d),
        Some(Err(CoreError::BadKey(_))) if this.flags()?.verify_keys => Ok(false),
        Some(Err(e)) => Err(errors::op_error(Op::Delete, Some(k), &e)),
        None => Ok(false),
    }
}

/// Change the expiry time of a key.
pub(super) fn touch(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let k = key_bytes(key, KeyErrorWording::BytesLike)?;
    check_key_len(k)?;
    let exptime = wrap_u32(Some(time))?;
    if k.is_empty() {
        return Ok(false);
    }
    let r = detached(py, this, |core| {
        Ok(core.touch_multi(&[k], exptime, noreply).pop())
    })?;
    touch_reply(k, r)
}

/// What `touch` returns for the core's outcome `r`.
pub(crate) fn touch_reply(k: &[u8], r: Option<Result<bool, CoreError>>) -> PyResult<bool> {
    match r {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(errors::op_error(Op::Touch, Some(k), &e)),
        None => Ok(false),
    }
}

/// incr and decr.
pub(super) fn arith(
    slf: &Bound<'_, PyClient>,
    incr: bool,
    key: &Bound<'_, PyAny>,
    delta: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let py = slf.py();
    let d = match delta {
        None => 1,
        Some(delta) => c_int_delta(delta)?,
    };
    let k = key_bytes(key, KeyErrorWording::BytesLike)?;
    check_key_len(k)?;
    if k.is_empty() {
        // As libmemcached counts it: one key failed, refused as a bad key.
        let bad = CoreError::BadKey(String::new());
        return Err(errors::keys_failed(1, false, errors::ArithRc::Failed(&bad)));
    }
    let r = detached(py, slf.get(), |core| {
        Ok(core.arith_multi(incr, &[k], d).pop())
    })?;
    arith_reply(r)
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

/// A delta as pylibmc parses it: a C int (OverflowError outside its range, either side) that
/// must not be negative.
pub(crate) fn c_int_delta(delta: &Bound<'_, PyAny>) -> PyResult<u64> {
    require_int(delta)?;
    let d: i64 = match delta.extract() {
        Ok(d) => d,
        Err(_) if delta.lt(0).unwrap_or(false) => i64::MIN,
        Err(_) => i64::MAX,
    };
    if d < i32::MIN as i64 {
        return Err(PyOverflowError::new_err(
            "signed integer is less than minimum",
        ));
    }
    if d < 0 {
        return Err(PyValueError::new_err("delta must be positive"));
    }
    if d > i32::MAX as i64 {
        return Err(PyOverflowError::new_err(
            "signed integer is greater than maximum",
        ));
    }
    Ok(d as u64)
}
