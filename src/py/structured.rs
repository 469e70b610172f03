//! Structured values without pickle (docs/security.md#values-without-pickle): with
//! `serializer="json"` or `"msgpack"` a value that is not bytes, str, int or bool is stored in
//! that format instead of pickled, under a flag bit of its own (1024 JSON, 2048 msgpack), always
//! written with pylibmc's INTEGER and LONG bits beside it (1030, 2054): a type no pylibmc and no
//! earlier fastmc knows, so they raise `Error("unknown memcached key flags 6")` instead of
//! returning the encoded bytes as if they were a `bytes` value.
//!
//! Exact or refused: before anything is encoded, the value is walked and refused with
//! `TypeError` unless what comes back will equal it, type for type (`check`). Reading trusts
//! nothing: the stored bytes are scanned first (`scan_json`, `scan_msgpack`: nesting depth,
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

/// A JSON value (with `MARK`).
pub const FLAG_JSON: u32 = 1 << 10;
/// A msgpack value (with `MARK`).
pub const FLAG_MSGPACK: u32 = 1 << 11;
/// Written beside either bit: a type pylibmc refuses (see the module's header).
const MARK: u32 = FLAG_INTEGER | FLAG_LONG;
/// How deep a structured value may nest (a list or dict is one level), written or read: deep
/// enough for any document, shallow enough that decoding never nears Python's recursion limit.
pub const MAX_DEPTH: usize = 100;
/// The longest run of digits a JSON value may hold: CPython's default `int` string limit
/// (`sys.set_int_max_str_digits`), which older versions lack (parsing more is quadratic).
const MAX_DIGITS: usize = 4300;

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

/// What a scan of stored bytes found wrong.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    TooDeep,
    Malformed(&'static str),
}

/// What decoding may cost, counted by the scans: generous per element, so that the objects a
/// value becomes (and the text it is parsed from) take no more than `bytes()`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Lists and dicts (a dict with its keys table, a list with its slots' first allocation).
    containers: u64,
    /// Every other element, and each dict entry and list slot.
    elements: u64,
    /// Bytes of text and binary payloads, and of the copy a decoder parses.
    payload: u64,
}

impl Cost {
    /// Bytes of Python objects, at most.
    pub fn bytes(&self) -> u64 {
        self.containers * 240 + self.elements * 80 + self.payload * 4
    }
}

/// Check JSON text's nesting (outside strings) and its runs of digits before it is parsed, and
/// count what parsing it may cost: each `,` and `:` separates one element more.
pub fn scan_json(data: &[u8]) -> Result<Cost, Scan> {
    let (mut depth, mut digits) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut cost = Cost {
        elements: 1,
        // The text as a str (up to 4 bytes a character), and its strings, as much again.
        payload: 2 * data.len() as u64,
        ..Cost::default()
    };
    for &b in data {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        if b.is_ascii_digit() {
            digits += 1;
            if digits > MAX_DIGITS {
                return Err(Scan::Malformed("a number of more than 4300 digits"));
            }
            continue;
        }
        digits = 0;
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Scan::TooDeep);
                }
                cost.containers += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => cost.elements += 1,
            _ => {}
        }
    }
    Ok(cost)
}

/// Walk msgpack's framing: exactly one object, every length within the bytes, no extension
/// type (fastmc writes none), nesting within `MAX_DEPTH`; and count what decoding it may cost.
/// Linear in the bytes whatever the lengths claim: each element takes at least one byte.
pub fn scan_msgpack(data: &[u8]) -> Result<Cost, Scan> {
    const SHORT: Scan = Scan::Malformed("truncated");
    /// What follows a marker: payload bytes to skip, or a container of so many elements.
    enum Next {
        Skip(u64),
        Items(u64),
    }
    use Next::{Items, Skip};
    // A big-endian length of `n` bytes at `at`, which moves past it.
    let read = |at: &mut usize, n: usize| -> Result<u64, Scan> {
        let s = data.get(*at..*at + n).ok_or(SHORT)?;
        *at += n;
        Ok(s.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
    };
    // Elements still owed by each open container, innermost last.
    let mut open: Vec<u64> = Vec::new();
    let mut at = 0usize;
    // The bytes as a Python object for the decoder, and each payload (a str up to 4 bytes a
    // character) counted at the element.
    let mut cost = Cost {
        payload: data.len() as u64,
        ..Cost::default()
    };
    loop {
        let &b = data.get(at).ok_or(SHORT)?;
        at += 1;
        let next = match b {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => Skip(0),
            0x80..=0x8f => Items(u64::from(b & 0x0f) * 2),
            0x90..=0x9f => Items(u64::from(b & 0x0f)),
            0xa0..=0xbf => Skip(u64::from(b & 0x1f)),
            0xc4 | 0xd9 => Skip(read(&mut at, 1)?),
            0xc5 | 0xda => Skip(read(&mut at, 2)?),
            0xc6 | 0xdb => Skip(read(&mut at, 4)?),
            0xcc | 0xd0 => Skip(1),
            0xcd | 0xd1 => Skip(2),
            0xca | 0xce | 0xd2 => Skip(4),
            0xcb | 0xcf | 0xd3 => Skip(8),
            0xdc => Items(read(&mut at, 2)?),
            0xdd => Items(read(&mut at, 4)?),
            0xde => Items(read(&mut at, 2)? * 2),
            0xdf => Items(read(&mut at, 4)? * 2),
            0xc7..=0xc9 | 0xd4..=0xd8 => return Err(Scan::Malformed("an extension type")),
            0xc1 => return Err(Scan::Malformed("the unused marker 0xc1")),
        };
        let remaining = (data.len() - at) as u64;
        cost.elements += 1;
        match next {
            Skip(n) if n > remaining => return Err(SHORT),
            Skip(n) => {
                at += n as usize;
                cost.payload += n;
            }
            // Each element takes a byte at least.
            Items(n) if n > remaining => return Err(SHORT),
            Items(_) if open.len() >= MAX_DEPTH => return Err(Scan::TooDeep),
            Items(n) if n > 0 => {
                cost.containers += 1;
                open.push(n);
                continue;
            }
            Items(_) => cost.containers += 1,
        }
        // One element done: close every container it completes.
        loop {
            match open.last_mut() {
                None if at == data.len() => return Ok(cost),
                None => return Err(Scan::Malformed("bytes after the value")),
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_and_digits() {
        assert!(scan_json(b"[[{\"a\":[1]}]]").is_ok());
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert_eq!(scan_json(deep.as_bytes()), Err(Scan::TooDeep));
        let fine = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(scan_json(fine.as_bytes()).is_ok());
        // Brackets and quotes inside strings are text.
        let quoted = format!("[\"{}\\\"{}\"]", "[".repeat(500), "{".repeat(500));
        assert!(scan_json(quoted.as_bytes()).is_ok());
        let long = "9".repeat(MAX_DIGITS + 1);
        assert!(matches!(
            scan_json(long.as_bytes()),
            Err(Scan::Malformed(_))
        ));
        assert!(scan_json("1".repeat(MAX_DIGITS).as_bytes()).is_ok());
    }

    #[test]
    fn msgpack_framing() {
        // {"a": [1, 2.5, b"x", None]}
        let ok = b"\x81\xa1a\x94\x01\xcb\x40\x04\x00\x00\x00\x00\x00\x00\xc4\x01x\xc0";
        let cost = scan_msgpack(ok).unwrap();
        // A map, a list, four scalars, the map's key; a, x and the float's and int's bytes.
        assert_eq!((cost.containers, cost.elements), (2, 7));
        assert!(scan_msgpack(b"\x90").is_ok());
        assert!(scan_msgpack(b"\x80").is_ok());
        for bad in [
            &b""[..],
            b"\x92\x01",
            b"\xdd\xff\xff\xff\xff\x01",
            b"\xc4\x05ab",
            b"\x01\x02",
            b"\xd4\x00\x00",
            b"\xc1",
            b"\xdb\x00\x00",
        ] {
            assert!(
                matches!(scan_msgpack(bad), Err(Scan::Malformed(_))),
                "{bad:?}"
            );
        }
        let mut deep = vec![0x91u8; MAX_DEPTH];
        deep.push(0x90);
        assert_eq!(scan_msgpack(&deep), Err(Scan::TooDeep));
        let mut fine = vec![0x91u8; MAX_DEPTH - 1];
        fine.push(0x90);
        assert!(scan_msgpack(&fine).is_ok());
    }

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
