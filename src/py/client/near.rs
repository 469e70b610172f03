//! The native half of the near cache (`python/fastmc/near.py`): asking a server whether a
//! value held near is still current, by its CAS alone. `mg <key> c` answers the item's CAS
//! without its value; where the server has memcached 1.6.40's conditional fetch,
//! `mg <key> C<cas> v f c` answers `HD` when the CAS still matches and the new value when it
//! does not, in the same round trip. A server older than 1.6.40 ignores `C` and sends the
//! value anyway: the answer then still says whether the item changed (its CAS), and the Python
//! side learns to ask by CAS alone. A batch (`get_multi`'s held keys due for a check) asks
//! `mg <key> c` for each key in one round trip (`cas_multi`) and fetches only the keys whose
//! CAS changed. Keys are converted with `py::args`, values decoded with `codec`, errors built
//! by `py::errors`; uses `client::MetaOutcome` and the core's `Error`.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use super::state::PyClient;
use crate::client::keys::Keys;
use crate::client::op::meta::Meta;
use crate::client::op::meta::MetaVerb;
use crate::client::results::MetaOutcome;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::finish::{Finish, Prepared};
use crate::py::client::lease::prepare_meta;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// The item's CAS is the one held near.
const SAME: &str = "same";
/// The item changed; its new value (and CAS) came with the answer.
const CHANGED: &str = "changed";
/// The item changed; only its CAS came back (ask by CAS alone): fetch it.
const STALE: &str = "stale";
/// The item is gone.
const MISS: &str = "miss";
/// The key's server does not speak the meta protocol: fetch it.
const UNSUPPORTED: &str = "unsupported";

/// The item's value came although its CAS is the one held: the server ignored `C` (it is
/// older than 1.6.40), so the client asks by CAS alone from then on.
const SAME_SENT: &str = "same_sent";

/// `(state, value, cas, size)` of a check: `size` is the bytes of a value that came, as stored.
pub(crate) type Check = (&'static str, Py<PyAny>, u64, usize);

/// The flags of a check of an item held with `cas`: a plain fetch of value and CAS (`cas` 0:
/// nothing held yet), the conditional fetch, or the CAS alone.
pub(crate) fn check_flags(cas: u64, conditional: bool) -> String {
    if cas == 0 {
        "v f c".to_owned()
    } else if conditional {
        format!("C{cas} v f c")
    } else {
        "c".to_owned()
    }
}

/// Is `key`'s item still the one with `cas`? See the module's header.
pub(crate) fn check(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    cas: u64,
    conditional: bool,
) -> PyResult<Check> {
    let this = slf.get();
    let k = key_obj(key)?;
    check_key_len(k)?;
    let flags = check_flags(cas, conditional);
    let r = detached(slf.py(), this, |core| {
        Ok(core
            .meta_command(MetaVerb::Get, &[k], flags.as_bytes())
            .pop())
    })?;
    check_reply(slf, k, cas, r)
}

/// What a check returns for the core's outcome `r`.
pub(crate) fn check_reply(
    slf: &Bound<'_, PyClient>,
    k: &[u8],
    held: u64,
    r: Option<Result<MetaOutcome, CoreError>>,
) -> PyResult<Check> {
    let py = slf.py();
    let out = match r {
        Some(Ok(out)) => out,
        Some(Err(CoreError::NotSupported(_))) => return Ok((UNSUPPORTED, py.None(), 0, 0)),
        Some(Err(e)) => return Err(errors::op_error(Op::Get, Some(k), &e)),
        None => return Err(errors::no_result()),
    };
    if out.code == *b"EN" {
        return Ok((MISS, py.None(), 0, 0));
    }
    let cas = out.number(b'c').unwrap_or(0);
    let same = cas == held && cas != 0;
    match &out.data {
        Some(data) if same => Ok((SAME_SENT, py.None(), cas, data.len())),
        Some(data) => {
            let f = out.number(b'f').unwrap_or(0) as u32;
            match slf.get().decode_item(slf, k, data, f)? {
                Some(value) => Ok((CHANGED, value, cas, data.len())),
                // A value this client refuses to decode reads as a miss, as in `get`.
                None => Ok((MISS, py.None(), 0, 0)),
            }
        }
        None if same => Ok((SAME, py.None(), cas, 0)),
        None => Ok((STALE, py.None(), cas, 0)),
    }
}

/// A key of a batch check that is not found.
const CAS_MISS: i64 = 0;
/// A key whose server does not speak the meta protocol.
const CAS_UNSUPPORTED: i64 = -1;
/// A key whose check failed (the server's error): fetched with the batch's other keys, where
/// the failure is reported as a fetch's is.
const CAS_FAILED: i64 = -2;

/// The full keys of a batch check, each converted and checked as a key.
pub(crate) fn batch_keys(keys: &[Bound<'_, PyAny>]) -> PyResult<Vec<Vec<u8>>> {
    keys.iter()
        .map(|k| {
            let k = key_obj(k)?;
            check_key_len(k)?;
            Ok(k.to_vec())
        })
        .collect()
}

/// `mg <key> c` for every key, in one round trip: each key's CAS (or `CAS_MISS`,
/// `CAS_UNSUPPORTED`, `CAS_FAILED`).
pub(crate) fn cas_multi(
    slf: &Bound<'_, PyClient>,
    keys: &[Bound<'_, PyAny>],
) -> PyResult<Vec<i64>> {
    let full = batch_keys(keys)?;
    let refs: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
    let out = detached(slf.py(), slf.get(), |core| {
        Ok(core.meta_command(MetaVerb::Get, &refs, CAS_ONLY))
    })?;
    Ok(cas_reply(out))
}

/// The flags of a batch check.
pub(crate) const CAS_ONLY: &[u8] = b"c";

/// Each key's CAS from the outcomes of a batch check.
pub(crate) fn cas_reply(out: Vec<Result<MetaOutcome, CoreError>>) -> Vec<i64> {
    out.into_iter()
        .map(|r| match r {
            Ok(out) if out.code == *b"EN" => CAS_MISS,
            Ok(out) => out
                .number(b'c')
                .and_then(|c| i64::try_from(c).ok())
                .unwrap_or(CAS_FAILED),
            Err(CoreError::NotSupported(_)) => CAS_UNSUPPORTED,
            Err(_) => CAS_FAILED,
        })
        .collect()
}

/// A check on the asyncio client: `(state, value, cas, size)`.
pub(crate) struct CheckFinish {
    pub key: Vec<u8>,
    pub cas: u64,
}

impl Finish for CheckFinish {
    type Op = crate::client::op::meta::Meta;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        check_reply(slf, &self.key, self.cas, v.pop())?.into_py_any(slf.py())
    }
}

/// A batch check on the asyncio client: each key's CAS.
pub(crate) struct CasMultiFinish;

impl Finish for CasMultiFinish {
    type Op = crate::client::op::meta::Meta;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        cas_reply(v).into_py_any(slf.py())
    }
}

/// The asynchronous `check`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_check(
    key: &Bound<'_, PyAny>,
    cas: u64,
    conditional: bool,
) -> PyResult<Prepared<CheckFinish>> {
    let flags = check_flags(cas, conditional);
    prepare_meta(key, MetaVerb::Get, flags, |k| CheckFinish {
        key: k.to_vec(),
        cas,
    })
}

/// The asynchronous `cas_multi`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_cas_multi(keys: &[Bound<'_, PyAny>]) -> PyResult<Prepared<CasMultiFinish>> {
    let full = batch_keys(keys)?;
    let refs: Vec<&[u8]> = full.iter().map(Vec::as_slice).collect();
    let op = Meta {
        verb: MetaVerb::Get,
        flags: CAS_ONLY.into(),
    };
    Ok(Prepared::keys(op, Keys::of(&refs), CasMultiFinish))
}
