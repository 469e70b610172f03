//! An asynchronous call's arguments converted, in pylibmc's order and with its exceptions, into
//! an owned request for the dispatcher and the `Finish` that will convert its outcome; or, when
//! no I/O is needed (an empty key), the answer itself. Uses the blocking methods' argument
//! helpers (`py::args`, `StoreArgs`, `StoreMultiArgs`) so both clients refuse the same input
//! the same way. Attached only; no I/O.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::IntoPyObjectExt;

use super::finish::Finish;
use crate::client::StoreItem;
use crate::dispatch::request::{Items, Keys, Request};
use crate::error::Error as CoreError;
use crate::protocol::{StoreCmd, MAX_KEY_LEN};
use crate::py::args::*;
use crate::py::client::multi::{merge_twins, StoreMultiArgs};
use crate::py::client::single::{c_int_delta, StoreArgs};
use crate::py::client::PyClient;
use crate::py::errors::{self, Op};

pub(super) enum Prepared {
    /// Answered without I/O.
    Ready(Py<PyAny>),
    Submit(Request, Finish),
}

fn one(k: &[u8]) -> Keys {
    let mut keys = Keys::with_capacity(1);
    keys.push(k);
    keys
}

fn unbind(objs: &[&Bound<'_, PyAny>]) -> Vec<Py<PyAny>> {
    objs.iter().map(|o| (*o).clone().unbind()).collect()
}

pub(super) fn get(key: &Bound<'_, PyAny>, default: Option<Py<PyAny>>) -> PyResult<Prepared> {
    let default = default.unwrap_or_else(|| key.py().None());
    let k = key_bytes(key, KeyErrorWording::MustBeBytes)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(default));
    }
    Ok(Prepared::Submit(
        Request::Get {
            keys: one(k),
            cas: false,
        },
        Finish::Get {
            key: k.to_vec(),
            default,
        },
    ))
}

pub(super) fn gets(slf: &Bound<'_, PyClient>, key: &Bound<'_, PyAny>) -> PyResult<Prepared> {
    let py = slf.py();
    let k = key_bytes(key, KeyErrorWording::MustBeBytes)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(
            PyTuple::new(py, [py.None(), py.None()])?
                .into_any()
                .unbind(),
        ));
    }
    if !slf.get().flags()?.cas {
        return Err(PyValueError::new_err("gets without cas behavior"));
    }
    Ok(Prepared::Submit(
        Request::Get {
            keys: one(k),
            cas: true,
        },
        Finish::Gets { key: k.to_vec() },
    ))
}

pub(super) fn store(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    val: &Bound<'_, PyAny>,
    args: StoreArgs<'_>,
) -> PyResult<Prepared> {
    let py = slf.py();
    let key = args.key;
    let (data, flags) = slf
        .get()
        .encode_value(slf, val, args.min_compress_len, args.level)?;
    if key.is_empty() {
        if cmd == StoreCmd::Cas {
            return Err(errors::bad_key(Op::Store(StoreCmd::Cas), "key is empty"));
        }
        return Ok(Prepared::Ready(false.into_py_any(py)?));
    }
    let mut items = Items::with_capacity(1, data.len());
    items.push(&StoreItem {
        key,
        flags,
        exptime: args.exptime,
        data: &data,
        cas: args.cas,
    });
    Ok(Prepared::Submit(
        Request::Store {
            cmd,
            items,
            noreply: args.noreply,
        },
        Finish::Store {
            cmd,
            key: key.to_vec(),
        },
    ))
}

pub(super) fn delete(key: &Bound<'_, PyAny>, noreply: bool) -> PyResult<Prepared> {
    let k = key_bytes(key, KeyErrorWording::BytesLike)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(false.into_py_any(key.py())?));
    }
    Ok(Prepared::Submit(
        Request::Delete {
            keys: one(k),
            noreply,
        },
        Finish::Delete { key: k.to_vec() },
    ))
}

pub(super) fn touch(
    key: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    noreply: bool,
) -> PyResult<Prepared> {
    let k = key_bytes(key, KeyErrorWording::BytesLike)?;
    check_key_len(k)?;
    let exptime = wrap_u32(Some(time))?;
    if k.is_empty() {
        return Ok(Prepared::Ready(false.into_py_any(key.py())?));
    }
    Ok(Prepared::Submit(
        Request::Touch {
            keys: one(k),
            exptime,
            noreply,
        },
        Finish::Touch { key: k.to_vec() },
    ))
}

pub(super) fn arith(
    incr: bool,
    key: &Bound<'_, PyAny>,
    delta: Option<&Bound<'_, PyAny>>,
) -> PyResult<Prepared> {
    let d = match delta {
        None => 1,
        Some(delta) => c_int_delta(delta)?,
    };
    let k = key_bytes(key, KeyErrorWording::BytesLike)?;
    check_key_len(k)?;
    if k.is_empty() {
        let bad = CoreError::BadKey(String::new());
        return Err(errors::keys_failed(1, false, errors::ArithRc::Failed(&bad)));
    }
    Ok(Prepared::Submit(
        Request::Arith {
            incr,
            keys: one(k),
            delta: d,
        },
        Finish::Arith,
    ))
}

pub(super) fn fetch(
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    with_cas: bool,
) -> PyResult<Prepared> {
    let items = sized_items(keys, "dict is not a sequence")?;
    let prefix = prefix_bytes(key_prefix)?;
    let MultiKeys { objs, full, .. } = multi_keys(&items, &prefix, false)?;
    if full.iter().any(|k| k.len() > MAX_KEY_LEN) {
        return Err(errors::bad_key(
            Op::Mget,
            "A BAD KEY WAS PROVIDED/CHARACTERS OUT OF RANGE",
        ));
    }
    let (objs, full) = merge_twins(objs, full);
    let mut wire = Keys::with_capacity(full.len());
    for k in &full {
        wire.push(k);
    }
    Ok(Prepared::Submit(
        Request::Get {
            keys: wire,
            cas: with_cas,
        },
        Finish::Fetch {
            objs: unbind(&objs),
            with_cas,
        },
    ))
}

pub(super) fn store_multi(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    args: StoreMultiArgs<'_, '_>,
) -> PyResult<Prepared> {
    let this = slf.get();
    // Serialize everything first: a failure here stores nothing.
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = args.mapping.iter().collect();
    let mut items = Items::with_capacity(pairs.len(), 0);
    let mut objs = Vec::with_capacity(pairs.len());
    let mut failed = Vec::new();
    for (k, v) in &pairs {
        let kb = key_bytes(k, KeyErrorWording::MustBeBytes)?;
        let fk = join_key(&args.prefix, kb);
        check_key_len(&fk)?;
        let (data, flags) = this.encode_value(slf, v, args.min_compress_len, args.level)?;
        if fk.is_empty() {
            failed.push(k.clone().unbind());
            continue;
        }
        items.push(&StoreItem {
            key: &fk,
            flags,
            exptime: args.exptime,
            data: &data,
            cas: 0,
        });
        objs.push(k.clone().unbind());
    }
    Ok(Prepared::Submit(
        Request::Store {
            cmd,
            items,
            noreply: args.noreply,
        },
        Finish::StoreMulti {
            cmd,
            keys: pairs.iter().map(|(k, _)| k.clone().unbind()).collect(),
            objs,
            failed,
        },
    ))
}

pub(super) fn delete_multi(
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    noreply: bool,
) -> PyResult<Prepared> {
    if keys.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(
            "keys must be a sequence, not a mapping",
        ));
    }
    let prefix = prefix_bytes(key_prefix)?;
    let mut all = true;
    let mut wire = Keys::default();
    for obj in keys.try_iter()? {
        let obj = obj?;
        let k = key_bytes(&obj, KeyErrorWording::BytesLike)?;
        let fk = join_key(&prefix, k);
        check_key_len(&fk)?;
        if fk.is_empty() {
            all = false;
            continue;
        }
        wire.push(&fk);
    }
    Ok(Prepared::Submit(
        Request::Delete {
            keys: wire.clone(),
            noreply,
        },
        Finish::DeleteMulti {
            keys: wire,
            prefix_len: prefix.len(),
            all,
        },
    ))
}

pub(super) fn incr_multi(
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    delta: u32,
) -> PyResult<Prepared> {
    let items = sized_items(keys, "keys must be a sequence, not a mapping")?;
    let prefix = prefix_bytes(key_prefix)?;
    let mut wire = Keys::with_capacity(items.len());
    for obj in &items {
        let k = key_bytes(obj, KeyErrorWording::MustBeBytes)?;
        // The whole batch is checked before anything is sent: increments cannot be undone.
        check_key_len(k)?;
        wire.push(&join_key(&prefix, k));
    }
    Ok(Prepared::Submit(
        Request::Arith {
            incr: true,
            keys: wire,
            delta: delta as u64,
        },
        Finish::IncrMulti,
    ))
}

pub(super) fn touch_multi(
    keys: &Bound<'_, PyAny>,
    exptime: u32,
    key_prefix: Option<&Bound<'_, PyAny>>,
    noreply: bool,
) -> PyResult<Prepared> {
    let prefix = prefix_bytes(key_prefix)?;
    let items = sized_items(keys, "keys must be a sequence, not a mapping")?;
    let keys = multi_keys(&items, &prefix, true)?;
    let mut wire = Keys::with_capacity(keys.full.len());
    for k in &keys.full {
        wire.push(k);
    }
    Ok(Prepared::Submit(
        Request::Touch {
            keys: wire,
            exptime,
            noreply,
        },
        Finish::TouchMulti {
            empty: unbind(&keys.empty),
            objs: unbind(&keys.objs),
        },
    ))
}
