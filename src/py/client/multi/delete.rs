//! delete_multi: the keys converted with pylibmc's rules, the core's deletes, whether every
//! key was there; and the asynchronous half.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::borrow::Cow;

use crate::client::op::delete::Delete;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::method::{Finish, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};

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

/// delete_multi (`delete_multi(keys, key_prefix=b'', *, noreply=False)`): whether every key
/// was there.
pub(crate) struct DeleteMulti<'a> {
    full: Vec<Cow<'a, [u8]>>,
    prefix_len: usize,
    all: bool,
    /// The error pylibmc raises after deleting the keys before it.
    stopped: Option<PyErr>,
    noreply: bool,
}

impl<'a> DeleteMulti<'a> {
    /// `items`, `prefix` and `stopped` as `delete_multi_items` made them.
    pub(crate) fn parse(
        items: &'a [Bound<'_, PyAny>],
        prefix: &[u8],
        stopped: Option<PyErr>,
        noreply: bool,
    ) -> PyResult<Parsed<Self>> {
        let (full, all, stopped) = delete_multi_keys(items, prefix, stopped);
        Ok(Parsed::Call(DeleteMulti {
            full,
            prefix_len: prefix.len(),
            all,
            stopped,
            noreply,
        }))
    }
}

impl Finish for DeleteMulti<'_> {
    type Op = Delete;
    type Value = bool;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<bool>>,
    ) -> PyResult<bool> {
        let refs: Vec<&[u8]> = refs(&self.full);
        delete_multi_reply(slf.get(), &refs, self.prefix_len, v, self.all, self.stopped)
    }
}

impl Method for DeleteMulti<'_> {
    type Later = DeleteMulti<'static>;

    type Wire<'w>
        = Vec<&'w [u8]>
    where
        Self: 'w;

    fn op(&self) -> Delete {
        Delete {
            noreply: self.noreply,
        }
    }

    fn wire(&self) -> Vec<&[u8]> {
        refs(&self.full)
    }

    fn later(self) -> DeleteMulti<'static> {
        DeleteMulti {
            full: self
                .full
                .into_iter()
                .map(|k| Cow::Owned(k.into_owned()))
                .collect(),
            ..self
        }
    }
}
