//! The native pieces of stampede protection: a lease read (`mg` with `N` and `R`: `LeaseGet`),
//! a lease release (`LeaseRelease`), and `invalidate`/`invalidate_multi` (`md` with `I`; the
//! request of many keys: `MarkStale`). `MetaCall` is one key's meta command, which the near
//! cache's check shares. The policy that
//! waits, computes and stores (`get_or_set`) is the Python `Client`'s: it calls a Python
//! callable and sleeps, and stores through `set`, so its values are `set`'s. Keys are converted
//! with `py::args`, values decoded with `codec`, the core is called through `io::detached` and
//! errors are built by `py::errors`. Uses `client::MetaOutcome` and the core's `Error`.

use std::borrow::Cow;
use std::ops::Deref;

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::single::get::get_key;
use super::state::PyClient;
use crate::client::op::meta::Meta;
use crate::client::op::meta::MetaVerb;
use crate::client::results::MetaOutcome;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::method::{unbind, Finish, Kept, Method, Parsed};
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
    let refs = refs(&full);
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

/// One key's meta command whose whole answer is read by `A` (a lease read or release, the near
/// cache's check): the key converted and checked as `get` checks it, the verb and its flags.
pub(crate) struct MetaCall<K, A> {
    key: K,
    verb: MetaVerb,
    flags: String,
    answer: A,
}

/// What a `MetaCall` returns for the core's outcome `r` of its key `k`.
pub(crate) trait Answer: Send + 'static {
    type Value: for<'py> IntoPyObject<'py> + Send;
    fn answer(
        self,
        slf: &Bound<'_, PyClient>,
        k: &[u8],
        r: Option<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Self::Value>;
}

impl<'k, A: Answer> MetaCall<&'k [u8], A> {
    pub(crate) fn parse(
        key: &'k Bound<'_, PyAny>,
        verb: MetaVerb,
        flags: String,
        answer: A,
    ) -> PyResult<Parsed<Self>> {
        let k = get_key(key)?;
        Ok(Parsed::Call(MetaCall {
            key: k,
            verb,
            flags,
            answer,
        }))
    }
}

impl<K: Deref<Target = [u8]>, A: Answer> Finish for MetaCall<K, A> {
    type Op = Meta;
    type Value = A::Value;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<A::Value> {
        self.answer.answer(slf, &self.key, v.pop())
    }
}

impl<A: Answer> Method for MetaCall<&[u8], A> {
    type Later = MetaCall<Kept, A>;

    type Wire<'w>
        = [&'w [u8]; 1]
    where
        Self: 'w;

    fn op(&self) -> Meta {
        Meta {
            verb: self.verb,
            flags: self.flags.as_bytes().into(),
        }
    }

    fn wire(&self) -> [&[u8]; 1] {
        [self.key]
    }

    fn later(self) -> MetaCall<Kept, A> {
        MetaCall {
            key: Kept::from_slice(self.key),
            verb: self.verb,
            flags: String::new(),
            answer: self.answer,
        }
    }
}

/// The lease read of `get_or_set` (`_lease_get(key, lease, recache)`): `(state, value, cas)`.
pub(crate) struct LeaseGet;

impl LeaseGet {
    pub(crate) fn parse<'k>(
        key: &'k Bound<'_, PyAny>,
        lease: u32,
        recache: u32,
    ) -> PyResult<Parsed<MetaCall<&'k [u8], LeaseGet>>> {
        MetaCall::parse(key, MetaVerb::Get, lease_flags(lease, recache), LeaseGet)
    }
}

impl Answer for LeaseGet {
    type Value = LeaseRead;
    fn answer(
        self,
        slf: &Bound<'_, PyClient>,
        k: &[u8],
        r: Option<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<LeaseRead> {
        lease_reply(slf, k, r)
    }
}

/// A lease given back (`_lease_release(key, cas, stale)`): whether it was.
pub(crate) struct LeaseRelease;

impl LeaseRelease {
    pub(crate) fn parse<'k>(
        key: &'k Bound<'_, PyAny>,
        cas: u64,
        stale: bool,
    ) -> PyResult<Parsed<MetaCall<&'k [u8], LeaseRelease>>> {
        MetaCall::parse(
            key,
            MetaVerb::Delete,
            release_flags(cas, stale),
            LeaseRelease,
        )
    }
}

impl Answer for LeaseRelease {
    type Value = bool;
    fn answer(
        self,
        _: &Bound<'_, PyClient>,
        k: &[u8],
        r: Option<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<bool> {
        release_reply(k, r)
    }
}

/// The keys marked stale by one request (`_invalidate_multi(keys, stale_time=0, key_prefix=b'')`):
/// `(every key found, [keys whose server has no meta protocol])`, which the caller deletes
/// (the asyncio `invalidate_multi`; the blocking one deletes them itself, above).
pub(crate) struct MarkStale<'a, 'py> {
    full: Vec<Cow<'a, [u8]>>,
    objs: Vec<&'a Bound<'py, PyAny>>,
    all: bool,
    stale_time: u32,
}

impl<'a, 'py> MarkStale<'a, 'py> {
    /// `keys`: `sized_items` of the keys given.
    pub(crate) fn parse(
        keys: &'a [Bound<'py, PyAny>],
        stale_time: u32,
        key_prefix: MaybeArg<'_, '_>,
    ) -> PyResult<Parsed<Self>> {
        let prefix = prefix_bytes(key_prefix, ArgPos::of("invalidate_multi", 3))?;
        let (full, at) = invalidate_keys(keys, &prefix)?;
        let objs = at.iter().filter_map(|&i| keys.get(i)).collect();
        Ok(Parsed::Call(MarkStale {
            all: full.len() == keys.len(),
            full,
            objs,
            stale_time,
        }))
    }
}

impl Finish for MarkStale<'_, '_> {
    type Op = Meta;
    type Value = (bool, Py<PyList>);

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<(bool, Py<PyList>)> {
        let objs: Vec<Py<PyAny>> = unbind(&self.objs);
        mark_stale_reply(slf.py(), &self.full, objs, self.all, v)
    }
}

impl Method for MarkStale<'_, '_> {
    type Later = MarkStaleLater;

    type Wire<'w>
        = Vec<&'w [u8]>
    where
        Self: 'w;

    fn op(&self) -> Meta {
        meta(MetaVerb::Delete, invalidate_flags(self.stale_time))
    }

    fn wire(&self) -> Vec<&[u8]> {
        refs(&self.full)
    }

    fn later(self) -> MarkStaleLater {
        MarkStaleLater {
            full: self
                .full
                .into_iter()
                .map(|k| Cow::Owned(k.into_owned()))
                .collect(),
            objs: unbind(&self.objs),
            all: self.all,
        }
    }
}

/// A `MarkStale` finished later: the keys sent (for messages) and their objects kept.
pub(crate) struct MarkStaleLater {
    full: Vec<Cow<'static, [u8]>>,
    objs: Vec<Py<PyAny>>,
    all: bool,
}

impl Finish for MarkStaleLater {
    type Op = Meta;
    type Value = (bool, Py<PyList>);

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<(bool, Py<PyList>)> {
        mark_stale_reply(slf.py(), &self.full, self.objs, self.all, v)
    }
}

/// What `_invalidate_multi` returns for the core's outcomes.
fn mark_stale_reply(
    py: Python<'_>,
    full: &[Cow<'_, [u8]>],
    objs: Vec<Py<PyAny>>,
    mut all: bool,
    v: Vec<Result<MetaOutcome, CoreError>>,
) -> PyResult<(bool, Py<PyList>)> {
    let unsupported = PyList::empty(py);
    for ((r, obj), k) in v.into_iter().zip(objs).zip(full) {
        match r {
            Ok(out) => all &= out.code == *b"HD",
            Err(CoreError::NotSupported(_)) => unsupported.append(obj)?,
            Err(e) => return Err(errors::op_error(Op::Delete, Some(k), &e)),
        }
    }
    Ok((all, unsupported.unbind()))
}

/// A meta command of `verb` with `flags`, for a request.
pub(crate) fn meta(verb: MetaVerb, flags: String) -> Meta {
    Meta {
        verb,
        flags: flags.into_bytes().into(),
    }
}
