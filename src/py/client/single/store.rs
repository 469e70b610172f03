//! The single stores: set, add, replace, append, prepend and cas, through one `store` and its
//! `StoreArgs`; and the asynchronous half: the call prepared, its finish.

use pyo3::exceptions::PyValueError;
use std::ops::Deref;

use pyo3::prelude::*;
use std::borrow::Cow;
use std::sync::atomic::Ordering;

use crate::client::op::store::Store;
use crate::client::results::StoreStatus;
use crate::error::Error as CoreError;
use crate::protocol::{StoreCmd, StoreItem};
use crate::py::args::{self, *};
use crate::py::client::method::{Finish, Kept, Method, Parsed};
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

/// set, add, replace, append, prepend (`set(key, val, time=0, min_compress_len=0,
/// compress_level=-1, *, noreply=False)`) and cas (`cas(key, val, cas, time=0)`): whether the
/// value was stored.
pub(crate) struct StoreKey<'a, K> {
    cmd: StoreCmd,
    key: K,
    /// The value as sent (left with the request when the call is kept for later).
    data: Cow<'a, [u8]>,
    flags: u32,
    exptime: u32,
    cas: u64,
    noreply: bool,
}

impl<'a> StoreKey<'a, &'a [u8]> {
    /// One of the five storage commands.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn parse(
        slf: &Bound<'_, PyClient>,
        cmd: StoreCmd,
        key: &'a Bound<'_, PyAny>,
        val: &'a Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
    ) -> PyResult<Parsed<Self>> {
        let args = StoreArgs::parse(key, time, min_compress_len, compress_level, noreply)?;
        Self::of(slf, cmd, val, args)
    }

    /// `cas`.
    pub(crate) fn parse_cas(
        slf: &Bound<'_, PyClient>,
        key: &'a Bound<'_, PyAny>,
        val: &'a Bound<'_, PyAny>,
        token: &Bound<'_, PyAny>,
        time: MaybeArg<'_, '_>,
    ) -> PyResult<Parsed<Self>> {
        let args = cas_args(slf, key, token, time)?;
        Self::of(slf, StoreCmd::Cas, val, args)
    }

    #[inline(always)]
    fn of(
        slf: &Bound<'_, PyClient>,
        cmd: StoreCmd,
        val: &'a Bound<'_, PyAny>,
        args: StoreArgs<'a>,
    ) -> PyResult<Parsed<Self>> {
        let Some((data, flags)) = store_value(slf, cmd, val, &args)? else {
            return Ok(Parsed::Ready(false));
        };
        Ok(Parsed::Call(StoreKey {
            cmd,
            key: args.key,
            data,
            flags,
            exptime: args.exptime,
            cas: args.cas,
            noreply: args.noreply,
        }))
    }

    fn item(&self) -> StoreItem<'_> {
        StoreItem {
            key: self.key,
            flags: self.flags,
            exptime: self.exptime,
            data: &self.data,
            cas: self.cas,
        }
    }
}

impl<K: Deref<Target = [u8]>> Finish for StoreKey<'_, K> {
    type Op = Store;
    type Value = bool;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<StoreStatus, CoreError>>,
    ) -> PyResult<bool> {
        store_reply(slf.get(), self.cmd, &self.key, v.pop())
    }
}

impl<'a> Method for StoreKey<'a, &'a [u8]> {
    type Later = StoreKey<'static, Kept>;

    type Wire<'w>
        = [StoreItem<'w>; 1]
    where
        Self: 'w;

    fn op(&self) -> Store {
        Store {
            cmd: self.cmd,
            noreply: self.noreply,
        }
    }

    fn wire(&self) -> [StoreItem<'_>; 1] {
        [self.item()]
    }

    fn later(self) -> StoreKey<'static, Kept> {
        StoreKey {
            cmd: self.cmd,
            key: Kept::from_slice(self.key),
            data: Cow::Borrowed(&[]),
            flags: self.flags,
            exptime: self.exptime,
            cas: self.cas,
            noreply: self.noreply,
        }
    }

    /// One item's own call: a `noreply` write sent at once when it can be
    /// (`io::noreply_write`), else `Client::store_one`.
    #[inline(always)]
    fn call(self, slf: &Bound<'_, PyClient>) -> PyResult<bool> {
        let (py, this, cmd) = (slf.py(), slf.get(), self.cmd);
        let item = self.item();
        let noreply = self.noreply || this.flags()?.noreply;
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
        store_reply(this, cmd, self.key, r)
    }
}
