//! An asynchronous call's arguments converted by the very functions the blocking methods use
//! (`fetch::fetch_keys`, `lease::gat_args`, ...), so both clients refuse the same input the same
//! way, in the same order; then copied into an owned request for the dispatcher with the
//! `Finish` that will convert its outcome, or, when no I/O is needed (an empty key), the answer
//! itself. The single-key and multi-key methods prepare theirs in their own files
//! (`py::client::single`, `multi`); the others move there next. Attached only; no I/O.

use pyo3::prelude::*;

use crate::client::keys::Keys;
use crate::client::op::{
    get::Get,
    meta::{Meta, MetaVerb},
};
use crate::py::args::{check_key_len, key_obj, prefix_bytes, uint_mask, ArgPos, MaybeArg};
use crate::py::client::finish::{one, unbind, Prepared};
use crate::py::client::lease::{self, InvalidateFinish, LeaseGetFinish, LeaseReleaseFinish};
use crate::py::client::multi::fetch::{self, FetchFinish};
use crate::py::client::near::{self, CasMultiFinish, CheckFinish};
use crate::py::client::single::get::GetFinish;

fn get_and_touch(exptime: u32) -> Get {
    Get {
        cas: false,
        touch: Some(exptime),
    }
}

pub(super) fn gat(
    key: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    default: Option<Py<PyAny>>,
) -> PyResult<Prepared<GetFinish>> {
    let default = default.unwrap_or_else(|| key.py().None());
    let (k, exptime) = lease::gat_args(key, time)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(default));
    }
    let finish = GetFinish {
        key: k.to_vec(),
        default,
    };
    Ok(Prepared::keys(get_and_touch(exptime), one(k), finish))
}

pub(super) fn gat_multi(
    keys: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<Prepared<FetchFinish>> {
    let exptime = uint_mask(time)?;
    let (prefix, items) = fetch::fetch_items(keys, key_prefix, false)?;
    let (objs, full) = fetch::fetch_keys(&items, &prefix)?;
    let finish = FetchFinish {
        objs: unbind(&objs),
        prefix,
        with_cas: false,
    };
    Ok(Prepared::keys(
        get_and_touch(exptime),
        Keys::of(&full),
        finish,
    ))
}

fn meta(verb: MetaVerb, flags: String) -> Meta {
    Meta {
        verb,
        flags: flags.into_bytes().into(),
    }
}

pub(super) fn lease_get(
    key: &Bound<'_, PyAny>,
    lease_s: u32,
    recache: u32,
) -> PyResult<Prepared<LeaseGetFinish>> {
    let k = key_obj(key)?;
    check_key_len(k)?;
    let op = meta(MetaVerb::Get, lease::lease_flags(lease_s, recache));
    Ok(Prepared::keys(
        op,
        one(k),
        LeaseGetFinish { key: k.to_vec() },
    ))
}

pub(super) fn near_check(
    key: &Bound<'_, PyAny>,
    cas: u64,
    conditional: bool,
) -> PyResult<Prepared<CheckFinish>> {
    let k = key_obj(key)?;
    check_key_len(k)?;
    let op = meta(MetaVerb::Get, near::check_flags(cas, conditional));
    let finish = CheckFinish {
        key: k.to_vec(),
        cas,
    };
    Ok(Prepared::keys(op, one(k), finish))
}

pub(super) fn near_cas_multi(keys: &[Bound<'_, PyAny>]) -> PyResult<Prepared<CasMultiFinish>> {
    let full = near::batch_keys(keys)?;
    let refs: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
    let op = Meta {
        verb: MetaVerb::Get,
        flags: near::CAS_ONLY.into(),
    };
    Ok(Prepared::keys(op, Keys::of(&refs), CasMultiFinish))
}

pub(super) fn lease_release(
    key: &Bound<'_, PyAny>,
    cas: u64,
    stale: bool,
) -> PyResult<Prepared<LeaseReleaseFinish>> {
    let k = key_obj(key)?;
    check_key_len(k)?;
    let op = meta(MetaVerb::Delete, lease::release_flags(cas, stale));
    Ok(Prepared::keys(
        op,
        one(k),
        LeaseReleaseFinish { key: k.to_vec() },
    ))
}

pub(super) fn invalidate_multi(
    keys: &[Bound<'_, PyAny>],
    stale_time: u32,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<Prepared<InvalidateFinish>> {
    let prefix = prefix_bytes(key_prefix, ArgPos::of("invalidate_multi", 3))?;
    let (full, at) = lease::invalidate_keys(keys, &prefix)?;
    let wire = Keys::of(&full);
    let objs = at
        .iter()
        .filter_map(|&i| keys.get(i))
        .map(|o| o.clone().unbind())
        .collect();
    let op = Meta {
        verb: MetaVerb::Delete,
        flags: lease::invalidate_flags(stale_time).into_bytes().into(),
    };
    let finish = InvalidateFinish {
        keys: wire.clone(),
        objs,
        all: full.len() == keys.len(),
    };
    Ok(Prepared::keys(op, wire, finish))
}
