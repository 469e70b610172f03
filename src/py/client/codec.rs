//! The client's value codec: a Python value to (bytes, flags) and back, through pylibmc's native
//! serialization (`py::serde`) or the class's own `serialize`/`deserialize` overrides, with zlib
//! compression as pylibmc applies it, or zstd when the client was asked to (`py::values`'s
//! `Compression`). Attached only: no core, no I/O. Uses `py::serde` and `py::errors::CacheMiss`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::state::PyClient;
use crate::py::errors;
use crate::py::serde;
use crate::py::stored;
use crate::py::values::{ValuePolicy, PYLIBMCS};
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
        if let Some(b) = self.stored_as_is(val, min_compress_len) {
            return Ok((Cow::Borrowed(b), 0));
        }
        if self.user_serialize.load(Ordering::Relaxed) {
            let out = slf.call_method1(intern!(py, "serialize"), (val,))?;
            let (d, f) = serde::check_user_serialized(&out)?;
            return self.compress(py, Cow::Owned(d), f, None, min_compress_len, compress_level);
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
        let (data, flags) = self.compress(
            py,
            plain.0,
            plain.1,
            policy.as_deref(),
            min_compress_len,
            compress_level,
        )?;
        Ok(match policy {
            Some(p) => p.seal(key, data, flags),
            None => (data, flags),
        })
    }

    /// The usual value, looked at first: bytes stored as they are (flags 0), with no
    /// `serialize` override and nothing asked to compress them.
    #[inline]
    pub(crate) fn stored_as_is<'a>(
        &self,
        val: &'a Bound<'_, PyAny>,
        min_compress_len: u32,
    ) -> Option<&'a [u8]> {
        let b = val.cast::<PyBytes>().ok()?;
        let plain = min_compress_len == 0
            && !self.user_serialize.load(Ordering::Relaxed)
            && !self.write_zstd.load(Ordering::Relaxed);
        plain.then(|| b.as_bytes())
    }

    /// Whether encoding `val` runs none of the caller's code: no `serialize` override, and a
    /// value stored as its own bytes (bytes, str, int; a pickle calls the caller's
    /// `__reduce__`).
    pub(crate) fn encodes_plainly(&self, val: &Bound<'_, PyAny>) -> bool {
        !self.user_serialize.load(Ordering::Relaxed) && serde::is_plain(val)
    }

    /// Compress as the call and the client say: zlib as pylibmc, or zstd (the policy, `known`
    /// or looked up, only then), whose client threshold applies when the call gives none.
    #[inline(always)]
    fn compress<'a>(
        &self,
        py: Python<'_>,
        data: Cow<'a, [u8]>,
        flags: u32,
        known: Option<&ValuePolicy>,
        min_compress_len: u32,
        compress_level: i32,
    ) -> PyResult<(Cow<'a, [u8]>, u32)> {
        if !self.write_zstd.load(Ordering::Relaxed) {
            // No zlib asked for either: the usual case, returned before any call.
            if min_compress_len == 0 {
                return Ok((data, flags));
            }
            return serde::maybe_compress(py, data, flags, min_compress_len, compress_level);
        }
        let min_len = match min_compress_len {
            0 => self.zstd_min_len.load(Ordering::Relaxed),
            asked => asked,
        };
        if !serde::wants_compression(data.len(), min_len, compress_level) {
            return Ok((data, flags));
        }
        let looked_up;
        let policy = match known {
            Some(p) => p,
            None => {
                looked_up = self.values();
                &looked_up
            }
        };
        match policy.compression.writer() {
            Some(z) => serde::zstd_compress(py, data, flags, z),
            None => serde::maybe_compress(py, data, flags, min_compress_len, compress_level),
        }
    }

    /// Decode the value fetched for `key`; `None` when a user `deserialize` raised `CacheMiss`.
    /// In order: the signature (when the policy checks it), then inflating (zstd or zlib, at
    /// most `max_inflate` bytes), then the type; nothing is decoded before its signature is
    /// checked.
    pub(crate) fn decode_item(
        &self,
        slf: &Bound<'_, Self>,
        key: &[u8],
        data: &[u8],
        flags: u32,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let user = self.user_deserialize.load(Ordering::Relaxed);
        let packed = stored::FLAG_ZLIB | stored::FLAG_ZSTD;
        let max = self.max_inflate.load(Ordering::Relaxed);
        // Plain values (no pickle, no signature, no compression) need neither the policy nor a
        // copy.
        if !user && flags & (stored::FLAG_PICKLE | packed | FLAG_SIGNED) == 0 {
            return serde::deserialize(py, data, flags, &PYLIBMCS, Some(key), false, max).map(Some);
        }
        let zstd = flags & stored::FLAG_ZSTD != 0;
        // The client's policy only where it decides: a pickle, a signed value, a zstd value
        // (its dictionary).
        let decides = !user && flags & (stored::FLAG_PICKLE | FLAG_SIGNED) != 0;
        let own = (decides || zstd).then(|| self.values());
        let policy = own.as_deref().unwrap_or(&PYLIBMCS);
        // A class that decodes for itself owns the signed bit too (it may use it otherwise).
        let signed = decides && policy.is_signed(flags);
        let data = if signed {
            policy.open(key, data, flags)?
        } else {
            data
        };
        let (inflated, unzstd);
        let data: &[u8] = if zstd {
            let dict = policy.compression.dictionary();
            unzstd = serde::unzstd(py, Some(key), data, max, dict)?;
            &unzstd
        } else if flags & stored::FLAG_ZLIB != 0 {
            inflated = serde::inflate(py, Some(key), data, max)?;
            inflated.as_bytes()
        } else {
            data
        };
        if user {
            let data = stored::py_bytes(py, data)?;
            match slf.call_method1(intern!(py, "deserialize"), (data, flags)) {
                Ok(v) => Ok(Some(v.unbind())),
                Err(e) if e.is_instance_of::<errors::CacheMiss>(py) => Ok(None),
                Err(e) => Err(e),
            }
        } else {
            serde::deserialize(py, data, flags, policy, Some(key), signed, max).map(Some)
        }
    }
}
