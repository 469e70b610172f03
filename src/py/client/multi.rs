//! The multi-key methods: get_multi and gets_multi (`fetch`), set/add/replace_multi (`store` and
//! its `StoreMultiArgs`), delete_multi, incr_multi and touch_multi, with pylibmc's rules for empty
//! keys, str/bytes twins and failed keys. Arguments are converted with `py::args`, values with
//! `codec`, the core is called through `io::detached` and errors are built by `py::errors`. Uses
//! `client::{StoreItem, StoreStatus}`, the core's `Error` and `protocol`.

use std::borrow::Cow;
use std::collections::HashMap;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use super::PyClient;
use crate::client::{Fetched, StoreItem, StoreStatus};
use crate::error::Error as CoreError;
use crate::protocol::{StoreCmd, MAX_KEY_LEN};
use crate::py::args::*;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// Delete multiple keys at once; True only if every key was deleted.
pub(super) fn delete_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    if keys.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(
            "keys must be a sequence, not a mapping",
        ));
    }
    let prefix = prefix_bytes(key_prefix)?;
    let mut items = Vec::new();
    for k in keys.try_iter()? {
        items.push(k?);
    }
    let mut all = true;
    let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
    for obj in &items {
        let k = key_bytes(obj, KeyErrorWording::BytesLike)?;
        let fk = join_key(&prefix, k);
        check_key_len(&fk)?;
        if fk.is_empty() {
            all = false;
            continue;
        }
        full.push(fk);
    }
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let results = detached(py, this, |core| Ok(core.delete_multi(&refs, noreply)))?;
    delete_multi_reply(this, &refs, prefix.len(), results, all)
}

/// What `delete_multi` returns for the core's outcomes; `all` is false when a key was skipped.
pub(crate) fn delete_multi_reply(
    this: &PyClient,
    refs: &[&[u8]],
    prefix_len: usize,
    results: Vec<crate::error::Result<bool>>,
    mut all: bool,
) -> PyResult<bool> {
    let verify = this.flags()?.verify_keys;
    let mut first_err = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(true) => {}
            Ok(false) => all = false,
            Err(CoreError::BadKey(_)) if verify => all = false,
            Err(e) => {
                all = false;
                first_err.get_or_insert((i, e));
            }
        }
    }
    if let Some((i, e)) = first_err {
        return Err(errors::op_error(
            Op::Delete,
            refs.get(i).map(|k| k.get(prefix_len..).unwrap_or_default()),
            &e,
        ));
    }
    Ok(all)
}

/// Increment multiple keys by a delta (converted first, as pylibmc does); returns None.
pub(super) fn incr_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    delta: u32,
) -> PyResult<()> {
    let py = slf.py();
    let this = slf.get();
    let items = sized_items(keys, "keys must be a sequence, not a mapping")?;
    let prefix = prefix_bytes(key_prefix)?;
    let mut full = Vec::with_capacity(items.len());
    for obj in &items {
        let k = key_bytes(obj, KeyErrorWording::MustBeBytes)?;
        // pylibmc's ValueError for a key over 250 bytes (the prefix not counted), for the whole
        // batch before anything is sent: increments cannot be taken back.
        check_key_len(k)?;
        full.push(join_key(&prefix, k));
    }
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let results = detached(py, this, |core| {
        Ok(core.arith_multi(true, &refs, delta as u64))
    })?;
    report_arith(results)
}

/// fastmc extension: touch multiple keys (the time converted first); returns the keys that were
/// not found.
pub(super) fn touch_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    exptime: u32,
    key_prefix: Option<&Bound<'_, PyAny>>,
    noreply: bool,
) -> PyResult<Py<PyList>> {
    let py = slf.py();
    let this = slf.get();
    let prefix = prefix_bytes(key_prefix)?;
    let items = sized_items(keys, "keys must be a sequence, not a mapping")?;
    let keys = multi_keys(&items, &prefix, true)?;
    let refs = keys.refs();
    let results = detached(py, this, |core| {
        Ok(core.touch_multi(&refs, exptime, noreply))
    })?;
    touch_multi_reply(py, &keys.empty, &keys.objs, results)
}

/// What `touch_multi` returns for the core's outcomes (`empty`: keys never sent).
pub(crate) fn touch_multi_reply(
    py: Python<'_>,
    empty: &[&Bound<'_, PyAny>],
    objs: &[&Bound<'_, PyAny>],
    results: Vec<crate::error::Result<bool>>,
) -> PyResult<Py<PyList>> {
    let failed = PyList::empty(py);
    for e in empty {
        failed.append(e)?;
    }
    let mut first_err = None;
    for (obj, r) in objs.iter().zip(results) {
        match r {
            Ok(true) => {}
            Ok(false) => failed.append(obj)?,
            Err(e) => {
                failed.append(obj)?;
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        let err = errors::op_error(Op::TouchMulti, None, &e);
        return Err(errors::with_failed_keys(py, err, &failed));
    }
    Ok(failed.unbind())
}

/// incr_multi's report, after every key was tried: misses and hard errors counted together,
/// of the class pylibmc gives. pylibmc increments key by key and picks the class from the last
/// key's outcome: its own class when it failed, the base `Error` when it was incremented
/// (unless every failure was a miss: `NotFound`). From the second `CLIENT_ERROR` on (a value
/// that is not a number), libmemcached reports a generic error for every failure after it.
pub(crate) fn report_arith(results: Vec<crate::error::Result<Option<u64>>>) -> PyResult<()> {
    let (mut misses, mut failed, mut client_errors) = (0usize, 0usize, 0usize);
    let mut last = errors::ArithRc::Succeeded;
    for r in &results {
        last = match r {
            Ok(Some(_)) => errors::ArithRc::Succeeded,
            Ok(None) => {
                misses += 1;
                if client_errors >= 2 {
                    errors::ArithRc::Generic
                } else {
                    errors::ArithRc::NotFound
                }
            }
            Err(e) => {
                failed += 1;
                if matches!(e, CoreError::ClientError(_)) {
                    client_errors += 1;
                }
                if client_errors >= 2 {
                    errors::ArithRc::Generic
                } else {
                    errors::ArithRc::Failed(e)
                }
            }
        };
    }
    if misses == 0 && failed == 0 {
        return Ok(());
    }
    Err(errors::keys_failed(misses + failed, failed == 0, last))
}

/// get_multi and gets_multi, and gat_multi (`touch`: the new expiry of the keys found).
pub(super) fn fetch(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    with_cas: bool,
    touch: Option<u32>,
) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let this = slf.get();
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
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let fetched = detached(py, this, |core| {
        Ok(match touch {
            Some(t) => core.gat_multi(&refs, t),
            None => core.get_multi(&refs, with_cas),
        })
    })?;
    fetch_reply(slf, &objs, fetched, with_cas)
}

/// What `get_multi`/`gets_multi` return for the core's outcome, under the callers' key objects.
pub(crate) fn fetch_reply(
    slf: &Bound<'_, PyClient>,
    objs: &[&Bound<'_, PyAny>],
    mut fetched: Fetched,
    with_cas: bool,
) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let this = slf.get();
    let results = std::mem::take(&mut fetched.items);
    let flags = this.flags()?;
    let (raise_on_error, verify_keys) = (flags.get_multi_raise_on_error, flags.verify_keys);
    let out = PyDict::new(py);
    let mut first_err: Option<CoreError> = None;
    let mut any_ok = false;
    for (obj, r) in objs.iter().zip(results) {
        match r {
            Ok(Some(item)) => {
                any_ok = true;
                if let Some(v) = this.decode_item(slf, fetched.bytes(&item), item.flags)? {
                    if with_cas {
                        out.set_item(obj, (v, item.cas.unwrap_or(0)))?;
                    } else {
                        out.set_item(obj, v)?;
                    }
                }
            }
            Ok(None) => any_ok = true,
            // A key that cannot exist (never sent) is a miss, as pylibmc treats "" and as
            // the key it would have sent finds nothing; with verify_keys pylibmc raises.
            Err(CoreError::BadKey(m)) if verify_keys => return Err(errors::bad_key(Op::Mget, &m)),
            Err(CoreError::BadKey(_)) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        // pylibmc leaves a failed server's keys out unless every server failed.
        if raise_on_error || !any_ok {
            let op = if with_cas { Op::GetsMulti } else { Op::Mget };
            return Err(errors::op_error(op, None, &e));
        }
    }
    Ok(out.unbind())
}

/// A str and a bytes spelling of one key give one entry, under the str form.
pub(crate) fn merge_twins<'a, 'py>(
    objs: Vec<&'a Bound<'py, PyAny>>,
    full: Vec<Cow<'a, [u8]>>,
) -> (Vec<&'a Bound<'py, PyAny>>, Vec<Cow<'a, [u8]>>) {
    let has_str = objs.iter().any(|o| o.is_instance_of::<PyString>());
    let has_bytes = objs.iter().any(|o| o.is_instance_of::<PyBytes>());
    if !(has_str && has_bytes) {
        return (objs, full);
    }
    let mut seen: HashMap<Cow<'_, [u8]>, usize> = HashMap::new();
    let mut o2 = Vec::with_capacity(objs.len());
    let mut f2 = Vec::with_capacity(full.len());
    for (o, f) in objs.into_iter().zip(full) {
        match seen.get(&f) {
            Some(&i) => {
                if o.is_instance_of::<PyString>() {
                    o2[i] = o;
                }
            }
            None => {
                seen.insert(f.clone(), o2.len());
                o2.push(o);
                f2.push(f);
            }
        }
    }
    (o2, f2)
}

/// A multi store's arguments, converted once in pylibmc's order: the mapping, time, key_prefix,
/// min_compress_len, compress_level.
pub(crate) struct StoreMultiArgs<'a, 'py> {
    pub mapping: &'a Bound<'py, PyDict>,
    pub exptime: u32,
    pub prefix: Vec<u8>,
    pub min_compress_len: u32,
    pub level: i32,
    pub noreply: bool,
}

impl<'a, 'py> StoreMultiArgs<'a, 'py> {
    pub(crate) fn parse(
        keys: &'a Bound<'py, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<Self> {
        let mapping = keys.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!("argument 1 must be dict, not {}", type_name(keys)))
        })?;
        Ok(StoreMultiArgs {
            mapping,
            exptime: wrap_u32(time)?,
            prefix: prefix_bytes(key_prefix)?,
            min_compress_len: wrap_u32(min_compress_len)?,
            level: check_compress_level(compress_level)?,
            noreply,
        })
    }
}

/// set_multi, add_multi and replace_multi: returns the keys that were not stored.
pub(super) fn store(
    slf: &Bound<'_, PyClient>,
    cmd: StoreCmd,
    args: StoreMultiArgs<'_, '_>,
) -> PyResult<Py<PyList>> {
    let py = slf.py();
    let this = slf.get();
    let failed = PyList::empty(py);
    // Serialize everything first: a failure here stores nothing.
    // Keep the pairs alive so that keys and bytes/str values are borrowed, not copied.
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = args.mapping.iter().collect();
    let mut objs = Vec::with_capacity(pairs.len());
    let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(pairs.len());
    let mut values: Vec<(Cow<'_, [u8]>, u32)> = Vec::with_capacity(pairs.len());
    for (k, v) in &pairs {
        let kb = key_bytes(k, KeyErrorWording::MustBeBytes)?;
        let fk = join_key(&args.prefix, kb);
        check_key_len(&fk)?;
        let enc = this.encode_value(slf, v, args.min_compress_len, args.level)?;
        if fk.is_empty() {
            failed.append(k)?;
            continue;
        }
        full.push(fk);
        values.push(enc);
        objs.push(k);
    }
    let items: Vec<StoreItem<'_>> = full
        .iter()
        .zip(&values)
        .map(|(k, (data, flags))| StoreItem {
            key: k,
            flags: *flags,
            exptime: args.exptime,
            data,
            cas: 0,
        })
        .collect();
    let results = detached(py, this, |core| {
        Ok(core.store_multi(cmd, &items, args.noreply))
    })?;
    let keys: Vec<&Bound<'_, PyAny>> = pairs.iter().map(|(k, _)| k).collect();
    store_multi_reply(py, this, cmd, &keys, &objs, results, failed)
}

/// What set/add/replace_multi return for the core's outcomes: `failed` holds the keys never
/// sent; `keys` are all the mapping's keys (for pylibmc's choice of str forms).
pub(crate) fn store_multi_reply(
    py: Python<'_>,
    this: &PyClient,
    cmd: StoreCmd,
    keys: &[&Bound<'_, PyAny>],
    objs: &[&Bound<'_, PyAny>],
    results: Vec<crate::error::Result<StoreStatus>>,
    failed: Bound<'_, PyList>,
) -> PyResult<Py<PyList>> {
    let verify = this.flags()?.verify_keys;
    let mut first_err = None;
    for (obj, r) in objs.iter().zip(results) {
        match r {
            Ok(StoreStatus::Stored) => {}
            Ok(_) => failed.append(obj)?,
            Err(CoreError::BadKey(_)) if verify => failed.append(obj)?,
            Err(e) => {
                failed.append(obj)?;
                first_err.get_or_insert(e);
            }
        }
    }
    prefer_str_forms(keys, &failed)?;
    if let Some(e) = first_err {
        let err = errors::op_error(Op::store_multi(cmd), None, &e);
        return Err(errors::with_failed_keys(py, err, &failed));
    }
    Ok(failed.unbind())
}

/// When a key is given both as str and as bytes, pylibmc reports the str form.
fn prefer_str_forms(keys: &[&Bound<'_, PyAny>], failed: &Bound<'_, PyList>) -> PyResult<()> {
    if failed.is_empty()
        || !keys.iter().any(|k| k.is_instance_of::<PyString>())
        || !keys.iter().any(|k| k.is_instance_of::<PyBytes>())
    {
        return Ok(());
    }
    let mut str_form = HashMap::new();
    for &k in keys {
        if k.is_instance_of::<PyString>() {
            str_form.insert(key_bytes(k, KeyErrorWording::MustBeBytes)?.to_vec(), k);
        }
    }
    for i in 0..failed.len() {
        let k = failed.get_item(i)?;
        if let Some(&s) = str_form.get(key_bytes(&k, KeyErrorWording::MustBeBytes)?) {
            failed.set_item(i, s)?;
        }
    }
    Ok(())
}
