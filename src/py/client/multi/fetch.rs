//! get_multi and gets_multi (`fetch`): the keys converted with pylibmc's rules for empty keys
//! and str/bytes twins, the core's fetch, the dict; and the asynchronous half.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use std::borrow::Cow;
use std::collections::HashMap;

use crate::client::fetched::Fetched;
use crate::client::op::get::Get as FetchOp;
use crate::error::Error as CoreError;
use crate::protocol::{is_text_key, MAX_KEY_LEN};
use crate::py::args::*;
use crate::py::client::method::{bound, unbind, Finish, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};

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

/// get_multi and gets_multi (`get_multi(keys, key_prefix=b'')`: `{key: value}`, or
/// `(value, cas)`), and gat_multi (the new expiry of the keys found set as they are read).
pub(crate) struct Fetch<'a, 'py> {
    objs: Vec<&'a Bound<'py, PyAny>>,
    full: Vec<Cow<'a, [u8]>>,
    prefix: Vec<u8>,
    op: FetchOp,
}

impl<'a, 'py> Fetch<'a, 'py> {
    /// `items` and `prefix` as `fetch_items` converted them.
    pub(crate) fn parse(
        items: &'a [Bound<'py, PyAny>],
        prefix: Vec<u8>,
        with_cas: bool,
        touch: Option<u32>,
    ) -> PyResult<Parsed<Self>> {
        let (objs, full) = fetch_keys(items, &prefix)?;
        Ok(Parsed::Call(Fetch {
            objs,
            full,
            prefix,
            op: FetchOp {
                cas: with_cas,
                touch,
            },
        }))
    }
}

impl Finish for Fetch<'_, '_> {
    type Op = FetchOp;
    type Value = Py<PyDict>;

    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Py<PyDict>> {
        fetch_reply(slf, &self.objs, &self.full, f, self.op.cas)
    }
}

impl Method for Fetch<'_, '_> {
    type Later = FetchLater;

    type Wire<'w>
        = Vec<&'w [u8]>
    where
        Self: 'w;

    fn op(&self) -> FetchOp {
        self.op
    }

    fn wire(&self) -> Vec<&[u8]> {
        refs(&self.full)
    }

    fn later(self) -> FetchLater {
        FetchLater {
            objs: unbind(&self.objs),
            prefix: self.prefix,
            with_cas: self.op.cas,
        }
    }
}

/// A `Fetch` finished later: the key objects kept (each full key made again from its object).
pub(crate) struct FetchLater {
    objs: Vec<Py<PyAny>>,
    /// The key prefix: a value is decoded for its full key (signed values are bound to it).
    prefix: Vec<u8>,
    with_cas: bool,
}

impl Finish for FetchLater {
    type Op = FetchOp;
    type Value = Py<PyDict>;

    fn finish(self, slf: &Bound<'_, PyClient>, f: Fetched) -> PyResult<Py<PyDict>> {
        let objs = bound(slf.py(), self.objs);
        let refs: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
        let full = objs
            .iter()
            .map(|o| Ok(join_key(&self.prefix, key_obj(o)?)))
            .collect::<PyResult<Vec<_>>>()?;
        fetch_reply(slf, &refs, &full, f, self.with_cas)
    }
}
