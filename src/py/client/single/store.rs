//! The single stores: set, add, replace, append, prepend and cas, through one `store` and its
//! `StoreArgs`; and the asynchronous half: the call prepared, its finish.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use std::sync::atomic::Ordering;

use crate::client::op::store::Store;
use crate::client::results::StoreStatus;
use crate::dispatch::request::Items;
use crate::error::Error as CoreError;
use crate::protocol::{StoreCmd, StoreItem};
use crate::py::args::{self, *};
use crate::py::client::finish::{Finish, Prepared};
use crate::py::client::state::PyClient;
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
pub(crate) fn store(
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
            |core| core.store_one(cmd, &item, true),
        )?
    } else {
        detached(py, this, |core| Ok(core.store_one(cmd, &item, false)))?
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

/// Attempt to compare-and-store a key by CAS ID. pylibmc's order (`s#OL|I`): the key's type,
/// the token, the time, then the cas behavior, before the key's length is looked at.
pub(crate) fn cas(
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

/// The asynchronous `store`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_store(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    val: &Bound<'_, PyAny>,
    args: StoreArgs<'_>,
) -> PyResult<Prepared<StoreFinish>> {
    let key = args.key;
    let Some((data, flags)) = store_value(slf, cmd, val, &args)? else {
        return Ok(Prepared::Ready(false.into_py_any(slf.py())?));
    };
    let mut items = Items::with_capacity(1, key.len(), data.len());
    items.push(&StoreItem {
        key,
        flags,
        exptime: args.exptime,
        data: &data,
        cas: args.cas,
    });
    let noreply = args.noreply;
    let finish = StoreFinish {
        cmd,
        key: key.to_vec(),
    };
    Ok(Prepared::items(Store { cmd, noreply }, items, finish))
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
