//! The single-key methods: get, gets, the stores (set, add, replace, append, prepend, cas, through
//! one `store` and its `StoreArgs`), delete, touch, incr and decr. Arguments are converted with
//! `py::args`, values with `codec`, the core is called through `io::detached` and errors are built
//! by `py::errors`. Uses `client::{StoreItem, StoreStatus}` and the core's `Error`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::types::{PyBool, PyInt};
use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use super::state::PyClient;
use crate::client::fetched::Fetched;
use crate::client::op::arith::Create;
use crate::client::results::StoreStatus;
use crate::error::Error as CoreError;
use crate::protocol::StoreCmd;
use crate::protocol::StoreItem;
use crate::py::args::{self, *};
use crate::py::client::finish::Finish;
use crate::py::errors::{self, Op};
use crate::py::io::{detached, noreply_write};

/// A single store's arguments, converted once in pylibmc's order (`s#O|IIi`: key, time,
/// min_compress_len, compress_level; then compress_level's range, then the key's length). The
/// value is encoded later, by `store`.
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
        time: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
    ) -> PyResult<Self> {
        let key = str_or_bytes(key, ArgPos::nth(1))?;
        let exptime = time.map_or(0, uint_mask)?;
        let min_compress_len = min_compress_len.map_or(0, uint_mask)?;
        let level = args::compress_level(compress_level)?;
        check_key_len(key)?;
        Ok(StoreArgs {
            key,
            exptime,
            min_compress_len,
            level,
            cas: 0,
            noreply,
        })
    }
}

/// The smallest number with 20 decimal digits.
const MIN_20_DIGITS: u64 = 10_000_000_000_000_000_000;

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
    let (data, flags) = match store_value(slf, cmd, val, &args)? {
        Some(v) => v,
        None => return Ok(false),
    };
    let item = StoreItem {
        key,
        flags,
        exptime: args.exptime,
        data: &data,
        cas: args.cas,
    };
    let noreply = args.noreply || this.flags()?.noreply;
    let r = if noreply {
        noreply_write(
            py,
            this,
            |core| core.store_now(cmd, &item),
            |core| core.store_multi(cmd, &[item], true).pop(),
        )?
    } else {
        detached(py, this, |core| {
            Ok(core.store_multi(cmd, &[item], false).pop())
        })?
    };
    store_reply(this, cmd, key, r)
}

/// A store's value encoded, after the checks made before anything is sent; `None` when the
/// store answers False without I/O (an empty key).
pub(crate) fn store_value<'v>(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    val: &'v Bound<'_, PyAny>,
    args: &StoreArgs<'_>,
) -> PyResult<Option<(std::borrow::Cow<'v, [u8]>, u32)>> {
    let this = slf.get();
    let key = args.key;
    let encoded = this.encode_value(slf, key, val, args.min_compress_len, args.level)?;
    if key.is_empty() {
        if cmd == StoreCmd::Cas {
            return Err(errors::bad_key(Op::Store(cmd), errors::BAD_KEY_DETAIL));
        }
        return Ok(None);
    }
    // libmemcached formats a text command's numbers into 20 characters: a token of 20 digits
    // (one that is negative as pylibmc's signed `L`) fails before anything is sent.
    if cmd == StoreCmd::Cas && args.cas >= MIN_20_DIGITS && !this.binary.load(Ordering::Relaxed) {
        return Err(errors::allocation_failure(Op::Store(cmd), key));
    }
    Ok(Some(encoded))
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
pub(super) fn gets(
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

/// Attempt to compare-and-store a key by CAS ID. pylibmc's order (`s#OL|I`): the key's type,
/// the token, the time, then the cas behavior, before the key's length is looked at.
pub(super) fn cas(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    val: &Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    time: MaybeArg<'_, '_>,
) -> PyResult<bool> {
    store(slf, StoreCmd::Cas, val, cas_args(slf, key, token, time)?)
}

/// cas's arguments, converted in pylibmc's order.
pub(crate) fn cas_args<'k>(
    slf: &Bound<'_, PyClient>,
    key: &'k Bound<'_, PyAny>,
    token: &Bound<'_, PyAny>,
    time: MaybeArg<'_, '_>,
) -> PyResult<StoreArgs<'k>> {
    let k = str_or_bytes(key, ArgPos::nth(1))?;
    let token = long_long(token)? as u64;
    let exptime = time.map_or(0, uint_mask)?;
    if !slf.get().flags()?.cas {
        return Err(PyValueError::new_err("cas without cas behavior"));
    }
    check_key_len(k)?;
    // No min_compress_len: cas never compresses.
    Ok(StoreArgs {
        key: k,
        exptime,
        min_compress_len: 0,
        level: -1,
        cas: token,
        noreply: false,
    })
}

/// Delete a key.
pub(super) fn delete(
    slf: &Bound<'_, PyClient>,
    key: Borrowed<'_, '_, PyAny>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let k = delete_key(&key)?;
    if k.is_empty() {
        return Ok(false);
    }
    let r = if noreply || this.flags()?.noreply {
        noreply_write(
            py,
            this,
            |core| core.delete_now(k),
            |core| core.delete_one(k, true),
        )?
    } else {
        detached(py, this, |core| Ok(core.delete_one(k, false)))?
    };
    delete_reply(this, k, r)
}

/// delete's key, converted and checked.
pub(crate) fn delete_key<'k>(key: &'k Bound<'_, PyAny>) -> PyResult<&'k [u8]> {
    let k = str_or_bytes(key, ArgPos::of("delete", 1))?;
    check_key_len(k)?;
    Ok(k)
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
    let (k, exptime) = touch_args(key, time)?;
    if k.is_empty() {
        return Ok(false);
    }
    let r = detached(py, this, |core| {
        Ok(core.touch_multi(&[k], exptime, noreply).pop())
    })?;
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

/// incr and decr (creating a missing counter with `initial=`).
pub(super) fn arith(
    slf: &Bound<'_, PyClient>,
    incr: bool,
    key: &Bound<'_, PyAny>,
    delta: MaybeArg<'_, '_>,
    initial: Option<&Bound<'_, PyAny>>,
    time: MaybeArg<'_, '_>,
) -> PyResult<u64> {
    let py = slf.py();
    let (k, d) = arith_args(key, delta)?;
    let create = arith_create(initial, time)?;
    let r = detached(py, slf.get(), |core| {
        Ok(core.arith_multi(incr, &[k], d, create).pop())
    })?;
    arith_reply(r)
}

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

// -- the asynchronous halves: each method's outcome into its value, as above ---------------------

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

/// The storage commands and `cas`: whether it was stored.
pub(crate) struct StoreFinish {
    pub cmd: StoreCmd,
    pub key: Vec<u8>,
}

impl Finish for StoreFinish {
    type Op = crate::client::op::store::Store;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<StoreStatus, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        store_reply(slf.get(), self.cmd, &self.key, v.pop())?.into_py_any(slf.py())
    }
}

/// `delete`: whether the key was there.
pub(crate) struct DeleteFinish {
    pub key: Vec<u8>,
}

impl Finish for DeleteFinish {
    type Op = crate::client::op::delete::Delete;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<bool, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        delete_reply(slf.get(), &self.key, v.pop())?.into_py_any(slf.py())
    }
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

/// `incr` and `decr`: the new value.
pub(crate) struct ArithFinish;

impl Finish for ArithFinish {
    type Op = crate::client::op::arith::Arith;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<Option<u64>, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        arith_reply(v.pop())?.into_py_any(slf.py())
    }
}
