//! Argument conversion shared by the client's methods, done while attached, as pylibmc's C code
//! converts them: one function per CPython format unit pylibmc uses (`s#` `str_or_bytes`, `s`
//! `c_str`, `I` `uint_mask`, `k` `ulong_mask`, `i` `c_int`, `L` `long_long`, `O!` int
//! `exact_long`) with CPython's exception classes and wordings ("[f() ]argument N must be ...",
//! `ArgPos`), pylibmc's key checks (`key_obj`, `check_key_len`, `encode_str_keys`), key prefixes,
//! the key lists of the multi methods (`MultiKeys`), `compress_level`, and `MaybeArg` for an
//! argument that may be left out (an explicit None is refused like any other wrong type). Owns
//! the TypeError/ValueError/OverflowError wordings of argument parsing; no I/O, no core client.
//! Uses pyo3 and `protocol::MAX_KEY_LEN` only.

use std::borrow::Cow;

use pyo3::exceptions::{PyDeprecationWarning, PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyMemoryView, PyString, PyTuple};

use crate::protocol::MAX_KEY_LEN;

/// An argument that may be left out. Unlike `Option`, a `None` passed counts as given (and is
/// refused by a conversion that wants an int or a str, as pylibmc's format units refuse it).
#[derive(Clone, Copy)]
pub enum MaybeArg<'a, 'py> {
    Given(Borrowed<'a, 'py, PyAny>),
    Missing,
}

impl<'a, 'py> MaybeArg<'a, 'py> {
    /// The argument converted by `convert`, or `default` when it was left out.
    pub fn map_or<T>(
        self,
        default: T,
        convert: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<T>,
    ) -> PyResult<T> {
        match self {
            MaybeArg::Given(arg) => convert(&arg),
            MaybeArg::Missing => Ok(default),
        }
    }

    /// The one positional argument of `method`, or CPython's "takes exactly 1 argument (N
    /// given)" counting the `rest` gathered after it.
    #[inline(always)]
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

/// Where an argument sits in pylibmc's C signature, for CPython's "[f() ]argument N must be X,
/// not Y" (the function name is given only where pylibmc's format string names it, `s#:delete`).
#[derive(Clone, Copy)]
pub struct ArgPos {
    func: Option<&'static str>,
    n: usize,
}

impl ArgPos {
    /// Argument `n` (from 1) of a method whose format string has no name.
    pub const fn nth(n: usize) -> Self {
        ArgPos { func: None, n }
    }

    /// Argument `n` (from 1) of the method `func` whose format string names it.
    pub const fn of(func: &'static str, n: usize) -> Self {
        ArgPos {
            func: Some(func),
            n,
        }
    }

    /// CPython's `converterr`: "[f() ]argument N must be <what>, not <type>" (None as "None").
    pub fn must_be(self, what: &str, obj: &Bound<'_, PyAny>) -> PyErr {
        let found = if obj.is_none() {
            "None".to_string()
        } else {
            type_name(obj)
        };
        let func = self.func.map(|f| format!("{f}() ")).unwrap_or_default();
        PyTypeError::new_err(format!(
            "{func}argument {} must be {what}, not {found}",
            self.n
        ))
    }
}

/// A key as pylibmc's `_key_normalized_obj` takes it (get, gets, the keys of the multi methods):
/// str as UTF-8 (a lone surrogate raises UnicodeEncodeError), bytes as they are.
#[inline]
pub fn key_obj<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(PyTypeError::new_err("key must be bytes"))
}

/// The `s#` format unit (keys of the single-key methods, key prefixes): str as UTF-8 (a lone
/// surrogate raises UnicodeEncodeError) or bytes. Other buffers (bytearray, memoryview) are
/// not read-only and get CPython's `converterr`; the rest `PyObject_GetBuffer`'s message.
#[inline(always)]
pub fn str_or_bytes<'a>(obj: &'a Bound<'_, PyAny>, pos: ArgPos) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(not_str_or_bytes(obj, pos))
}

/// `str_or_bytes`' error for `obj`, neither.
#[cold]
fn not_str_or_bytes(obj: &Bound<'_, PyAny>, pos: ArgPos) -> PyErr {
    if PyMemoryView::from(obj).is_ok() {
        return pos.must_be("read-only bytes-like object", obj);
    }
    PyTypeError::new_err(format!(
        "a bytes-like object is required, not '{}'",
        type_name(obj)
    ))
}

/// The `s` format unit (get_stats' argument): a str without NUL, as UTF-8.
pub fn c_str<'a>(obj: &'a Bound<'_, PyAny>, pos: ArgPos) -> PyResult<&'a str> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| pos.must_be("str", obj))?
        .to_str()?;
    if s.contains('\0') {
        return Err(PyValueError::new_err("embedded null character"));
    }
    Ok(s)
}

/// pylibmc's own length check (ValueError), before libmemcached sees the key.
#[inline]
pub fn check_key_len(k: &[u8]) -> PyResult<()> {
    if k.len() > MAX_KEY_LEN {
        return Err(key_too_long(k.len()));
    }
    Ok(())
}

#[cold]
fn key_too_long(len: usize) -> PyErr {
    PyValueError::new_err(format!("key length {len} too long, max is {MAX_KEY_LEN}"))
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

/// `operator.index(obj)`: an int as it is, else its `__index__` (CPython's TypeError "'X' object
/// cannot be interpreted as an integer" without one; whatever `__index__` raises).
fn index<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if obj.is_instance_of::<PyInt>() {
        return Ok(obj.clone());
    }
    let py = obj.py();
    py.import(intern!(py, "operator"))?
        .getattr(intern!(py, "index"))?
        .call1((obj,))
}

/// The low bits of an int under `mask`, by `int.__and__` itself (no subclass's override runs).
fn masked<'py>(int: &Bound<'py, PyAny>, mask: u64) -> PyResult<u64> {
    let py = int.py();
    py.get_type::<PyInt>()
        .call_method1(intern!(py, "__and__"), (int, mask))?
        .extract::<u64>()
}

/// The `I` format unit (times, min_compress_len, incr_multi's delta): any integer (or object
/// with `__index__`), wrapped mod 2**32 without an overflow check, as C's `unsigned int`.
/// From CPython 3.15 on, a value outside C's `int` and `unsigned int` (-2**31 to 2**32 - 1) still
/// wraps, after a DeprecationWarning, as pylibmc's does there.
pub fn uint_mask(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let int = index(obj)?;
    if let Ok(v) = int.extract::<i64>() {
        if v < i64::from(i32::MIN) || v > i64::from(u32::MAX) {
            warn_out_of_range(obj.py())?;
        }
        return Ok(v as u32);
    }
    warn_out_of_range(obj.py())?;
    Ok(masked(&int, u64::from(u32::MAX))? as u32)
}

/// CPython 3.15's DeprecationWarning for a wrapping format unit (`I`, `k`) given a value beyond
/// both its C types; an error when the warning filters make it one. Nothing before 3.15.
fn warn_out_of_range(py: Python<'_>) -> PyResult<()> {
    if py.version_info() < (3, 15) {
        return Ok(());
    }
    let category = py.get_type::<PyDeprecationWarning>();
    PyErr::warn(py, category.as_any(), c"integer value out of range", 1)
}

/// The `k` format unit (touch's time), wrapped mod 2**64: an int proper before CPython 3.14; from
/// 3.14 on, `k` also takes an object with `__index__` (pylibmc's touch then does), and an error
/// its `__index__` raises passes through; from 3.15 on, a value beyond C's `long` and `unsigned
/// long` warns first (`warn_out_of_range`).
pub fn ulong_mask(obj: &Bound<'_, PyAny>, pos: ArgPos) -> PyResult<u64> {
    let py = obj.py();
    let int = if obj.is_instance_of::<PyInt>() {
        obj.clone()
    } else if py.version_info() >= (3, 14) && obj.get_type().hasattr(intern!(py, "__index__"))? {
        index(obj)?
    } else {
        return Err(pos.must_be("int", obj));
    };
    if let Ok(v) = int.extract::<i64>() {
        return Ok(v as u64);
    }
    if int.extract::<u64>().is_err() {
        warn_out_of_range(py)?; // beyond C's long and unsigned long
    }
    masked(&int, u64::MAX)
}

/// The `i` format unit (deltas, compress_level): a C int; OverflowError outside its range with
/// CPython's wordings (`PyLong_AsLong`'s beyond 64 bits).
pub fn c_int(obj: &Bound<'_, PyAny>) -> PyResult<i32> {
    let v: i64 = obj.extract()?;
    if v > i64::from(i32::MAX) {
        return Err(PyOverflowError::new_err(
            "signed integer is greater than maximum",
        ));
    }
    if v < i64::from(i32::MIN) {
        return Err(PyOverflowError::new_err(
            "signed integer is less than minimum",
        ));
    }
    Ok(v as i32)
}

/// The `L` format unit (cas's token): a C long long, `PyLong_AsLongLong`'s OverflowError.
pub fn long_long(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            PyOverflowError::new_err("int too big to convert")
        } else {
            e
        }
    })
}

/// The `O!` unit with `int` then `PyLong_AsLong` (flush_all's time). Beyond 64 bits pylibmc
/// flushes at once and then fails with SystemError (an error left set); this raises the
/// OverflowError that SystemError hides, before anything is sent.
pub fn exact_long(obj: &Bound<'_, PyAny>, pos: ArgPos) -> PyResult<i64> {
    if !obj.is_instance_of::<PyInt>() {
        return Err(pos.must_be("int", obj));
    }
    obj.extract()
}

/// An int behavior value, wrapped to 64 bits like `PyLong_AsUnsignedLongMask`.
pub fn wrap_i64(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v);
    }
    let masked = obj.call_method1(intern!(obj.py(), "__and__"), (u64::MAX,))?;
    Ok(masked.extract::<u64>()? as i64)
}

/// A key prefix (`s#`), empty when left out.
pub fn prefix_bytes(prefix: MaybeArg<'_, '_>, pos: ArgPos) -> PyResult<Vec<u8>> {
    prefix.map_or(Vec::new(), |p| str_or_bytes(p, pos).map(<[u8]>::to_vec))
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
        refs(&self.full)
    }
}

/// Keys made by `join_key` (borrowed or with their prefix) as the core takes them.
pub fn refs<'a>(full: &'a [Cow<'_, [u8]>]) -> Vec<&'a [u8]> {
    full.iter().map(|k| &**k).collect()
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
    for (i, obj) in keys_iter.iter().enumerate() {
        // pylibmc encodes every str key before it checks any (`encode_str_keys`): the keys
        // before this one are encoded already, so on an error only this one and the rest are
        // looked at, and a str among them that cannot be encoded raises first. (Nothing here
        // runs the caller's code, so the one pass is the same as pylibmc's two.)
        let checked = key_obj(obj).and_then(|k| {
            let fk = join_key(prefix, k);
            check_key_len(if check_prefixed { &fk } else { k })?;
            Ok(fk)
        });
        let fk = match checked {
            Ok(fk) => fk,
            Err(e) => return Err(encode_str_keys(&keys_iter[i..]).err().unwrap_or(e)),
        };
        if fk.is_empty() {
            empty.push(obj);
            continue;
        }
        full.push(fk);
        objs.push(obj);
    }
    Ok(MultiKeys { objs, full, empty })
}

/// pylibmc maps str keys to their UTF-8 form before it looks at any key: a str key that cannot
/// be encoded (a lone surrogate) raises UnicodeEncodeError before another key's TypeError.
pub fn encode_str_keys<'a, 'py: 'a>(
    keys: impl IntoIterator<Item = &'a Bound<'py, PyAny>>,
) -> PyResult<()> {
    for obj in keys {
        if let Ok(s) = obj.cast::<PyString>() {
            s.to_str()?;
        }
    }
    Ok(())
}

/// compress_level (`i`, then pylibmc's range check; -1 is zlib's default).
pub fn compress_level(level: MaybeArg<'_, '_>) -> PyResult<i32> {
    let level = level.map_or(-1, c_int)?;
    if !(-1..=9).contains(&level) {
        return Err(PyValueError::new_err(
            "compress_level must be between 0 and 9 inclusive",
        ));
    }
    Ok(level)
}

/// The objects of a sequence as pylibmc takes them (`PySequence_Size` first: a generator has no
/// `len()`, a dict "is not a sequence").
pub fn sized_items<'py>(keys: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if keys.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(format!(
            "{} is not a sequence",
            type_name(keys)
        )));
    }
    let n = keys.len()?;
    let mut v = Vec::with_capacity(n);
    for k in keys.try_iter()? {
        v.push(k?);
    }
    Ok(v)
}

/// `server_key=`: pin the group key a call's keys are placed by (libmemcached's `*_by_key`;
/// `client::pin`) for as long as the returned guard lives. `None` (the default) pins nothing and
/// costs nothing; a str is its UTF-8 bytes, as a key's; anything else is a `TypeError`.
/// A call without one pins "no group" only when a group is pinned already: a call made from
/// inside another (a value's `__reduce__` calling the client) must not inherit its group.
#[inline(always)]
pub fn pin(server_key: Option<&Bound<'_, PyAny>>) -> PyResult<Option<crate::client::pin::Pinned>> {
    use crate::client::pin;
    match server_key {
        None if pin::pinned() => Ok(Some(pin::pin(None))),
        None => Ok(None),
        Some(group) => pin_group(group),
    }
}

/// `pin` of a `server_key` given.
#[inline(never)]
fn pin_group(group: &Bound<'_, PyAny>) -> PyResult<Option<crate::client::pin::Pinned>> {
    if group.is_none() {
        return pin(None);
    }
    let bytes = if let Ok(s) = group.cast::<PyString>() {
        s.to_str()?.as_bytes()
    } else if let Ok(b) = group.cast::<PyBytes>() {
        b.as_bytes()
    } else {
        return Err(PyTypeError::new_err(format!(
            "server_key must be str or bytes, not {}",
            type_name(group)
        )));
    };
    Ok(Some(crate::client::pin::pin(Some(bytes.into()))))
}
