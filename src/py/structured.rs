//! Structured values without pickle (docs/security.md#values-without-pickle): with
//! `serializer="json"` or `"msgpack"` a value that is not bytes, str, int or bool is stored in
//! that format instead of pickled, under a flag bit of its own (1024 JSON, 2048 msgpack), always
//! written with pylibmc's INTEGER and LONG bits beside it (1030, 2054): a type no pylibmc and no
//! earlier fastmc knows, so they raise `Error("unknown memcached key flags 6")` instead of
//! returning the encoded bytes as if they were a `bytes` value.
//!
//! Exact or refused: before anything is encoded, the value is walked and refused with
//! `TypeError` unless what comes back will equal it, type for type (`check`). Reading trusts
//! nothing: the stored bytes are scanned first (`crate::structured_scan`: nesting depth,
//! msgpack's framing, no extension types, no number too long to parse in linear time), then
//! decoded by orjson or the standard library's `json`, or by the `msgpack` package. Every
//! reader decodes both by their flags, whatever its own `serializer`.
//!
//! Uses `py::stored`'s flags and `py::errors`; the encoders are Python's (`fastmc._formats`,
//! `msgpack`), imported on first use.

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use super::errors::{plain_error, refused, value_allocation_failure};
use super::stored::{py_bytes, FLAG_INTEGER, FLAG_LONG, TYPE_MASK};
use crate::structured_scan::{scan_json, scan_msgpack, Scan, MAX_DEPTH};

/// A JSON value (with `MARK`).
pub const FLAG_JSON: u32 = 1 << 10;
/// A msgpack value (with `MARK`).
pub const FLAG_MSGPACK: u32 = 1 << 11;
/// Written beside either bit: a type pylibmc refuses (see the module's header).
const MARK: u32 = FLAG_INTEGER | FLAG_LONG;

static JSON_DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static JSON_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static MSGPACK_PACKB: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static MSGPACK_UNPACKB: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// What a client stores a value in when it is not bytes, str, int or bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serializer {
    /// pylibmc's: pickle (as the pickle mode allows).
    Pickle,
    Json,
    Msgpack,
}

impl Serializer {
    pub fn parse(s: &str) -> PyResult<Serializer> {
        match s {
            "pickle" => Ok(Serializer::Pickle),
            "json" => Ok(Serializer::Json),
            "msgpack" => Ok(Serializer::Msgpack),
            _ => Err(PyValueError::new_err(format!(
                "serializer must be 'pickle', 'json' or 'msgpack', not {s:?}"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Serializer::Pickle => "pickle",
            Serializer::Json => "json",
            Serializer::Msgpack => "msgpack",
        }
    }

    /// The format stored `flags` name, if they name one of these.
    pub fn of_flags(flags: u32) -> Option<Serializer> {
        if flags & (MARK | TYPE_MASK) != MARK {
            return None;
        }
        match flags & (FLAG_JSON | FLAG_MSGPACK) {
            FLAG_JSON => Some(Serializer::Json),
            FLAG_MSGPACK => Some(Serializer::Msgpack),
            _ => None,
        }
    }

    /// Check that the format's module can be imported (at construction: a client that would
    /// fail its first write fails at once).
    pub fn ready(self, py: Python<'_>) -> PyResult<()> {
        match self {
            Serializer::Pickle => Ok(()),
            Serializer::Json => JSON_DUMPS.import(py, FORMATS, "json_dumps").map(drop),
            Serializer::Msgpack => msgpack(py, &MSGPACK_PACKB, "packb").map(drop),
        }
    }
}

/// The module that picks the JSON encoder (orjson or the standard library's).
const FORMATS: &str = "fastmc._formats";

/// `msgpack.<name>`, or the error that says how to install it.
fn msgpack<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.import(py, "msgpack", name).map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyImportError>(py) {
            pyo3::exceptions::PyImportError::new_err(
                "msgpack values need the msgpack package: pip install 'fastmc[msgpack]'",
            )
        } else {
            e
        }
    })
}

/// `v` in the format, with its flags; `TypeError` (nothing encoded) unless it comes back equal
/// and of the same types.
pub fn encode(
    py: Python<'_>,
    v: &Bound<'_, PyAny>,
    format: Serializer,
) -> PyResult<(Vec<u8>, u32)> {
    check(v, format, 0).map_err(|why| {
        PyTypeError::new_err(format!(
            "serializer={:?} cannot store this value exactly: {why}",
            format.name()
        ))
    })?;
    let refuse = |e: PyErr| {
        if e.is_instance_of::<PyMemoryError>(py) {
            return e;
        }
        PyTypeError::new_err(format!(
            "serializer={:?} cannot store this value: {e}",
            format.name()
        ))
    };
    match format {
        Serializer::Json | Serializer::Msgpack => {
            let (encoder, flag) = match format {
                Serializer::Json => (JSON_DUMPS.import(py, FORMATS, "json_dumps")?, FLAG_JSON),
                _ => (msgpack(py, &MSGPACK_PACKB, "packb")?, FLAG_MSGPACK),
            };
            let out = encoder.call1((v,)).map_err(refuse)?;
            let b = out
                .cast::<PyBytes>()
                .map_err(|_| PyTypeError::new_err("the encoder did not return bytes"))?;
            Ok((b.as_bytes().to_vec(), flag | MARK))
        }
        Serializer::Pickle => Err(PyTypeError::new_err("pickles are not structured values")),
    }
}

/// Why `v` would not come back as it is (`depth`: the containers around it), or `Ok`. Looks at
/// exact types only, so no code of the caller's runs and nothing can change under the walk.
fn check(v: &Bound<'_, PyAny>, format: Serializer, depth: usize) -> Result<(), String> {
    if v.is_none() || v.is_exact_instance_of::<PyBool>() || v.is_exact_instance_of::<PyString>() {
        return Ok(());
    }
    if v.is_exact_instance_of::<PyInt>() {
        // msgpack has no more; JSON readers but Python's own (orjson among them) make a float
        // of more.
        if v.extract::<i64>().is_err() && v.extract::<u64>().is_err() {
            return Err("an int outside 64 bits (-2**63 to 2**64-1)".into());
        }
        return Ok(());
    }
    if let Ok(f) = v.cast_exact::<PyFloat>() {
        if !f.value().is_finite() {
            return Err("a float that is NaN or infinite".into());
        }
        return Ok(());
    }
    if v.is_exact_instance_of::<PyBytes>() {
        if format == Serializer::Json {
            return Err("bytes inside a structure (JSON has no bytes: use msgpack)".into());
        }
        return Ok(());
    }
    if depth >= MAX_DEPTH {
        return Err(format!(
            "it nests deeper than {MAX_DEPTH} levels (or holds itself)"
        ));
    }
    if let Ok(list) = v.cast_exact::<PyList>() {
        for item in list.iter() {
            check(&item, format, depth + 1)?;
        }
        return Ok(());
    }
    if let Ok(dict) = v.cast_exact::<PyDict>() {
        for (k, item) in dict.iter() {
            if !k.is_exact_instance_of::<PyString>() {
                return Err(format!(
                    "a dict key of type {} (only str keys come back as they are)",
                    type_name(&k)
                ));
            }
            check(&item, format, depth + 1)?;
        }
        return Ok(());
    }
    let name = type_name(v);
    Err(match name.as_str() {
        "tuple" => "a tuple (it would come back as a list)".into(),
        _ => format!("a value of type {name}"),
    })
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "value".into())
}

/// A stored structured value (already checked and inflated) as Python objects: a value too
/// deep, or whose objects could take more than `max` bytes (the behavior `max_inflate`; `0`: no
/// limit), is refused (`RefusedValueError`); anything malformed is pylibmc's `Error`.
pub fn decode(
    py: Python<'_>,
    data: &[u8],
    format: Serializer,
    key: Option<&[u8]>,
    max: usize,
) -> PyResult<Py<PyAny>> {
    let name = format.name();
    let malformed = |why: &str| plain_error(format!("Failed to decode value: {name}: {why}"));
    let scanned = match format {
        Serializer::Json => scan_json(data),
        _ => scan_msgpack(data),
    };
    match scanned {
        Ok(cost) if max != 0 && cost.bytes() > max as u64 => {
            return Err(refused(
                key,
                &format!(
                    "its {name} could decode to more than max_inflate ({max} bytes) of objects \
                     ({} bytes as fastmc counts them before decoding); raise the behavior \
                     max_inflate to read it",
                    cost.bytes()
                ),
            ))
        }
        Ok(_) => {}
        Err(Scan::TooDeep) => {
            return Err(refused(
                key,
                &format!("its {name} nests deeper than {MAX_DEPTH} levels"),
            ))
        }
        Err(Scan::Malformed(why)) => return Err(malformed(why)),
    }
    let out = match format {
        Serializer::Json => {
            std::str::from_utf8(data).map_err(|_| malformed("not UTF-8"))?;
            let loads = JSON_LOADS.import(py, FORMATS, "json_loads")?;
            loads.call1((py_bytes(py, data)?,))
        }
        _ => {
            let unpackb = msgpack(py, &MSGPACK_UNPACKB, "unpackb")?;
            let kw = PyDict::new(py);
            kw.set_item("raw", false)?;
            kw.set_item("strict_map_key", true)?;
            unpackb.call((py_bytes(py, data)?,), Some(&kw))
        }
    };
    out.map(Bound::unbind).map_err(|e| {
        if e.is_instance_of::<PyMemoryError>(py) {
            value_allocation_failure(data.len())
        } else if e.is_instance_of::<pyo3::exceptions::PyImportError>(py) {
            e
        } else {
            malformed(&e.to_string())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_a_format_only_with_the_mark() {
        assert_eq!(Serializer::of_flags(1030), Some(Serializer::Json));
        assert_eq!(Serializer::of_flags(1030 | 8), Some(Serializer::Json));
        assert_eq!(
            Serializer::of_flags(2054 | 512 | 8),
            Some(Serializer::Msgpack)
        );
        assert_eq!(Serializer::of_flags(1024), None);
        assert_eq!(Serializer::of_flags(1024 | 2048 | 6), None);
        assert_eq!(Serializer::of_flags(1030 | 1), None);
        assert_eq!(Serializer::of_flags(6), None);
    }
}
