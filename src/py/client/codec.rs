//! The client's value codec: a Python value to (bytes, flags) and back, through pylibmc's native
//! serialization (`py::serde`) or the class's own `serialize`/`deserialize` overrides, with zlib
//! compression as pylibmc applies it. Attached only: no core, no I/O. Uses `py::serde` and
//! `py::errors::CacheMiss`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::PyClient;
use crate::py::errors;
use crate::py::serde;

impl PyClient {
    /// A value to store as (bytes, flags); bytes and str values are borrowed.
    pub(crate) fn encode_value<'a>(
        &self,
        slf: &Bound<'_, Self>,
        val: &'a Bound<'_, PyAny>,
        min_compress_len: u32,
        compress_level: i32,
    ) -> PyResult<(Cow<'a, [u8]>, u32)> {
        let py = slf.py();
        let (data, flags) = if self.user_serialize.load(Ordering::Relaxed) {
            let out = slf.call_method1(intern!(py, "serialize"), (val,))?;
            let (d, f) = serde::check_user_serialized(&out)?;
            (Cow::Owned(d), f)
        } else {
            serde::serialize(py, val, self.pickle_protocol.load(Ordering::Relaxed))?
        };
        serde::maybe_compress(py, data, flags, min_compress_len, compress_level)
    }

    /// Decode a fetched value; `None` when a user `deserialize` raised `CacheMiss`.
    pub(crate) fn decode_item(
        &self,
        slf: &Bound<'_, Self>,
        data: &[u8],
        flags: u32,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let inflated;
        let data: &[u8] = if flags & serde::FLAG_ZLIB != 0 {
            inflated = serde::inflate(py, data)?;
            &inflated
        } else {
            data
        };
        if self.user_deserialize.load(Ordering::Relaxed) {
            match slf.call_method1(intern!(py, "deserialize"), (PyBytes::new(py, data), flags)) {
                Ok(v) => Ok(Some(v.unbind())),
                Err(e) if e.is_instance_of::<errors::CacheMiss>(py) => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            serde::deserialize(py, data, flags).map(Some)
        }
    }
}
