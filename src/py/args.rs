//! Argument conversion shared by the client's methods, done while attached: keys (with
//! pylibmc's two wordings for a key of the wrong type) and their length check, CPython's integer
//! rules (`require_int`, C-style wrapping in `wrap_u32`/`wrap_i64`), key prefixes, the key lists
//! of the multi methods (`MultiKeys`), `compress_level`, and `MaybeArg` for a positional argument
//! that may be missing. Owns the TypeError/ValueError wordings of argument parsing; no I/O, no
//! core client. Uses pyo3 and `protocol::MAX_KEY_LEN` only.

use std::borrow::Cow;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString, PyTuple};

use crate::protocol::MAX_KEY_LEN;

/// A positional argument that may be left out. Unlike `Option`, a `None` passed counts as given.
pub enum MaybeArg<'a, 'py> {
    Given(Borrowed<'a, 'py, PyAny>),
    Missing,
}

impl<'a, 'py> MaybeArg<'a, 'py> {
    /// The one positional argument of `method`, or CPython's "takes exactly 1 argument (N
    /// given)" counting the `rest` gathered after it.
    pub fn exactly_one(
        self,
        rest: &Bound<'py, PyTuple>,
        method: &str,
    ) -> PyResult<Borrowed<'a, 'py, PyAny>> {
        match self {
            MaybeArg::Given(arg) if rest.is_empty() => Ok(arg),
            _ => Err(PyTypeError::new_err(format!(
                "{method}() takes exactly 1 argument ({} given)",
                usize::from(matches!(self, MaybeArg::Given(_))) + rest.len()
            ))),
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for MaybeArg<'a, 'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(MaybeArg::Given(obj))
    }
}

/// How a method reports a key of the wrong type (pylibmc has two wordings).
#[derive(Clone, Copy)]
pub enum KeyErrorWording {
    /// get, gets and the multi methods.
    MustBeBytes,
    /// methods that parse the key with the `s#` format.
    BytesLike,
}

/// A key's bytes (str as UTF-8, bytes as they are), borrowed from the object.
pub fn key_bytes<'a>(obj: &'a Bound<'_, PyAny>, wording: KeyErrorWording) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(match wording {
        KeyErrorWording::MustBeBytes => PyTypeError::new_err("key must be bytes"),
        KeyErrorWording::BytesLike => PyTypeError::new_err(format!(
            "a bytes-like object is required, not '{}'",
            type_name(obj)
        )),
    })
}

/// pylibmc's own length check (ValueError), before libmemcached sees the key.
pub fn check_key_len(k: &[u8]) -> PyResult<()> {
    if k.len() > MAX_KEY_LEN {
        return Err(PyValueError::new_err(format!(
            "key length {} too long, max is {MAX_KEY_LEN}",
            k.len()
        )));
    }
    Ok(())
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// CPython's TypeError where C wants an integer and got something else.
pub fn require_int(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    if obj.is_instance_of::<PyInt>() {
        return Ok(());
    }
    Err(PyTypeError::new_err(format!(
        "'{}' object cannot be interpreted as an integer",
        type_name(obj)
    )))
}

/// An int argument that C parses as `unsigned int` without overflow checking: wraps mod 2**32.
pub fn wrap_u32(obj: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    let Some(obj) = obj else { return Ok(0) };
    if obj.is_none() {
        return Ok(0);
    }
    require_int(obj)?;
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v as u32);
    }
    let masked = obj.call_method1(intern!(obj.py(), "__and__"), (0xFFFF_FFFFu64,))?;
    masked.extract::<u32>()
}

/// An int behavior value, wrapped to 64 bits like `PyLong_AsUnsignedLongMask`.
pub fn wrap_i64(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v);
    }
    let masked = obj.call_method1(intern!(obj.py(), "__and__"), (u64::MAX,))?;
    Ok(masked.extract::<u64>()? as i64)
}

pub fn prefix_bytes(prefix: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u8>> {
    match prefix {
        None => Ok(Vec::new()),
        Some(p) if p.is_none() => Ok(Vec::new()),
        Some(p) => key_bytes(p, KeyErrorWording::BytesLike).map(<[u8]>::to_vec),
    }
}

pub fn join_key<'a>(prefix: &[u8], key: &'a [u8]) -> Cow<'a, [u8]> {
    if prefix.is_empty() {
        Cow::Borrowed(key)
    } else {
        let mut v = Vec::with_capacity(prefix.len() + key.len());
        v.extend_from_slice(prefix);
        v.extend_from_slice(key);
        Cow::Owned(v)
    }
}

/// The keys of a multi operation, converted while attached.
pub struct MultiKeys<'a, 'py> {
    /// The objects with a non-empty key, in the caller's order.
    pub objs: Vec<&'a Bound<'py, PyAny>>,
    /// Their keys with the prefix (borrowed from the objects when there is no prefix).
    pub full: Vec<Cow<'a, [u8]>>,
    /// The objects whose key is empty after prefixing (no I/O for them).
    pub empty: Vec<&'a Bound<'py, PyAny>>,
}

impl MultiKeys<'_, '_> {
    /// The full keys as the core takes them.
    pub fn refs(&self) -> Vec<&[u8]> {
        self.full.iter().map(|k| &**k).collect()
    }
}

/// Convert a key list for a multi operation. `check_prefixed`: the length limit applies to the
/// key with its prefix (else to the key as given).
pub fn multi_keys<'a, 'py>(
    keys_iter: &'a [Bound<'py, PyAny>],
    prefix: &[u8],
    check_prefixed: bool,
) -> PyResult<MultiKeys<'a, 'py>> {
    let mut objs = Vec::with_capacity(keys_iter.len());
    let mut full = Vec::with_capacity(keys_iter.len());
    let mut empty = Vec::new();
    for obj in keys_iter {
        let k = key_bytes(obj, KeyErrorWording::MustBeBytes)?;
        let fk = join_key(prefix, k);
        if check_prefixed {
            check_key_len(&fk)?;
        } else {
            check_key_len(k)?;
        }
        if fk.is_empty() {
            empty.push(obj);
            continue;
        }
        full.push(fk);
        objs.push(obj);
    }
    Ok(MultiKeys { objs, full, empty })
}

pub fn check_compress_level(level: i64) -> PyResult<i32> {
    if !(-1..=9).contains(&level) {
        return Err(PyValueError::new_err(
            "compress_level must be between 0 and 9 inclusive",
        ));
    }
    Ok(level as i32)
}

/// The objects of a sized iterable (`len()` is required, as in pylibmc), rejecting dicts.
pub fn sized_items<'py>(
    keys: &Bound<'py, PyAny>,
    dict_msg: &str,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if keys.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(dict_msg.to_string()));
    }
    let n = keys.len()?;
    let mut v = Vec::with_capacity(n);
    for k in keys.try_iter()? {
        v.push(k?);
    }
    Ok(v)
}
