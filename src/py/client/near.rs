//! The native half of the near cache (`python/fastmc/near.py`): asking a server whether a
//! value held near is still current, by its CAS alone. `mg <key> c` answers the item's CAS
//! without its value; where the server has memcached 1.6.40's conditional fetch,
//! `mg <key> C<cas> v f c` answers `HD` when the CAS still matches and the new value when it
//! does not, in the same round trip. A server older than 1.6.40 ignores `C` and sends the
//! value anyway: the answer then still says whether the item changed (its CAS), and the Python
//! side learns to ask by CAS alone. A batch (`get_multi`'s held keys due for a check) asks
//! `mg <key> c` for each key in one round trip (`CasMulti`) and fetches only the keys whose
//! CAS changed. The single check is `NearCheck`. Keys are converted with `py::args`, values
//! decoded with `codec`, errors built by `py::errors`; uses `client::MetaOutcome` and the
//! core's `Error`.

use pyo3::prelude::*;

use super::state::PyClient;
use crate::client::op::meta::Meta;
use crate::client::op::meta::MetaVerb;
use crate::client::results::MetaOutcome;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::lease::{Answer, MetaCall};
use crate::py::client::method::{Finish, Method, Parsed};
use crate::py::errors::{self, Op};

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

/// The near cache's check of a value it holds with `cas` (`_near_check(key, cas,
/// conditional)`): `(state, value, cas, bytes)`.
pub(crate) struct NearCheck {
    cas: u64,
}

impl NearCheck {
    pub(crate) fn parse<'k>(
        key: &'k Bound<'_, PyAny>,
        cas: u64,
        conditional: bool,
    ) -> PyResult<Parsed<MetaCall<&'k [u8], NearCheck>>> {
        let flags = check_flags(cas, conditional);
        MetaCall::parse(key, MetaVerb::Get, flags, NearCheck { cas })
    }
}

impl Answer for NearCheck {
    type Value = Check;
    fn answer(
        self,
        slf: &Bound<'_, PyClient>,
        k: &[u8],
        r: Option<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Check> {
        check_reply(slf, k, self.cas, r)
    }
}

/// The near cache's check of many held values by their CAS alone (`_near_cas_multi(keys)`):
/// each key's CAS (or what became of it, `cas_reply`).
pub(crate) struct CasMulti {
    full: Vec<Vec<u8>>,
}

impl CasMulti {
    pub(crate) fn parse(keys: &[Bound<'_, PyAny>]) -> PyResult<Parsed<Self>> {
        Ok(Parsed::Call(CasMulti {
            full: batch_keys(keys)?,
        }))
    }
}

impl Finish for CasMulti {
    type Op = Meta;
    type Value = Vec<i64>;

    fn finish(
        self,
        _: &Bound<'_, PyClient>,
        v: Vec<Result<MetaOutcome, CoreError>>,
    ) -> PyResult<Vec<i64>> {
        Ok(cas_reply(v))
    }
}

impl Method for CasMulti {
    type Later = CasMulti;

    type Wire<'w> = Vec<&'w [u8]>;

    fn op(&self) -> Meta {
        Meta {
            verb: MetaVerb::Get,
            flags: CAS_ONLY.into(),
        }
    }

    fn wire(&self) -> Vec<&[u8]> {
        self.full.iter().map(Vec::as_slice).collect()
    }

    /// (The keys stay with the request: the finish needs none.)
    fn later(self) -> CasMulti {
        CasMulti { full: Vec::new() }
    }
}
