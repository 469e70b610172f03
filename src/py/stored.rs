//! What a stored value is made of, as the binding sees it: the flag bits (pylibmc's types and
//! zlib, fastmc's zstd), and a value's bytes made a Python `bytes` fallibly when large. A leaf:
//! the codec (`serde`), the value policy (`values`) and the structured formats (`structured`)
//! all take these from here.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors::value_allocation_failure;

pub const FLAG_PICKLE: u32 = 1;
pub const FLAG_INTEGER: u32 = 2;
pub const FLAG_LONG: u32 = 4;
pub const FLAG_ZLIB: u32 = 8;
pub const FLAG_TEXT: u32 = 16;
/// A zstd frame (fastmc's; written as `FLAG_ZSTD | FLAG_ZLIB`, read whenever the bit is set).
/// Not pylibmc's bits (0 to 4), nor the signed bit (256, `crate::signing`), nor the bits other
/// clients give zstd in formats of their own (meta-memcache-py: 32; php-memcached: 4 to 7).
pub const FLAG_ZSTD: u32 = 1 << 9;
/// The flag bits that say how a value was serialized (all but ZLIB and ZSTD).
pub const TYPE_MASK: u32 = FLAG_PICKLE | FLAG_INTEGER | FLAG_LONG | FLAG_TEXT;

/// Values from this size on are copied into Python objects fallibly: a failed allocation of a
/// large value (whose size the server chose, up to `max_value_size`) raises `AllocationError`
/// instead of panicking. Smaller ones take PyO3's plain constructors, which cannot report one.
pub const FALLIBLE_FROM: usize = 64 << 10;

/// A value's bytes as a Python `bytes` (see `FALLIBLE_FROM`).
pub fn py_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    if data.len() < FALLIBLE_FROM {
        return Ok(PyBytes::new(py, data));
    }
    PyBytes::new_with(py, data.len(), |b| {
        b.copy_from_slice(data);
        Ok(())
    })
    .map_err(|_| value_allocation_failure(data.len()))
}
