//! The client's value codec: a Python value to (bytes, flags) and back, through pylibmc's native
//! serialization (`py::serde`) or the class's own `serialize`/`deserialize` overrides, with zlib
//! compression as pylibmc applies it. Attached only: no core, no I/O. Uses `py::serde` and
//! `py::errors::CacheMiss`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use pyo3::intern;
use pyo3::prelude::*;

use super::PyClient;
use crate::py::errors;
use crate::py::serde;
use crate::py::values::PYLIBMCS;
use crate::signing::FLAG_SIGNED;

impl PyClient {
    /// A value to store under `key` as (bytes, flags); bytes and str values are borrowed. A
    /// pickle is signed last (over the compressed bytes) when the value policy says so.
    pub(crate) fn encode_value<'a>(
        &self,
        slf: &Bound<'_, Self>,
        key: &[u8],
        val: &'a Bound<'_, PyAny>,
        min_compress_len: u32,
        compress_level: i32,
    ) -> PyResult<(Cow<'a, [u8]>, u32)> {
        let py = slf.py();
        if self.user_serialize.load(Ordering::Relaxed) {
            let out = slf.call_method1(intern!(py, "serialize"), (val,))?;
            let (d, f) = serde::check_user_serialized(&out)?;
            return serde::maybe_compress(py, Cow::Owned(d), f, min_compress_len, compress_level);
        }
        // The policy is looked up only for a value that needs pickle (it may sign it).
        let (plain, policy) = match serde::serialize_plain(val)? {
            Some(plain) => (plain, None),
            None => {
                let policy = self.values();
                let protocol = self.pickle_protocol.load(Ordering::Relaxed);
                let (data, flags) = policy.pickle(py, val, protocol)?;
                ((Cow::Owned(data), flags), Some(policy))
            }
        };
        let (data, flags) =
            serde::maybe_compress(py, plain.0, plain.1, min_compress_len, compress_level)?;
        Ok(match policy {
            Some(p) => p.seal(key, data, flags),
            None => (data, flags),
        })
    }

    /// Decode the value fetched for `key`; `None` when a user `deserialize` raised `CacheMiss`.
    /// In order: the signature (when the policy checks it), then inflating (at most
    /// `max_inflate` bytes), then the type; nothing is decoded before its signature is checked.
    pub(crate) fn decode_item(
        &self,
        slf: &Bound<'_, Self>,
        key: &[u8],
        data: &[u8],
        flags: u32,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let user = self.user_deserialize.load(Ordering::Relaxed);
        // Plain values (no pickle, no signature, no zlib) need neither the policy nor a copy.
        if !user && flags & (serde::FLAG_PICKLE | serde::FLAG_ZLIB | FLAG_SIGNED) == 0 {
            return serde::deserialize(py, data, flags, &PYLIBMCS, None, false).map(Some);
        }
        // The client's policy only where it decides: a pickle, or a signed value.
        let own = (!user && flags & (serde::FLAG_PICKLE | FLAG_SIGNED) != 0).then(|| self.values());
        let policy = own.as_deref().unwrap_or(&PYLIBMCS);
        // A class that decodes for itself owns the signed bit too (it may use it otherwise).
        let signed = own.is_some() && policy.is_signed(flags);
        let data = if signed {
            policy.open(key, data, flags)?
        } else {
            data
        };
        let inflated;
        let data: &[u8] = if flags & serde::FLAG_ZLIB != 0 {
            let max = self.max_inflate.load(Ordering::Relaxed);
            inflated = serde::inflate(py, Some(key), data, max)?;
            inflated.as_bytes()
        } else {
            data
        };
        if user {
            let data = serde::py_bytes(py, data)?;
            match slf.call_method1(intern!(py, "deserialize"), (data, flags)) {
                Ok(v) => Ok(Some(v.unbind())),
                Err(e) if e.is_instance_of::<errors::CacheMiss>(py) => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            serde::deserialize(py, data, flags, policy, Some(key), signed).map(Some)
        }
    }
}
