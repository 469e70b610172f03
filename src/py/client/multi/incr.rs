//! incr_multi: the keys and delta converted with pylibmc's rules, the core's increments, the
//! failures reported as pylibmc reports them; and the asynchronous half.

use pyo3::prelude::*;
use std::borrow::Cow;

use crate::client::op::arith::Arith;
use crate::error::Error as CoreError;
use crate::protocol::MAX_KEY_LEN;
use crate::py::args::*;
use crate::py::client::method::{Finish, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self};

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

/// incr_multi (`incr_multi(keys, key_prefix=b'', delta=1)`): None, or the error.
pub(crate) struct IncrMulti<'a> {
    full: Vec<Cow<'a, [u8]>>,
    op: Arith,
    /// Per key, whether pylibmc refuses it too (`refused_by_length`).
    by_length: Vec<bool>,
}

impl<'a> IncrMulti<'a> {
    /// `items`, `prefix` and `delta` as `incr_multi_items` converted them.
    pub(crate) fn parse(
        items: &'a [Bound<'_, PyAny>],
        prefix: &[u8],
        delta: u32,
    ) -> PyResult<Parsed<Self>> {
        let full = incr_multi_keys(items, prefix)?;
        let by_length = refused_by_length(&full);
        let op = Arith {
            incr: true,
            delta: u64::from(delta),
            create: None,
        };
        Ok(Parsed::Call(IncrMulti {
            full,
            op,
            by_length,
        }))
    }
}

impl Finish for IncrMulti<'_> {
    type Op = Arith;
    /// None (`()` would be an empty tuple for the asyncio client).
    type Value = Py<PyAny>;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<Option<u64>>>,
    ) -> PyResult<Py<PyAny>> {
        report_arith(v, &self.by_length, slf.get().flags()?.verify_keys)?;
        Ok(slf.py().None())
    }
}

impl Method for IncrMulti<'_> {
    type Later = IncrMulti<'static>;

    type Wire<'w>
        = Vec<&'w [u8]>
    where
        Self: 'w;

    fn op(&self) -> Arith {
        self.op
    }

    fn wire(&self) -> Vec<&[u8]> {
        refs(&self.full)
    }

    /// (The keys stay with the request: the finish needs only `by_length`.)
    fn later(self) -> IncrMulti<'static> {
        IncrMulti {
            full: Vec::new(),
            op: self.op,
            by_length: self.by_length,
        }
    }
}
