//! The multi-key methods: get_multi and gets_multi (`fetch`), delete_multi, incr_multi and
//! touch_multi, with pylibmc's rules for empty keys, str/bytes twins and failed keys;
//! set/add/replace_multi are `multi/store.rs` (`multi::store`). Arguments are converted with `py::args`, values with `codec`, the core is called
//! through `io::detached` and errors are built by `py::errors`. Uses `client::Fetched`, the core's
//! `Error` and `protocol`.

pub(crate) mod store;

use std::borrow::Cow;
use std::collections::HashMap;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyo3::IntoPyObjectExt;

use super::state::PyClient;
use crate::client::fetched::Fetched;
use crate::error::Error as CoreError;
use crate::protocol::{is_text_key, MAX_KEY_LEN};
use crate::py::args::*;
use crate::py::client::finish::{bound, Finish};
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
    let (prefix, items, stopped) = delete_multi_items(keys, key_prefix)?;
    let (full, all, stopped) = delete_multi_keys(&items, &prefix, stopped);
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let results = detached(py, this, |core| Ok(core.delete_multi(&refs, noreply)))?;
    delete_multi_reply(this, &refs, prefix.len(), results, all, stopped)
}

/// delete_multi's prefix, keys and the iterator's error.
pub(crate) type DeleteItems<'py> = (Vec<u8>, Vec<Bound<'py, PyAny>>, Option<PyErr>);

/// delete_multi's prefix and keys (`O|s#:delete_multi`, then no mappings), and the error of
/// the keys' iterator if it raised (pylibmc deletes the keys before it, then raises it).
pub(crate) fn delete_multi_items<'py>(
    keys: &Bound<'py, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<DeleteItems<'py>> {
    let prefix = prefix_bytes(key_prefix, ArgPos::of("delete_multi", 2))?;
    if keys.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(
            "keys must be a sequence, not a mapping",
        ));
    }
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
    Ok((prefix, items, stopped))
}

/// pylibmc deletes key by key: a key it cannot take ends the loop after the keys before it
/// were deleted. The keys to send (those before), whether every key counts (no empty one),
/// and the error to raise after sending them.
pub(crate) fn delete_multi_keys<'a>(
    items: &'a [Bound<'_, PyAny>],
    prefix: &[u8],
    mut stopped: Option<PyErr>,
) -> (Vec<Cow<'a, [u8]>>, bool, Option<PyErr>) {
    let mut all = true;
    let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
    for obj in items {
        match delete_key(obj, prefix) {
            Ok(Some(fk)) => full.push(fk),
            Ok(None) => all = false,
            Err(e) => {
                stopped = Some(e);
                break;
            }
        }
    }
    (full, all, stopped)
}

/// What delete_multi returns for the core's outcomes (`refs`: the keys sent, with the prefix).
pub(crate) fn delete_multi_reply(
    this: &PyClient,
    refs: &[&[u8]],
    prefix_len: usize,
    results: Vec<crate::error::Result<bool>>,
    mut all: bool,
    stopped: Option<PyErr>,
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
    let (prefix, delta, items) = incr_multi_items(keys, key_prefix, delta)?;
    let full = incr_multi_keys(&items, &prefix)?;
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let by_length = refused_by_length(&full);
    let results = detached(py, this, |core| {
        Ok(core.arith_multi(true, &refs, delta as u64, None))
    })?;
    report_arith(results, &by_length, this.flags()?.verify_keys)
}

/// incr_multi's prefix, delta and keys (`O|s#I`: the prefix and the delta, then the keys'
/// length: a sequence).
pub(crate) fn incr_multi_items<'py>(
    keys: &Bound<'py, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    delta: MaybeArg<'_, '_>,
) -> PyResult<(Vec<u8>, u32, Vec<Bound<'py, PyAny>>)> {
    let prefix = prefix_bytes(key_prefix, ArgPos::nth(2))?;
    let delta = delta.map_or(1, uint_mask)?;
    Ok((prefix, delta, sized_items(keys)?))
}

/// incr_multi's keys with the prefix, every one checked before anything is sent.
pub(crate) fn incr_multi_keys<'a>(
    items: &'a [Bound<'_, PyAny>],
    prefix: &[u8],
) -> PyResult<Vec<Cow<'a, [u8]>>> {
    let mut full = Vec::with_capacity(items.len());
    for obj in items {
        let k = key_obj(obj)?;
        // pylibmc's ValueError for a key over 250 bytes (the prefix not counted), for the whole
        // batch before anything is sent: increments cannot be taken back.
        check_key_len(k)?;
        full.push(join_key(prefix, k));
    }
    Ok(full)
}

/// Per incr_multi key (prefix included), whether libmemcached's length check refuses it, as it
/// does in pylibmc: empty, or over 250 bytes. Any other refusal is fastmc's own.
pub(crate) fn refused_by_length(full: &[Cow<'_, [u8]>]) -> Vec<bool> {
    full.iter()
        .map(|k| k.is_empty() || k.len() > MAX_KEY_LEN)
        .collect()
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
    let (exptime, prefix, items) = touch_multi_items(keys, time, key_prefix)?;
    let keys = multi_keys(&items, &prefix, true)?;
    let refs = keys.refs();
    let results = detached(py, this, |core| {
        Ok(core.touch_multi(&refs, exptime, noreply))
    })?;
    touch_multi_reply(py, &keys.empty, &keys.objs, results)
}

/// touch_multi's time, prefix and keys, converted as set_multi converts its arguments: the time
/// (`I`), the prefix (`s#`), then the keys.
pub(crate) fn touch_multi_items<'py>(
    keys: &Bound<'py, PyAny>,
    time: MaybeArg<'_, '_>,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<(u32, Vec<u8>, Vec<Bound<'py, PyAny>>)> {
    let exptime = time.map_or(0, uint_mask)?;
    let prefix = prefix_bytes(key_prefix, ArgPos::nth(3))?;
    Ok((exptime, prefix, sized_items(keys)?))
}

/// What touch_multi returns for the core's outcomes (`empty`: keys never sent).
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

/// incr_multi's report, after every key was tried: misses and failures counted together, of
/// the class pylibmc gives (`_PylibMC_IncrDecr`): `NotFound` when every failure was a miss; with
/// one failure the class of the last key's outcome (the base `Error` when it was incremented);
/// with more, the base `Error`. A key fastmc refuses where pylibmc would have sent it (a byte
/// that corrupts the text protocol, a namespace that makes it too long: not `by_length`, and
/// without `verify_keys`, under which pylibmc refuses such bytes too) makes it `BadKeyProvided`.
pub(crate) fn report_arith(
    results: Vec<crate::error::Result<Option<u64>>>,
    by_length: &[bool],
    verify_keys: bool,
) -> PyResult<()> {
    let (mut misses, mut failed) = (0usize, 0usize);
    let mut last = errors::ArithRc::Succeeded;
    let own = results
        .iter()
        .zip(by_length)
        .find(|(r, &len)| !verify_keys && !len && matches!(r, Err(CoreError::BadKey(_))));
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
    if let Some((Err(e), _)) = own {
        last = errors::ArithRc::Failed(e);
    }
    Err(errors::keys_failed(misses + failed, failed == 0, last))
}

/// get_multi and gets_multi, and gat_multi (`touch`: the new expiry of the keys found).
pub(super) fn fetch(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    with_cas: bool,
    touch: Option<u32>,
) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let this = slf.get();
    let (prefix, items) = fetch_items(keys, key_prefix, with_cas)?;
    let (objs, full) = fetch_keys(&items, &prefix)?;
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let fetched = detached(py, this, |core| {
        Ok(match touch {
            Some(t) => core.gat_multi(&refs, t),
            None => core.get_multi(&refs, with_cas),
        })
    })?;
    fetch_reply(slf, &objs, &full, fetched, with_cas)
}

/// get_multi's prefix and keys (`O|s#:get_multi`, then the keys' length: a sequence).
pub(crate) fn fetch_items<'py>(
    keys: &Bound<'py, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
    with_cas: bool,
) -> PyResult<(Vec<u8>, Vec<Bound<'py, PyAny>>)> {
    let func = if with_cas { "gets_multi" } else { "get_multi" };
    let prefix = prefix_bytes(key_prefix, ArgPos::of(func, 2))?;
    Ok((prefix, sized_items(keys)?))
}

/// get_multi's keys: the objects and their keys with the prefix (str and bytes twins merged).
#[allow(clippy::type_complexity)]
pub(crate) fn fetch_keys<'a, 'py>(
    items: &'a [Bound<'py, PyAny>],
    prefix: &[u8],
) -> PyResult<(Vec<&'a Bound<'py, PyAny>>, Vec<Cow<'a, [u8]>>)> {
    let MultiKeys { objs, full, .. } = multi_keys(items, prefix, false)?;
    if full.iter().any(|k| k.len() > MAX_KEY_LEN) {
        return Err(errors::bad_key(Op::Mget, errors::BAD_KEY_DETAIL));
    }
    Ok(merge_twins(objs, full))
}

/// What get_multi/gets_multi return for the core's outcome, under the callers' key objects.
pub(crate) fn fetch_reply(
    slf: &Bound<'_, PyClient>,
    objs: &[&Bound<'_, PyAny>],
    full: &[Cow<'_, [u8]>],
    mut fetched: Fetched,
    with_cas: bool,
) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let this = slf.get();
    let results = std::mem::take(&mut fetched.items);
    let flags = this.flags()?;
    let raise_on_error = flags.get_multi_raise_on_error;
    // With verify_keys libmemcached refuses the whole batch for one bad key, before any value
    // is decoded (so before a value that cannot be decoded raises). A key that is fine itself
    // and too long only with the namespace is a miss, never sent, as without verify_keys
    // (pylibmc sends it and returns nothing for the whole call: docs/migration.md).
    if flags.verify_keys {
        let own_fault = results.iter().zip(full).find_map(|(r, k)| match r {
            Err(CoreError::BadKey(m)) if !is_text_key(k, true) => Some(m),
            _ => None,
        });
        if let Some(m) = own_fault {
            return Err(errors::bad_key(Op::Mget, m));
        }
    }
    let out = PyDict::new(py);
    let mut first_err: Option<CoreError> = None;
    let mut any_ok = false;
    for ((obj, key), r) in objs.iter().zip(full).zip(results) {
        match r {
            Ok(Some(item)) => {
                any_ok = true;
                if let Some(v) = this.decode_item(slf, key, fetched.bytes(&item), item.flags)? {
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

// -- the asynchronous halves: each method's outcome into its value, as above ---------------------

/// `get_multi`, `gets_multi` and `gat_multi`: `{key: value}` (or `(value, cas)`).
pub(crate) struct FetchFinish {
    pub objs: Vec<Py<PyAny>>,
    /// The key prefix: a value is decoded for its full key (signed values are bound to it).
    pub prefix: Vec<u8>,
    pub with_cas: bool,
}

impl Finish for FetchFinish {
    type Op = crate::client::op::get::Get;
    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Py<PyAny>> {
        let objs = bound(slf.py(), self.objs);
        let refs: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
        let full = objs
            .iter()
            .map(|o| Ok(join_key(&self.prefix, key_obj(o)?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(fetch_reply(slf, &refs, &full, f, self.with_cas)?.into_any())
    }
}

/// `delete_multi`: whether every key was there.
pub(crate) struct DeleteMultiFinish {
    pub keys: crate::client::keys::Keys,
    pub prefix_len: usize,
    pub all: bool,
    /// The error pylibmc raises after deleting the keys before it.
    pub stopped: Option<PyErr>,
}

impl Finish for DeleteMultiFinish {
    type Op = crate::client::op::delete::Delete;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<bool>>,
    ) -> PyResult<Py<PyAny>> {
        let refs = self.keys.refs();
        let all = delete_multi_reply(slf.get(), &refs, self.prefix_len, v, self.all, self.stopped)?;
        all.into_py_any(slf.py())
    }
}

/// `incr_multi`: None, or the error.
pub(crate) struct IncrMultiFinish {
    /// Per key, whether pylibmc refuses it too (`refused_by_length`).
    pub by_length: Vec<bool>,
}

impl Finish for IncrMultiFinish {
    type Op = crate::client::op::arith::Arith;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<Option<u64>>>,
    ) -> PyResult<Py<PyAny>> {
        report_arith(v, &self.by_length, slf.get().flags()?.verify_keys)?;
        Ok(slf.py().None())
    }
}

/// `touch_multi`: the keys not touched.
pub(crate) struct TouchMultiFinish {
    pub empty: Vec<Py<PyAny>>,
    pub objs: Vec<Py<PyAny>>,
}

impl Finish for TouchMultiFinish {
    type Op = crate::client::op::touch::Touch;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<bool>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (empty, objs) = (bound(py, self.empty), bound(py, self.objs));
        let e: Vec<&Bound<'_, PyAny>> = empty.iter().collect();
        let o: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
        Ok(touch_multi_reply(py, &e, &o, v)?.into_any())
    }
}
