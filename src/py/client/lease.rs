//! The native pieces of stampede protection: a lease read (`mg` with `N` and `R`),
//! a lease release, `invalidate`/`invalidate_multi` (`md` with `I`) and `gat`. The policy that
//! waits, computes and stores (`get_or_set`) is the Python `Client`'s: it calls a Python
//! callable and sleeps, and stores through `set`, so its values are `set`'s. Keys are converted
//! with `py::args`, values decoded with `codec`, the core is called through `io::detached` and
//! errors are built by `py::errors`. Uses `client::MetaOutcome` and the core's `Error`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;

use super::multi;
use super::state::PyClient;
use crate::client::keys::Keys;
use crate::client::op::get::Get;
use crate::client::op::meta::Meta;
use crate::client::op::meta::MetaVerb;
use crate::client::results::MetaOutcome;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::finish::{one, unbind, Finish, Prepared};
use crate::py::client::multi::fetch::FetchFinish;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// What a lease read found, for `get_or_set` (`python/fastmc/client.py`).
const HIT: &str = "hit";
const WIN: &str = "win";
const WIN_STALE: &str = "win_stale";
const WIN_EARLY: &str = "win_early";
const STALE: &str = "stale";
const WAIT: &str = "wait";
const UNSUPPORTED: &str = "unsupported";

/// `(state, value, cas)` of a lease read.
pub(crate) type LeaseRead = (&'static str, Py<PyAny>, u64);

/// `mg <key> v f c N<lease> [R<recache>]`: the value and who recomputes it. A miss creates an
/// empty placeholder living `lease` seconds and hands its win flag (`W`) to exactly one
/// caller; the others see `Z`. A stale value (`X`, after `invalidate`) goes to everyone, the
/// first reader also getting `W`. With `recache`, the first reader that finds less than that
/// many seconds left gets `W` with the (still valid) value.
pub(crate) fn lease_get(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    lease: u32,
    recache: u32,
) -> PyResult<LeaseRead> {
    let py = slf.py();
    let this = slf.get();
    let k = key_obj(key)?;
    check_key_len(k)?;
    let flags = lease_flags(lease, recache);
    let r = detached(py, this, |core| {
        Ok(core
            .meta_command(MetaVerb::Get, &[k], flags.as_bytes())
            .pop())
    })?;
    lease_reply(slf, k, r)
}

/// The flags of a lease read.
pub(crate) fn lease_flags(lease: u32, recache: u32) -> String {
    let mut flags = format!("v f c N{}", lease.max(1));
    if recache > 0 {
        flags.push_str(&format!(" R{recache}"));
    }
    flags
}

/// What a lease read returns for the core's outcome `r`: `(state, value, cas)`.
pub(crate) fn lease_reply(
    slf: &Bound<'_, PyClient>,
    k: &[u8],
    r: Option<Result<MetaOutcome, CoreError>>,
) -> PyResult<LeaseRead> {
    let py = slf.py();
    let this = slf.get();
    let out = match r {
        Some(Ok(out)) => out,
        Some(Err(CoreError::NotSupported(_))) => return Ok((UNSUPPORTED, py.None(), 0)),
        Some(Err(e)) => return Err(errors::op_error(Op::Get, Some(k), &e)),
        None => return Err(errors::no_result()),
    };
    let cas = out.number(b'c').unwrap_or(0);
    let placeholder = is_placeholder(&out);
    let won = out.flag(b'W').is_some();
    let stale = out.flag(b'X').is_some();
    // Another caller holds the lease (a placeholder is marked so from its first read on).
    let taken = out.flag(b'Z').is_some();
    let state = match (won, stale, taken && placeholder) {
        (true, true, _) => WIN_STALE,
        (true, false, _) if placeholder => WIN,
        (true, false, _) => WIN_EARLY,
        (false, true, _) => STALE,
        (false, false, true) => WAIT,
        (false, false, false) => HIT,
    };
    let value = match &out.data {
        Some(data) if state != WIN && state != WAIT => {
            let f = out.number(b'f').unwrap_or(0) as u32;
            this.decode_item(slf, k, data, f)?
                .unwrap_or_else(|| py.None())
        }
        _ => py.None(),
    };
    Ok((state, value, cas))
}

/// An item with no bytes and no client flags: the placeholder a lease created. An empty
/// `bytes` value stored by `set` reads the same, but only with `Z` (an early recompute of it
/// running) is it taken for a placeholder to wait on.
fn is_placeholder(out: &MetaOutcome) -> bool {
    out.code == *b"EN"
        || (out.data.as_ref().map_or(true, |d| d.is_empty()) && out.number(b'f').unwrap_or(0) == 0)
}

/// Give a lease back after a failed recompute, if the item is still what the lease read
/// found (its CAS): a placeholder is deleted (the next reader wins a new lease), a stale value
/// is invalidated again (the next reader wins, the others keep the stale value). True if it
/// was given back.
pub(crate) fn lease_release(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    cas: u64,
    stale: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let k = key_obj(key)?;
    check_key_len(k)?;
    let flags = release_flags(cas, stale);
    let r = detached(py, this, |core| {
        Ok(core
            .meta_command(MetaVerb::Delete, &[k], flags.as_bytes())
            .pop())
    })?;
    release_reply(k, r)
}

/// The flags of a lease release.
pub(crate) fn release_flags(cas: u64, stale: bool) -> String {
    if stale {
        format!("C{cas} I")
    } else {
        format!("C{cas}")
    }
}

/// What a lease release returns for the core's outcome `r`.
pub(crate) fn release_reply(k: &[u8], r: Option<Result<MetaOutcome, CoreError>>) -> PyResult<bool> {
    match r {
        Some(Ok(out)) => Ok(out.code == *b"HD"),
        Some(Err(CoreError::NotSupported(_))) => Ok(false),
        Some(Err(e)) => Err(errors::op_error(Op::Delete, Some(k), &e)),
        None => Err(errors::no_result()),
    }
}

/// `invalidate`: one key, no prefix.
pub(super) fn invalidate(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    stale_time: u32,
) -> PyResult<bool> {
    invalidate_multi(
        slf,
        std::slice::from_ref(key),
        MaybeArg::Missing,
        stale_time,
    )
}

/// `invalidate_multi` as the table passes it: any sized iterable of keys.
pub(super) fn invalidate_iterable(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    stale_time: u32,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<bool> {
    invalidate_multi(slf, &sized_items(keys)?, key_prefix, stale_time)
}

/// Mark keys stale (`md <key> I [T<stale_time>]`) instead of deleting them: readers through
/// `get_or_set` keep getting the value while one of them recomputes it (plain `get` keeps
/// getting it too). A server without the meta protocol deletes them instead. True only if
/// every key was found.
pub(super) fn invalidate_multi(
    slf: &Bound<'_, PyClient>,
    keys: &[Bound<'_, PyAny>],
    key_prefix: MaybeArg<'_, '_>,
    stale_time: u32,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let prefix = prefix_bytes(key_prefix, ArgPos::of("invalidate_multi", 3))?;
    let (full, _) = invalidate_keys(keys, &prefix)?;
    let mut all = full.len() == keys.len();
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let flags = invalidate_flags(stale_time);
    let results = detached(py, this, |core| {
        let mut out = core.meta_command(MetaVerb::Delete, &refs, flags.as_bytes());
        // Without the meta protocol there is no stale value: delete.
        let plain: Vec<usize> = (0..out.len())
            .filter(|&i| matches!(out[i], Err(CoreError::NotSupported(_))))
            .collect();
        if !plain.is_empty() {
            let keys: Vec<&[u8]> = plain.iter().map(|&i| refs[i]).collect();
            for (i, r) in plain.into_iter().zip(core.delete_multi(&keys, false)) {
                out[i] = r.map(|deleted| MetaOutcome {
                    code: if deleted { *b"HD" } else { *b"NF" },
                    flags: Vec::new(),
                    data: None,
                });
            }
        }
        Ok(out)
    })?;
    for (k, r) in refs.iter().zip(results) {
        match r {
            Ok(out) => all &= out.code == *b"HD",
            Err(e) => return Err(errors::op_error(Op::Delete, Some(k), &e)),
        }
    }
    Ok(all)
}

/// Keys with their prefix, and their positions among the keys given.
pub(crate) type KeptKeys<'a> = (Vec<std::borrow::Cow<'a, [u8]>>, Vec<usize>);

/// invalidate_multi's keys with the prefix, checked, empty ones left out; and the positions of
/// those kept.
pub(crate) fn invalidate_keys<'a>(
    keys: &'a [Bound<'_, PyAny>],
    prefix: &[u8],
) -> PyResult<KeptKeys<'a>> {
    let mut full = Vec::with_capacity(keys.len());
    let mut at = Vec::with_capacity(keys.len());
    for (i, obj) in keys.iter().enumerate() {
        let k = key_obj(obj)?;
        let fk = join_key(prefix, k);
        check_key_len(&fk)?;
        if !fk.is_empty() {
            full.push(fk);
            at.push(i);
        }
    }
    Ok((full, at))
}

/// The flags of an invalidation.
pub(crate) fn invalidate_flags(stale_time: u32) -> String {
    if stale_time > 0 {
        format!("I T{stale_time}")
    } else {
        "I".to_string()
    }
}

/// `get_multi` that also sets the expiry of the keys found, in one round trip per server.
pub(super) fn gat_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<Py<PyDict>> {
    let exptime = uint_mask(time)?;
    multi::fetch::fetch(slf, keys, key_prefix, false, Some(exptime))
}

// -- the asynchronous halves: each method's outcome into its value, as above ---------------------

/// The lease read of `get_or_set`: `(state, value, cas)`.
pub(crate) struct LeaseGetFinish {
    pub key: Vec<u8>,
}

impl Finish for LeaseGetFinish {
    type Op = crate::client::op::meta::Meta;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        lease_reply(slf, &self.key, v.pop())?.into_py_any(slf.py())
    }
}

/// A lease given back: whether it was.
pub(crate) struct LeaseReleaseFinish {
    pub key: Vec<u8>,
}

impl Finish for LeaseReleaseFinish {
    type Op = crate::client::op::meta::Meta;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        release_reply(&self.key, v.pop())?.into_py_any(slf.py())
    }
}

/// `invalidate_multi`: the keys sent (for messages) and their objects; the reply is `(every key
/// found, [keys whose server has no meta protocol])`.
pub(crate) struct InvalidateFinish {
    pub keys: crate::client::keys::Keys,
    pub objs: Vec<Py<PyAny>>,
    pub all: bool,
}

impl Finish for InvalidateFinish {
    type Op = crate::client::op::meta::Meta;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let mut all = self.all;
        let unsupported = pyo3::types::PyList::empty(py);
        for ((r, obj), k) in v.into_iter().zip(self.objs).zip(self.keys.refs()) {
            match r {
                Ok(out) => all &= out.code == *b"HD",
                Err(CoreError::NotSupported(_)) => unsupported.append(obj)?,
                Err(e) => return Err(errors::op_error(Op::Delete, Some(k), &e)),
            }
        }
        (all, unsupported).into_py_any(py)
    }
}

// -- the asynchronous halves: the calls prepared -------------------------------------------------

fn get_and_touch(exptime: u32) -> Get {
    Get {
        cas: false,
        touch: Some(exptime),
    }
}

/// One key's meta command prepared for the asyncio client: the key converted and checked as
/// the blocking methods check it, the command `verb` with `flags`, its finish made from the key.
pub(crate) fn prepare_meta<F: Finish<Op = Meta>>(
    key: &Bound<'_, PyAny>,
    verb: MetaVerb,
    flags: String,
    finish: impl FnOnce(&[u8]) -> F,
) -> PyResult<Prepared<F>> {
    let k = key_obj(key)?;
    check_key_len(k)?;
    Ok(Prepared::keys(meta(verb, flags), one(k), finish(k)))
}

/// A meta command of `verb` with `flags`, for a request.
pub(crate) fn meta(verb: MetaVerb, flags: String) -> Meta {
    Meta {
        verb,
        flags: flags.into_bytes().into(),
    }
}

/// The asynchronous `gat_multi`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_gat_multi(
    keys: &Bound<'_, PyAny>,
    time: &Bound<'_, PyAny>,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<Prepared<FetchFinish>> {
    let exptime = uint_mask(time)?;
    let (prefix, items) = multi::fetch::fetch_items(keys, key_prefix, false)?;
    let (objs, full) = multi::fetch::fetch_keys(&items, &prefix)?;
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

/// The asynchronous `lease_get`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_lease_get(
    key: &Bound<'_, PyAny>,
    lease_s: u32,
    recache: u32,
) -> PyResult<Prepared<LeaseGetFinish>> {
    let flags = lease_flags(lease_s, recache);
    prepare_meta(key, MetaVerb::Get, flags, |k| LeaseGetFinish {
        key: k.to_vec(),
    })
}

/// The asynchronous `lease_release`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_lease_release(
    key: &Bound<'_, PyAny>,
    cas: u64,
    stale: bool,
) -> PyResult<Prepared<LeaseReleaseFinish>> {
    let flags = release_flags(cas, stale);
    prepare_meta(key, MetaVerb::Delete, flags, |k| LeaseReleaseFinish {
        key: k.to_vec(),
    })
}

/// The asynchronous `invalidate_multi`: its arguments converted as the blocking method converts
/// them, into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_invalidate_multi(
    keys: &[Bound<'_, PyAny>],
    stale_time: u32,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<Prepared<InvalidateFinish>> {
    let prefix = prefix_bytes(key_prefix, ArgPos::of("invalidate_multi", 3))?;
    let (full, at) = invalidate_keys(keys, &prefix)?;
    let wire = Keys::of(&full);
    let objs = at
        .iter()
        .filter_map(|&i| keys.get(i))
        .map(|o| o.clone().unbind())
        .collect();
    let op = Meta {
        verb: MetaVerb::Delete,
        flags: invalidate_flags(stale_time).into_bytes().into(),
    };
    let finish = InvalidateFinish {
        keys: wire.clone(),
        objs,
        all: full.len() == keys.len(),
    };
    Ok(Prepared::keys(op, wire, finish))
}
