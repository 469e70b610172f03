//! Python values <-> (bytes, flags), bit-compatible with pylibmc 1.6.3: bytes 0, str 16 (UTF-8),
//! bool 2 (`b"1"`/`b"0"`), other ints 4 (decimal text), everything else pickled (1); zlib (8)
//! through CPython's own `zlib`, so compressed bytes are identical to pylibmc's. zstd (opt-in,
//! `crate::compress`) is fastmc's own bit, 512, always written with the zlib bit beside it (520),
//! so that pylibmc and every reader that knows only zlib fails to inflate it and raises, instead
//! of returning the compressed bytes of a `bytes` value as if they were the value
//! (docs/features.md#compression-zstd).

use std::borrow::Cow;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use super::errors::{plain_error, refused, value_allocation_failure};
use super::io::released;
use super::stored::{
    py_bytes, FALLIBLE_FROM, FLAG_INTEGER, FLAG_LONG, FLAG_PICKLE, FLAG_TEXT, FLAG_ZLIB, FLAG_ZSTD,
    TYPE_MASK,
};
use super::structured::{self, Serializer};
use super::values::ValuePolicy;
use crate::compress::{self, Dictionary, Failure, Zstd};

static ZLIB_COMPRESS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static ZLIB_DECOMPRESSOBJ: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// pylibmc's native serialization (no compression); bytes and str values are borrowed. What
/// needs pickle goes through the client's value policy.
pub fn serialize<'a>(
    py: Python<'_>,
    v: &'a Bound<'_, PyAny>,
    policy: &ValuePolicy,
    pickle_protocol: i64,
) -> PyResult<(Cow<'a, [u8]>, u32)> {
    match serialize_plain(v)? {
        Some(plain) => Ok(plain),
        None => {
            let (data, flags) = policy.pickle(py, v, pickle_protocol)?;
            Ok((Cow::Owned(data), flags))
        }
    }
}

/// Whether `serialize_plain` takes `v` without running the caller's code: bytes, str, bool or
/// an exact int (a subclass's `__str__` may be the caller's).
pub fn is_plain(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyBytes>()
        || v.is_instance_of::<PyString>()
        || v.is_exact_instance_of::<PyInt>()
        || v.is_instance_of::<PyBool>()
}

/// The values pylibmc stores without pickle (bytes, str, bool, int); `None` for the others.
pub fn serialize_plain<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<Option<(Cow<'a, [u8]>, u32)>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Some((Cow::Borrowed(b.as_bytes()), 0)));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Some((Cow::Borrowed(s.to_str()?.as_bytes()), FLAG_TEXT)));
    }
    if v.is_instance_of::<PyBool>() {
        let t = v.is_truthy()?;
        let digit = if t { &b"1"[..] } else { &b"0"[..] };
        return Ok(Some((Cow::Borrowed(digit), FLAG_INTEGER)));
    }
    if v.is_instance_of::<PyInt>() {
        if let Ok(n) = v.extract::<i64>() {
            return Ok(Some((Cow::Owned(n.to_string().into_bytes()), FLAG_LONG)));
        }
        let s = v.str()?;
        return Ok(Some((
            Cow::Owned(s.to_str()?.as_bytes().to_vec()),
            FLAG_LONG,
        )));
    }
    Ok(None)
}

/// Check and convert what a user `serialize()` override returned.
pub fn check_user_serialized(out: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, u32)> {
    let bad = || PyValueError::new_err("serialize() must return (bytes, flags)");
    let t = out.cast::<PyTuple>().map_err(|_| bad())?;
    if t.len() < 2 {
        return Err(bad());
    }
    let data = t.get_item(0)?;
    let flags = t.get_item(1)?;
    if !flags.is_instance_of::<PyInt>() {
        return Err(bad());
    }
    let data = match data.cast::<PyBytes>() {
        Ok(b) => b.as_bytes().to_vec(),
        Err(_) if data.is_instance_of::<PyString>() => {
            return Err(PyTypeError::new_err("expected bytes, str found"))
        }
        Err(_) => {
            let tn = data.get_type().name()?.to_string();
            return Err(PyTypeError::new_err(format!("expected bytes, {tn} found")));
        }
    };
    // PyLong_AsLong, then truncated to 32 bits.
    let f: i64 = flags
        .extract()
        .map_err(|_| PyOverflowError::new_err("Python int too large to convert to C long"))?;
    Ok((data, f as u32))
}

/// A value's text as a Python `str` (see `FALLIBLE_FROM`), decoded straight from the fetched
/// bytes: no `bytes` object in between, which would hold a third copy at the peak.
fn py_str<'py>(py: Python<'py>, s: &str) -> PyResult<Bound<'py, PyAny>> {
    if s.len() < FALLIBLE_FROM {
        return Ok(PyString::new(py, s).into_any());
    }
    match PyString::from_bytes(py, s.as_bytes()) {
        Ok(text) => Ok(text.into_any()),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) => {
            Err(value_allocation_failure(s.len()))
        }
        Err(e) => Err(e),
    }
}

/// Compress when pylibmc would: a non-zero `min_compress_len` the data reaches, a non-zero
/// level, and only if the result is strictly shorter.
pub fn maybe_compress<'a>(
    py: Python<'_>,
    data: Cow<'a, [u8]>,
    flags: u32,
    min_len: u32,
    level: i32,
) -> PyResult<(Cow<'a, [u8]>, u32)> {
    if !wants_compression(data.len(), min_len, level) {
        return Ok((data, flags));
    }
    let compress = ZLIB_COMPRESS.import(py, "zlib", "compress")?;
    let out = compress.call1((PyBytes::new(py, &data), level))?;
    let z = out
        .cast::<PyBytes>()
        .map_err(|_| PyTypeError::new_err("zlib.compress did not return bytes"))?;
    let z = z.as_bytes();
    if z.len() < data.len() {
        Ok((Cow::Owned(z.to_vec()), flags | FLAG_ZLIB))
    } else {
        Ok((data, flags))
    }
}

/// Whether a value of `len` bytes is compressed: a non-zero `min_len` it reaches and a non-zero
/// level (pylibmc's rule for zlib, which zstd follows too).
pub fn wants_compression(len: usize, min_len: u32, level: i32) -> bool {
    min_len != 0 && level != 0 && len as u64 >= min_len as u64
}

/// Compress with zstd, when the result is strictly shorter; the flags get `FLAG_ZSTD` and
/// `FLAG_ZLIB` (see the module's header). Large values are compressed detached.
pub fn zstd_compress<'a>(
    py: Python<'_>,
    data: Cow<'a, [u8]>,
    flags: u32,
    zstd: &Zstd,
) -> PyResult<(Cow<'a, [u8]>, u32)> {
    let out = if data.len() >= FALLIBLE_FROM {
        released(py, || zstd.compress(&data))
    } else {
        zstd.compress(&data)
    };
    let out = out.map_err(|f| match f {
        Failure::Alloc(n) => value_allocation_failure(n),
        other => plain_error(format!("zstd could not compress the value: {other:?}")),
    })?;
    match out {
        Some(z) => Ok((Cow::Owned(z), flags | FLAG_ZSTD | FLAG_ZLIB)),
        None => Ok((data, flags)),
    }
}

/// Decompress a zstd value to at most `max` bytes, with the client's dictionary when its frame
/// names one. Large values are decompressed detached.
pub fn unzstd(
    py: Python<'_>,
    key: Option<&[u8]>,
    data: &[u8],
    max: usize,
    dict: Option<&Dictionary>,
) -> PyResult<Vec<u8>> {
    let out = if data.len() >= FALLIBLE_FROM {
        released(py, || compress::decompress(data, max, dict))
    } else {
        compress::decompress(data, max, dict)
    };
    out.map_err(|f| zstd_failure(key, f, max))
}

/// A zstd failure as pylibmc's classes say it: too large is refused (`RefusedValueError`, as
/// zlib's), anything that cannot be decoded is pylibmc's decompression `Error`.
fn zstd_failure(key: Option<&[u8]>, f: Failure, max: usize) -> PyErr {
    match f {
        Failure::TooLarge { .. } => inflate_refused(key, max),
        Failure::Window => refused(
            key,
            &format!(
                "its zstd frame asks for a window larger than max_inflate ({max} bytes); raise \
                 the behavior max_inflate to read it"
            ),
        ),
        Failure::Alloc(n) => value_allocation_failure(n),
        Failure::Corrupt(why) => plain_error(format!("Failed to decompress value: zstd: {why}")),
        Failure::Dictionary { needed, have } => plain_error(match have {
            None => format!(
                "Failed to decompress value: zstd: it needs dictionary {needed}, and this \
                 client has no zstd_dict"
            ),
            Some(id) => format!(
                "Failed to decompress value: zstd: it needs dictionary {needed}, and this \
                 client's zstd_dict is dictionary {id}"
            ),
        }),
    }
}

/// Inflate a zlib-container value to at most `max` bytes: a value that would inflate further
/// raises `RefusedValueError` once `max + 1` bytes are out, so a small value cannot make a huge
/// one (behavior `max_inflate`). Anything else wrong is pylibmc's error.
pub fn inflate<'py>(
    py: Python<'py>,
    key: Option<&[u8]>,
    data: &[u8],
    max: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let failed = || plain_error("Failed to decompress value: inflate");
    let d = ZLIB_DECOMPRESSOBJ
        .import(py, "zlib", "decompressobj")?
        .call0()?;
    // max_length 0 is no limit (behavior max_inflate 0).
    let limit = if max >= isize::MAX as usize {
        0
    } else {
        max + 1
    };
    let out = d
        .call_method1("decompress", (py_bytes(py, data)?, limit))
        .map_err(|e| {
            if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) {
                value_allocation_failure(max)
            } else {
                failed()
            }
        })?;
    let out = out.cast_into::<PyBytes>().map_err(|_| failed())?;
    if out.as_bytes().len() > max {
        return Err(inflate_refused(key, max));
    }
    // A stream that did not end is truncated, as zlib.decompress would say.
    if !d.getattr("eof")?.is_truthy()? {
        return Err(failed());
    }
    Ok(out)
}

fn inflate_refused(key: Option<&[u8]>, max: usize) -> PyErr {
    refused(
        key,
        &format!(
            "it inflates to more than max_inflate ({max} bytes); raise the behavior \
             max_inflate to read it"
        ),
    )
}

/// PyLong_FromString's error for C bytes that are not ASCII (no digit is): ValueError with the
/// first 200 bytes as a str, or the UnicodeDecodeError of decoding them (pylibmc's message for
/// an int value with other bytes).
fn not_an_int(py: Python<'_>, data: &[u8]) -> PyErr {
    let head = PyBytes::new(py, &data[..data.len().min(200)]);
    let repr = head
        .call_method1("decode", ("utf-8",))
        .and_then(|text| Ok(text.repr()?.to_str()?.chars().take(200).collect::<String>()));
    match repr {
        Ok(r) => PyValueError::new_err(format!("invalid literal for int() with base 10: {r}")),
        Err(e) => e,
    }
}

fn parse_small_int(data: &[u8]) -> Option<i64> {
    let (neg, digits) = match data.first() {
        Some(b'-') => (true, &data[1..]),
        _ => (false, data),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        n = n * 10 + (d - b'0') as i64;
    }
    Some(if neg { -n } else { n })
}

/// pylibmc's native deserialization of already-inflated data; the ZLIB and ZSTD bits are
/// ignored. A pickle goes through the client's value policy (`signed`: its signature was
/// checked); a JSON or msgpack value is decoded whatever the policy's serializer, into at most
/// `max` bytes of objects (`py::structured`).
pub fn deserialize(
    py: Python<'_>,
    data: &[u8],
    flags: u32,
    policy: &ValuePolicy,
    key: Option<&[u8]>,
    signed: bool,
    max: usize,
) -> PyResult<Py<PyAny>> {
    if let Some(format) = Serializer::of_flags(flags) {
        return structured::decode(py, data, format, key, max);
    }
    match flags & TYPE_MASK {
        0 => py_bytes(py, data)?.into_py_any(py),
        FLAG_TEXT => match std::str::from_utf8(data) {
            Ok(s) => py_str(py, s)?.into_py_any(py),
            // Let CPython build the exact UnicodeDecodeError.
            Err(_) => PyBytes::new(py, data)
                .call_method1("decode", ("utf-8",))
                .map(Bound::unbind),
        },
        FLAG_INTEGER | FLAG_LONG => {
            if let Some(n) = parse_small_int(data) {
                return n.into_py_any(py);
            }
            // PyLong_FromString stops at a NUL; int() accepts the same spaces and underscores.
            let cut = &data[..memchr::memchr(0, data).unwrap_or(data.len())];
            if cut.is_ascii() {
                let s = PyString::new(py, &String::from_utf8_lossy(cut));
                return py.get_type::<PyInt>().call1((s,)).map(Bound::unbind);
            }
            Err(not_an_int(py, cut))
        }
        FLAG_PICKLE => policy.unpickle(py, key, data, signed),
        other => Err(plain_error(format!("unknown memcached key flags {other}"))),
    }
}
