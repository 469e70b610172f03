//! set_multi, add_multi and replace_multi (`store`): their arguments (`StoreMultiArgs`), the keys
//! and values converted and encoded before anything is sent (`store_multi_keys`), and the list of
//! keys not stored (`store_multi_reply`, which prefers a key's str form as pylibmc does). Shared
//! with the asyncio client (`py::aio`). Uses `py::args`, `codec` (through `PyClient`),
//! `io::detached`, `py::errors`, `client::{StoreItem, StoreStatus}` and the core's `Error`.

use std::borrow::Cow;
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::protocol::StoreItem;

use crate::client::op::store::Store;
use crate::client::op::{Args, Kind};
use crate::client::results::StoreStatus;
use crate::error::Error as CoreError;
use crate::protocol::StoreCmd;
use crate::py::args::{self, *};
use crate::py::client::method::{bound, unbind, Finish, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// A multi store's arguments, converted once in pylibmc's order (`O!|Is#Ii`: the mapping, time,
/// key_prefix, min_compress_len, compress_level; then compress_level's range).
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

impl StoreMultiArgs<'_, '_> {
    /// The mapping's pairs, kept for the call so that keys and bytes/str values are borrowed,
    /// not copied.
    pub(crate) fn pairs(&self) -> Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> {
        self.mapping.iter().collect()
    }
}

/// A multi store's keys and values, converted and encoded first (a failure here stores
/// nothing): which pairs failed already and which are sent, and their requests.
pub(crate) struct StoreMultiKeys<'a> {
    pub failed_at: Vec<bool>,
    pub sent: Vec<usize>,
    pub requests: Requests<'a>,
}

/// The requests of a multi store, keys and values borrowed from the caller's objects; those
/// that are bytes of fastmc's own (a key with its prefix, a pickle, a compressed value) are in
/// `owned`, and empty in `items` until `items` fills them in.
pub(crate) struct Requests<'a> {
    items: Vec<StoreItem<'a>>,
    owned: Vec<Owned>,
}

/// A request's key (`key`) or value made here, for the request at `at`.
struct Owned {
    at: usize,
    key: bool,
    bytes: Vec<u8>,
}

impl Requests<'_> {
    /// The requests, whole (a copy of the list: the asyncio client's request copies them).
    pub(crate) fn items(&self) -> Vec<StoreItem<'_>> {
        let mut items: Vec<StoreItem<'_>> = self.items.clone();
        fill_in(&mut items, &self.owned);
        items
    }

    /// `f` of the requests, whole, the list moved rather than copied (the blocking call's).
    pub(crate) fn with_items<R>(self, f: impl FnOnce(&[StoreItem<'_>]) -> R) -> R {
        let Requests { mut items, owned } = self;
        fill_in(&mut items, &owned);
        f(&items)
    }
}

/// The bytes made here put in the requests they belong to.
fn fill_in<'b>(items: &mut [StoreItem<'b>], owned: &'b [Owned]) {
    for o in owned {
        if let Some(it) = items.get_mut(o.at) {
            if o.key {
                it.key = &o.bytes;
            } else {
                it.data = &o.bytes;
            }
        }
    }
}

/// `cow`'s bytes if they are borrowed; else they go to `owned` for the request at `at`, and
/// the request has none until `items`.
fn borrowed_or_kept<'a>(
    cow: Cow<'a, [u8]>,
    owned: &mut Vec<Owned>,
    at: usize,
    key: bool,
) -> &'a [u8] {
    match cow {
        Cow::Borrowed(b) => b,
        Cow::Owned(bytes) => {
            owned.push(Owned { at, key, bytes });
            &[]
        }
    }
}

pub(crate) fn store_multi_keys<'a>(
    slf: &Bound<'_, PyClient>,
    args: &StoreMultiArgs<'_, '_>,
    pairs: &'a [(Bound<'_, PyAny>, Bound<'_, PyAny>)],
) -> PyResult<StoreMultiKeys<'a>> {
    let this = slf.get();
    // Which pairs failed (reported in the mapping's order, as pylibmc does), and which were sent.
    let mut failed_at = vec![false; pairs.len()];
    let mut sent = Vec::with_capacity(pairs.len());
    let mut items = Vec::with_capacity(pairs.len());
    let mut owned = Vec::new();
    // pylibmc encodes every str key before it looks at any pair (`encode_str_keys`). In one
    // pass the keys before a pair are encoded already: on an error, only its key and the rest
    // are looked at, and a str among them that cannot be encoded raises first. Before a value
    // runs the caller's code (a pickle, `serialize`), the rest are encoded, as pylibmc's first
    // pass would have.
    let rest = |i: usize| pairs[i..].iter().map(|(k, _)| k);
    let mut all_encoded = false;
    for (i, (k, v)) in pairs.iter().enumerate() {
        let converted = (|| {
            let kb = key_obj(k)?;
            check_key_len(kb)?;
            // pylibmc checks the key, the prefix, then both: the prefix's own check gives the
            // same answer every time, so it is made once, after the first key's.
            if i == 0 {
                check_key_len(&args.prefix)?;
            }
            let fk = join_key(&args.prefix, kb);
            if !args.prefix.is_empty() {
                check_key_len(&fk)?; // (without a prefix it is the key just checked)
            }
            if let Some(b) = this.stored_as_is(v, args.min_compress_len) {
                return Ok((fk, (Cow::Borrowed(b), 0)));
            }
            if !all_encoded && !this.encodes_plainly(v) {
                encode_str_keys(rest(i + 1))?;
                all_encoded = true;
            }
            let enc = this.encode_value(slf, &fk, v, args.min_compress_len, args.level)?;
            Ok((fk, enc))
        })();
        let (fk, (data, flags)) = match converted {
            Ok(c) => c,
            Err(e) if all_encoded => return Err(e),
            Err(e) => return Err(encode_str_keys(rest(i)).err().unwrap_or(e)),
        };
        if fk.is_empty() {
            failed_at[i] = true;
            continue;
        }
        let at = items.len();
        items.push(StoreItem {
            key: borrowed_or_kept(fk, &mut owned, at, true),
            flags,
            exptime: args.exptime,
            data: borrowed_or_kept(data, &mut owned, at, false),
            cas: 0,
        });
        sent.push(i);
    }
    Ok(StoreMultiKeys {
        failed_at,
        sent,
        requests: Requests { items, owned },
    })
}

/// What set/add/replace_multi return for the core's outcomes: `keys` are the mapping's keys in
/// order, `sent` the positions sent, `failed_at` those failed before sending.
pub(crate) fn store_multi_reply(
    py: Python<'_>,
    this: &PyClient,
    cmd: StoreCmd,
    keys: &[&Bound<'_, PyAny>],
    sent: &[usize],
    mut failed_at: Vec<bool>,
    results: Vec<crate::error::Result<StoreStatus>>,
) -> PyResult<Py<PyList>> {
    let verify = this.flags()?.verify_keys;
    let mut first_err = None;
    let mut any = failed_at.contains(&true);
    for (&i, r) in sent.iter().zip(results) {
        match r {
            Ok(StoreStatus::Stored) => continue,
            Ok(_) => {}
            Err(CoreError::BadKey(_)) if verify => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        failed_at[i] = true;
        any = true;
    }
    if !any {
        return Ok(PyList::empty(py).unbind());
    }
    let failed = PyList::new(
        py,
        keys.iter()
            .zip(&failed_at)
            .filter(|(_, &f)| f)
            .map(|(k, _)| *k),
    )?;
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

/// set_multi, add_multi and replace_multi (`set_multi(mapping, time=0, key_prefix=b'',
/// min_compress_len=0, compress_level=-1, *, noreply=False)`): the keys not stored.
pub(crate) struct StoreMulti<'a, 'py> {
    op: Store,
    /// Every key of the mapping, in its order.
    keys: Vec<&'a Bound<'py, PyAny>>,
    conv: StoreMultiKeys<'a>,
}

impl<'a, 'py> StoreMulti<'a, 'py> {
    /// `pairs`: `args.pairs()`.
    pub(crate) fn parse(
        slf: &Bound<'_, PyClient>,
        cmd: StoreCmd,
        args: &StoreMultiArgs<'_, '_>,
        pairs: &'a [(Bound<'py, PyAny>, Bound<'py, PyAny>)],
    ) -> PyResult<Parsed<Self>> {
        let conv = store_multi_keys(slf, args, pairs)?;
        Ok(Parsed::Call(StoreMulti {
            op: Store {
                cmd,
                noreply: args.noreply,
            },
            keys: pairs.iter().map(|(k, _)| k).collect(),
            conv,
        }))
    }
}

impl Finish for StoreMulti<'_, '_> {
    type Op = Store;
    type Value = Py<PyList>;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<StoreStatus>>,
    ) -> PyResult<Py<PyList>> {
        let StoreMultiKeys {
            failed_at, sent, ..
        } = self.conv;
        store_multi_reply(
            slf.py(),
            slf.get(),
            self.op.cmd,
            &self.keys,
            &sent,
            failed_at,
            v,
        )
    }
}

impl Method for StoreMulti<'_, '_> {
    type Later = StoreMultiLater;

    type Wire<'w>
        = Vec<StoreItem<'w>>
    where
        Self: 'w;

    fn op(&self) -> Store {
        self.op
    }

    fn wire(&self) -> Vec<StoreItem<'_>> {
        self.conv.requests.items()
    }

    fn later(self) -> StoreMultiLater {
        StoreMultiLater {
            cmd: self.op.cmd,
            keys: unbind(&self.keys),
            sent: self.conv.sent,
            failed_at: self.conv.failed_at,
        }
    }

    /// The blocking call, its list of requests moved into the core's call (`wire` copies it).
    fn call(self, slf: &Bound<'_, PyClient>) -> PyResult<Py<PyList>> {
        let StoreMulti { op, keys, conv } = self;
        let StoreMultiKeys {
            failed_at,
            sent,
            requests,
        } = conv;
        let (py, this) = (slf.py(), slf.get());
        let out = requests
            .with_items(|items| detached(py, this, |core| Ok(op.run(core, Args::items(items)))))?;
        store_multi_reply(py, this, op.cmd, &keys, &sent, failed_at, out)
    }
}

/// A `StoreMulti` finished later: the key objects kept.
pub(crate) struct StoreMultiLater {
    cmd: StoreCmd,
    /// Every key of the mapping, in its order.
    keys: Vec<Py<PyAny>>,
    /// The positions of the keys sent, in the order of the request.
    sent: Vec<usize>,
    /// The positions that failed before anything was sent.
    failed_at: Vec<bool>,
}

impl Finish for StoreMultiLater {
    type Op = Store;
    type Value = Py<PyList>;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<StoreStatus>>,
    ) -> PyResult<Py<PyList>> {
        let keys = bound(slf.py(), self.keys);
        let k: Vec<&Bound<'_, PyAny>> = keys.iter().collect();
        store_multi_reply(
            slf.py(),
            slf.get(),
            self.cmd,
            &k,
            &self.sent,
            self.failed_at,
            v,
        )
    }
}
