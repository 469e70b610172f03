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
use crate::client::{StoreItem, StoreStatus};
use crate::error::Error as CoreError;
use crate::protocol::{StoreCmd, MAX_KEY_LEN};
use crate::py::args::{self, *};
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// Delete multiple keys at once; True only if every key was deleted.
pub(super) fn delete_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    // `O|s#:delete_multi`, then no mappings.
    let prefix = prefix_bytes(key_prefix, ArgPos::of("delete_multi", 2))?;
    if keys.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(
            "keys must be a sequence, not a mapping",
        ));
    }
    // pylibmc deletes key by key: a key it cannot take (or an error of the iterator) ends the
    // loop after the keys before it were deleted. Those go in one batch, then the error.
    let mut stopped = None;
    let mut items = Vec::new();
    for k in keys.try_iter()? {
        match k {
            Ok(k) => items.push(k),
            Err(e) => {
                stopped = Some(e);
                break;
            }
        }
    }
    let mut all = true;
    let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
    for obj in &items {
        match delete_key(obj, &prefix) {
            Ok(Some(fk)) => full.push(fk),
            Ok(None) => all = false,
            Err(e) => {
                stopped = Some(e);
                break;
            }
        }
    }
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let results = detached(py, this, |core| Ok(core.delete_multi(&refs, noreply)))?;
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
            Some(&refs[i][prefix.len()..]),
            &e,
        ));
    }
    match stopped {
        Some(e) => Err(e),
        None => Ok(all),
    }
}

/// One key of delete_multi as pylibmc's loop checks it: its type, its length, its length with
/// the prefix. None for an empty key (not sent; it counts as not deleted).
fn delete_key<'a>(obj: &'a Bound<'_, PyAny>, prefix: &[u8]) -> PyResult<Option<Cow<'a, [u8]>>> {
    let k = key_obj(obj)?;
    check_key_len(k)?;
    let fk = join_key(prefix, k);
    check_key_len(&fk)?;
    Ok(Some(fk).filter(|k| !k.is_empty()))
}

/// Increment multiple keys by a delta; returns None.
pub(super) fn incr_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    delta: MaybeArg<'_, '_>,
) -> PyResult<()> {
    let py = slf.py();
    let this = slf.get();
    // `O|s#I`: the prefix and the delta, then the keys' length (a sequence) and each key.
    let prefix = prefix_bytes(key_prefix, ArgPos::nth(2))?;
    let delta = delta.map_or(1, uint_mask)?;
    let items = sized_items(keys)?;
    let mut full = Vec::with_capacity(items.len());
    for obj in &items {
        let k = key_obj(obj)?;
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

/// fastmc extension: touch multiple keys; returns the keys that were not found.
pub(super) fn touch_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    time: MaybeArg<'_, '_>,
    key_prefix: MaybeArg<'_, '_>,
    noreply: bool,
) -> PyResult<Py<PyList>> {
    let py = slf.py();
    let this = slf.get();
    // As set_multi converts its arguments: the time (`I`), the prefix (`s#`), then the keys.
    let exptime = time.map_or(0, uint_mask)?;
    let prefix = prefix_bytes(key_prefix, ArgPos::nth(3))?;
    let items = sized_items(keys)?;
    let keys = multi_keys(&items, &prefix, true)?;
    let refs = keys.refs();
    let results = detached(py, this, |core| {
        Ok(core.touch_multi(&refs, exptime, noreply))
    })?;
    let failed = PyList::empty(py);
    for e in keys.empty {
        failed.append(e)?;
    }
    let mut first_err = None;
    for (obj, r) in keys.objs.iter().zip(results) {
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

/// incr_multi's report, after every key was tried: misses and failures counted together, of
/// the class pylibmc gives (`_PylibMC_IncrDecr`): `NotFound` when every failure was a miss; with
/// one failure the class of the last key's outcome (the base `Error` when it was incremented);
/// with more, the base `Error`.
fn report_arith(results: Vec<crate::error::Result<Option<u64>>>) -> PyResult<()> {
    let (mut misses, mut failed) = (0usize, 0usize);
    let mut last = errors::ArithRc::Succeeded;
    for r in &results {
        last = match r {
            Ok(Some(_)) => errors::ArithRc::Succeeded,
            Ok(None) => {
                misses += 1;
                errors::ArithRc::NotFound
            }
            Err(e) => {
                failed += 1;
                errors::ArithRc::Failed(e)
            }
        };
    }
    if misses == 0 && failed == 0 {
        return Ok(());
    }
    if failed > 1 {
        last = errors::ArithRc::Generic;
    }
    Err(errors::keys_failed(misses + failed, failed == 0, last))
}

/// get_multi and gets_multi.
pub(super) fn fetch(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    with_cas: bool,
) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let this = slf.get();
    // `O|s#:get_multi`, then the keys' length (a sequence), then the keys.
    let func = if with_cas { "gets_multi" } else { "get_multi" };
    let prefix = prefix_bytes(key_prefix, ArgPos::of(func, 2))?;
    let items = sized_items(keys)?;
    let MultiKeys { objs, full, .. } = multi_keys(&items, &prefix, false)?;
    if full.iter().any(|k| k.len() > MAX_KEY_LEN) {
        return Err(errors::bad_key(Op::Mget, errors::BAD_KEY_DETAIL));
    }
    let (objs, full) = merge_twins(objs, full);
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let mut fetched = detached(py, this, |core| Ok(core.get_multi(&refs, with_cas)))?;
    let results = std::mem::take(&mut fetched.items);
    let flags = this.flags()?;
    let raise_on_error = flags.get_multi_raise_on_error;
    // With verify_keys libmemcached refuses the whole batch for one bad key, before any value
    // is decoded (so before a value that cannot be decoded raises).
    if flags.verify_keys {
        if let Some(Err(CoreError::BadKey(m))) = results
            .iter()
            .find(|r| matches!(r, Err(CoreError::BadKey(_))))
        {
            return Err(errors::bad_key(Op::Mget, m));
        }
    }
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
            // the key it would have sent finds nothing (with verify_keys: raised above).
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
fn merge_twins<'a, 'py>(
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

/// A multi store's arguments, converted once in pylibmc's order (`O!|Is#Ii`: the mapping, time,
/// key_prefix, min_compress_len, compress_level; then compress_level's range).
pub(super) struct StoreMultiArgs<'a, 'py> {
    mapping: &'a Bound<'py, PyDict>,
    exptime: u32,
    prefix: Vec<u8>,
    min_compress_len: u32,
    level: i32,
    noreply: bool,
}

impl<'a, 'py> StoreMultiArgs<'a, 'py> {
    pub(super) fn parse(
        keys: &'a Bound<'py, PyAny>,
        time: MaybeArg<'_, '_>,
        key_prefix: MaybeArg<'_, '_>,
        min_compress_len: MaybeArg<'_, '_>,
        compress_level: MaybeArg<'_, '_>,
        noreply: bool,
    ) -> PyResult<Self> {
        let mapping = keys
            .cast::<PyDict>()
            .map_err(|_| ArgPos::nth(1).must_be("dict", keys))?;
        Ok(StoreMultiArgs {
            mapping,
            exptime: time.map_or(0, uint_mask)?,
            prefix: prefix_bytes(key_prefix, ArgPos::nth(3))?,
            min_compress_len: min_compress_len.map_or(0, uint_mask)?,
            level: args::compress_level(compress_level)?,
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
    // Serialize everything first: a failure here stores nothing.
    // Keep the pairs alive so that keys and bytes/str values are borrowed, not copied.
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = args.mapping.iter().collect();
    // Which pairs failed (reported in the mapping's order, as pylibmc does), and which were sent.
    let mut failed_at = vec![false; pairs.len()];
    let mut sent = Vec::with_capacity(pairs.len());
    let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(pairs.len());
    let mut values: Vec<(Cow<'_, [u8]>, u32)> = Vec::with_capacity(pairs.len());
    encode_str_keys(pairs.iter().map(|(k, _)| k))?;
    for (i, (k, v)) in pairs.iter().enumerate() {
        // pylibmc checks the key, the prefix, then both, for each key.
        let kb = key_obj(k)?;
        check_key_len(kb)?;
        check_key_len(&args.prefix)?;
        let fk = join_key(&args.prefix, kb);
        check_key_len(&fk)?;
        let enc = this.encode_value(slf, v, args.min_compress_len, args.level)?;
        if fk.is_empty() {
            failed_at[i] = true;
            continue;
        }
        full.push(fk);
        values.push(enc);
        sent.push(i);
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
    let verify = this.flags()?.verify_keys;
    let mut first_err = None;
    for (&i, r) in sent.iter().zip(results) {
        match r {
            Ok(StoreStatus::Stored) => {}
            Ok(_) => failed_at[i] = true,
            Err(CoreError::BadKey(_)) if verify => failed_at[i] = true,
            Err(e) => {
                failed_at[i] = true;
                first_err.get_or_insert(e);
            }
        }
    }
    let failed = PyList::new(
        py,
        pairs
            .iter()
            .zip(&failed_at)
            .filter(|(_, &f)| f)
            .map(|((k, _), _)| k),
    )?;
    prefer_str_forms(&pairs, &failed)?;
    if let Some(e) = first_err {
        let err = errors::op_error(Op::store_multi(cmd), None, &e);
        return Err(errors::with_failed_keys(py, err, &failed));
    }
    Ok(failed.unbind())
}

/// When a key is given both as str and as bytes, pylibmc reports the str form.
fn prefer_str_forms(
    pairs: &[(Bound<'_, PyAny>, Bound<'_, PyAny>)],
    failed: &Bound<'_, PyList>,
) -> PyResult<()> {
    if failed.is_empty()
        || !pairs.iter().any(|(k, _)| k.is_instance_of::<PyString>())
        || !pairs.iter().any(|(k, _)| k.is_instance_of::<PyBytes>())
    {
        return Ok(());
    }
    let mut str_form = HashMap::new();
    for (k, _) in pairs {
        if k.is_instance_of::<PyString>() {
            str_form.insert(key_obj(k)?.to_vec(), k);
        }
    }
    for i in 0..failed.len() {
        let k = failed.get_item(i)?;
        if let Some(&s) = str_form.get(key_obj(&k)?) {
            failed.set_item(i, s)?;
        }
    }
    Ok(())
}
