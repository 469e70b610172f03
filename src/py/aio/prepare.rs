//! An asynchronous call's arguments converted by the very functions the blocking methods use
//! (`single::get_key`, `StoreArgs::parse`, `multi::fetch_keys`, ...), so both clients refuse the
//! same input the same way, in the same order; then copied into an owned request for the
//! dispatcher with the `Finish` that will convert its outcome, or, when no I/O is needed (an
//! empty key), the answer itself. Attached only; no I/O.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::IntoPyObjectExt;

use crate::client::keys::Keys;
use crate::client::op::{
    arith::Arith,
    delete::Delete,
    get::Get,
    meta::{Meta, MetaVerb},
    store::Store,
    touch::Touch,
};
use crate::dispatch::request::Items;
use crate::protocol::StoreCmd;
use crate::protocol::StoreItem;
use crate::py::args::{
    check_key_len, key_obj, multi_keys, prefix_bytes, uint_mask, ArgPos, MaybeArg,
};
use crate::py::client::finish::{one, unbind, Prepared};
use crate::py::client::lease::{self, InvalidateFinish, LeaseGetFinish, LeaseReleaseFinish};
use crate::py::client::multi::store::{StoreMultiArgs, StoreMultiFinish};
use crate::py::client::multi::{
    self, DeleteMultiFinish, FetchFinish, IncrMultiFinish, TouchMultiFinish,
};
use crate::py::client::near::{self, CasMultiFinish, CheckFinish};
use crate::py::client::single::{
    self, ArithFinish, DeleteFinish, GetFinish, GetsFinish, StoreArgs, StoreFinish, TouchFinish,
};
use crate::py::client::state::PyClient;

const GET: Get = Get {
    cas: false,
    touch: None,
};
const GETS: Get = Get {
    cas: true,
    touch: None,
};

fn get_and_touch(exptime: u32) -> Get {
    Get {
        cas: false,
        touch: Some(exptime),
    }
}

pub(super) fn get(
    key: &Bound<'_, PyAny>,
    default: Option<Py<PyAny>>,
) -> PyResult<Prepared<GetFinish>> {
    let default = default.unwrap_or_else(|| key.py().None());
    let k = single::get_key(key)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(default));
    }
    let finish = GetFinish {
        key: k.to_vec(),
        default,
    };
    Ok(Prepared::keys(GET, one(k), finish))
}

pub(super) fn gets(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
) -> PyResult<Prepared<GetsFinish>> {
    let py = slf.py();
    let Some(k) = single::gets_key(slf, key)? else {
        let none = PyTuple::new(py, [py.None(), py.None()])?;
        return Ok(Prepared::Ready(none.into_any().unbind()));
    };
    Ok(Prepared::keys(GETS, one(k), GetsFinish { key: k.to_vec() }))
}

pub(super) fn store(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    val: &Bound<'_, PyAny>,
    args: StoreArgs<'_>,
) -> PyResult<Prepared<StoreFinish>> {
    let key = args.key;
    let Some((data, flags)) = single::store_value(slf, cmd, val, &args)? else {
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

pub(super) fn delete(key: &Bound<'_, PyAny>, noreply: bool) -> PyResult<Prepared<DeleteFinish>> {
    let k = single::delete_key(key)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(false.into_py_any(key.py())?));
    }
    let finish = DeleteFinish { key: k.to_vec() };
    Ok(Prepared::keys(Delete { noreply }, one(k), finish))
}

pub(super) fn touch(
    key: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    noreply: bool,
) -> PyResult<Prepared<TouchFinish>> {
    let (k, exptime) = single::touch_args(key, time)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(false.into_py_any(key.py())?));
    }
    let finish = TouchFinish { key: k.to_vec() };
    Ok(Prepared::keys(Touch { exptime, noreply }, one(k), finish))
}

pub(super) fn arith(
    incr: bool,
    key: &Bound<'_, PyAny>,
    delta: MaybeArg<'_, '_>,
    initial: Option<&Bound<'_, PyAny>>,
    time: MaybeArg<'_, '_>,
) -> PyResult<Prepared<ArithFinish>> {
    let (k, delta) = single::arith_args(key, delta)?;
    let create = single::arith_create(initial, time)?;
    let op = Arith {
        incr,
        delta,
        create,
    };
    Ok(Prepared::keys(op, one(k), ArithFinish))
}

pub(super) fn fetch(
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    with_cas: bool,
) -> PyResult<Prepared<FetchFinish>> {
    let (prefix, items) = multi::fetch_items(keys, key_prefix, with_cas)?;
    let (objs, full) = multi::fetch_keys(&items, &prefix)?;
    let op = Get {
        cas: with_cas,
        touch: None,
    };
    let finish = FetchFinish {
        objs: unbind(&objs),
        prefix,
        with_cas,
    };
    Ok(Prepared::keys(op, Keys::of(&full), finish))
}

pub(super) fn store_multi(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    args: StoreMultiArgs<'_, '_>,
) -> PyResult<Prepared<StoreMultiFinish>> {
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = args.mapping.iter().collect();
    let conv = multi::store::store_multi_keys(slf, &args, &pairs)?;
    let items = conv.requests.with_items(|its| {
        let key_bytes = its.iter().map(|it| it.key.len()).sum();
        let bytes = its.iter().map(|it| it.data.len()).sum();
        let mut items = Items::with_capacity(its.len(), key_bytes, bytes);
        for it in its {
            items.push(it);
        }
        items
    });
    let noreply = args.noreply;
    let finish = StoreMultiFinish {
        cmd,
        keys: pairs.iter().map(|(k, _)| k.clone().unbind()).collect(),
        sent: conv.sent,
        failed_at: conv.failed_at,
    };
    Ok(Prepared::items(Store { cmd, noreply }, items, finish))
}

pub(super) fn delete_multi(
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    noreply: bool,
) -> PyResult<Prepared<DeleteMultiFinish>> {
    let (prefix, items, stopped) = multi::delete_multi_items(keys, key_prefix)?;
    let (full, all, stopped) = multi::delete_multi_keys(&items, &prefix, stopped);
    let wire = Keys::of(&full);
    let finish = DeleteMultiFinish {
        keys: wire.clone(),
        prefix_len: prefix.len(),
        all,
        stopped,
    };
    Ok(Prepared::keys(Delete { noreply }, wire, finish))
}

pub(super) fn incr_multi(
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    delta: MaybeArg<'_, '_>,
) -> PyResult<Prepared<IncrMultiFinish>> {
    let (prefix, delta, items) = multi::incr_multi_items(keys, key_prefix, delta)?;
    let full = multi::incr_multi_keys(&items, &prefix)?;
    let by_length = multi::refused_by_length(&full);
    let op = Arith {
        incr: true,
        delta: u64::from(delta),
        create: None,
    };
    Ok(Prepared::keys(
        op,
        Keys::of(&full),
        IncrMultiFinish { by_length },
    ))
}

pub(super) fn touch_multi(
    keys: &Bound<'_, PyAny>,
    time: MaybeArg<'_, '_>,
    key_prefix: MaybeArg<'_, '_>,
    noreply: bool,
) -> PyResult<Prepared<TouchMultiFinish>> {
    let (exptime, prefix, items) = multi::touch_multi_items(keys, time, key_prefix)?;
    let keys = multi_keys(&items, &prefix, true)?;
    let finish = TouchMultiFinish {
        empty: unbind(&keys.empty),
        objs: unbind(&keys.objs),
    };
    let op = Touch { exptime, noreply };
    Ok(Prepared::keys(op, Keys::of(&keys.full), finish))
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
    let (prefix, items) = multi::fetch_items(keys, key_prefix, false)?;
    let (objs, full) = multi::fetch_keys(&items, &prefix)?;
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
