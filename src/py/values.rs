//! The value policy: what a client's own codec does with pickles (docs/security.md). pylibmc
//! unpickles whatever the cache holds, so anyone who can write to the cache (or pose as a
//! server) runs code in every reader; a client may instead refuse pickles, accept only signed
//! ones (`signing`), or unpickle through an allow list. The default is pylibmc's. The policy
//! also says how values are compressed: zlib (pylibmc's) or zstd (`compress`), opt-in.
//!
//! The policy is the native codec's: a subclass that overrides `serialize`/`deserialize` owns its
//! format, except that `super().serialize()`/`super().deserialize()` apply the pickle mode and
//! the allow list too. Uses `signing`, `compress`, `py::serde`'s flags and `py::errors`.

use std::borrow::Cow;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyBytes;

use super::errors::refused;
use super::stored::{py_bytes, FLAG_PICKLE, TYPE_MASK};
use super::structured::{self, Serializer};
use crate::compress::{Dictionary, Zstd};
use crate::pickle_scan;
use crate::signing::{Refusal, Signer, FLAG_SIGNED};

static PICKLE_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static PICKLE_DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// What the codec does with values that need pickle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PickleMode {
    /// pylibmc's: pickle what is not bytes, str or int; unpickle what carries the pickle flag.
    Allow,
    /// Never pickle (storing such a value raises `TypeError`), never unpickle (reading one
    /// raises `RefusedValueError`).
    Refuse,
    /// Pickles are written signed and only signed ones are read (unsigned ones too while
    /// `accept_unsigned`, for a migration).
    Signed,
}

impl PickleMode {
    pub fn parse(s: &str) -> PyResult<PickleMode> {
        match s {
            "allow" => Ok(PickleMode::Allow),
            "refuse" => Ok(PickleMode::Refuse),
            "signed" => Ok(PickleMode::Signed),
            _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "pickle must be 'allow', 'refuse' or 'signed', not {s:?}"
            ))),
        }
    }
}

/// A client's value policy, fixed at construction (and copied by `clone`).
#[derive(Debug)]
pub struct ValuePolicy {
    pub mode: PickleMode,
    /// With keys, the `FLAG_SIGNED` bit means a signed value; without, it is ignored (pylibmc).
    pub signer: Option<Signer>,
    pub accept_unsigned: bool,
    /// The allow-list unpickler's `loads` (made by `fastmc.values`); `None`: `pickle.loads`.
    pub loads: Option<Py<PyAny>>,
    /// How values are compressed and read back (see `Compression`).
    pub compression: Compression,
    /// What stores a value that is not bytes, str, int or bool: pickle, or a structured format
    /// (`py::structured`), which every policy reads.
    pub serializer: Serializer,
}

/// How a client compresses: zlib, pylibmc's, unless zstd was asked for. Every client reads zstd
/// values; `zstd` holds the level and the dictionary (a client writing zlib may hold one to read
/// zstd values made with it, while a fleet moves).
#[derive(Debug, Clone, Default)]
pub struct Compression {
    /// Write zstd instead of zlib.
    pub write_zstd: bool,
    /// With `write_zstd`: values of at least this many bytes are compressed even when the call
    /// asks for nothing (`min_compress_len` 0); 0: only when it asks, as pylibmc.
    pub min_len: u32,
    pub zstd: Option<Arc<Zstd>>,
}

impl Compression {
    pub fn parse(
        name: &str,
        level: i32,
        dict: Option<&[u8]>,
        min_len: u32,
    ) -> PyResult<Compression> {
        let write_zstd = match name {
            "zlib" => false,
            "zstd" => true,
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "compression must be 'zlib' or 'zstd', not {name:?}"
                )))
            }
        };
        let zstd = if write_zstd || dict.is_some() {
            let z = Zstd::new(level, dict).map_err(pyo3::exceptions::PyValueError::new_err)?;
            Some(Arc::new(z))
        } else {
            None
        };
        Ok(Compression {
            write_zstd,
            min_len: if write_zstd { min_len } else { 0 },
            zstd,
        })
    }

    /// The zstd settings values are written with, when the client writes zstd.
    pub fn writer(&self) -> Option<&Zstd> {
        self.zstd.as_deref().filter(|_| self.write_zstd)
    }

    /// The dictionary zstd values are read with.
    pub fn dictionary(&self) -> Option<&Dictionary> {
        self.zstd.as_deref().and_then(Zstd::dictionary)
    }
}

impl Default for ValuePolicy {
    fn default() -> Self {
        PYLIBMCS
    }
}

/// pylibmc's policy, the default: also what decodes a value that is no pickle.
pub const PYLIBMCS: ValuePolicy = ValuePolicy {
    mode: PickleMode::Allow,
    signer: None,
    accept_unsigned: false,
    loads: None,
    compression: Compression {
        write_zstd: false,
        min_len: 0,
        zstd: None,
    },
    serializer: Serializer::Pickle,
};

impl ValuePolicy {
    /// Check the combination the user asked for.
    pub fn new(
        mode: PickleMode,
        signing_keys: Vec<Vec<u8>>,
        accept_unsigned: bool,
        loads: Option<Py<PyAny>>,
        compression: Compression,
        serializer: Serializer,
    ) -> PyResult<ValuePolicy> {
        let signer = if signing_keys.is_empty() {
            None
        } else {
            Some(Signer::new(&signing_keys).map_err(pyo3::exceptions::PyValueError::new_err)?)
        };
        if mode == PickleMode::Signed && signer.is_none() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "pickle='signed' needs signing_keys",
            ));
        }
        if accept_unsigned && mode != PickleMode::Signed {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "accept_unsigned_pickles goes with pickle='signed'",
            ));
        }
        Ok(ValuePolicy {
            mode,
            signer,
            accept_unsigned,
            loads,
            compression,
            serializer,
        })
    }

    /// A copy for a cloned client.
    pub fn copy(&self, py: Python<'_>) -> ValuePolicy {
        ValuePolicy {
            mode: self.mode,
            signer: self.signer.clone(),
            accept_unsigned: self.accept_unsigned,
            loads: self.loads.as_ref().map(|l| l.clone_ref(py)),
            compression: self.compression.clone(),
            serializer: self.serializer,
        }
    }

    /// Encode a value that is not bytes, str or int (the native codec's last resort): in the
    /// client's structured format, or pickled as the pickle mode allows.
    pub fn pickle(
        &self,
        py: Python<'_>,
        v: &Bound<'_, PyAny>,
        protocol: i64,
    ) -> PyResult<(Vec<u8>, u32)> {
        if self.serializer != Serializer::Pickle {
            return structured::encode(py, v, self.serializer);
        }
        if self.mode == PickleMode::Refuse {
            let tn = v.get_type().name()?.to_string();
            return Err(PyTypeError::new_err(format!(
                "storing a {tn} needs pickle, which this client refuses (pickle='refuse'): store \
                 bytes, str or int, use serializer='json' or 'msgpack', or serialize it first"
            )));
        }
        let out = PICKLE_DUMPS
            .import(py, "pickle", "dumps")?
            .call1((v, protocol))?;
        let b = out
            .cast::<PyBytes>()
            .map_err(|_| PyTypeError::new_err("pickle.dumps did not return bytes"))?;
        Ok((b.as_bytes().to_vec(), FLAG_PICKLE))
    }

    /// The stored form of an encoded value: signed when the mode says so and it is a pickle.
    pub fn seal<'a>(&self, key: &[u8], data: Cow<'a, [u8]>, flags: u32) -> (Cow<'a, [u8]>, u32) {
        match &self.signer {
            Some(s) if self.mode == PickleMode::Signed && flags & TYPE_MASK == FLAG_PICKLE => {
                let flags = flags | FLAG_SIGNED;
                (Cow::Owned(s.sign(key, flags, &data)), flags)
            }
            _ => (data, flags),
        }
    }

    /// Whether stored `flags` name a signed value this policy checks.
    pub fn is_signed(&self, flags: u32) -> bool {
        self.signer.is_some() && flags & FLAG_SIGNED != 0
    }

    /// A signed value's body, checked before anything else is done with it.
    pub fn open<'a>(&self, key: &[u8], data: &'a [u8], flags: u32) -> PyResult<&'a [u8]> {
        let Some(s) = &self.signer else {
            return Ok(data);
        };
        s.verify(key, flags, data).map_err(|r| {
            refused(
                Some(key),
                match r {
                    Refusal::Malformed => "it carries the signed flag but is not a signed value",
                    Refusal::BadSignature => "its signature does not match any signing key",
                },
            )
        })
    }

    /// Unpickle (the pickle flag's data), as the mode and the allow list say. `signed`: the
    /// value's signature was checked.
    pub fn unpickle(
        &self,
        py: Python<'_>,
        key: Option<&[u8]>,
        data: &[u8],
        signed: bool,
    ) -> PyResult<Py<PyAny>> {
        match self.mode {
            PickleMode::Refuse => {
                return Err(refused(
                    key,
                    "it is a pickle and this client refuses pickles",
                ))
            }
            PickleMode::Signed if !signed && !self.accept_unsigned => {
                return Err(refused(
                    key,
                    "it is an unsigned pickle and this client reads signed ones only",
                ))
            }
            _ => {}
        }
        let loads = match &self.loads {
            // A pickle of plain data names nothing the allow list could refuse.
            Some(l) if !pickle_scan::is_plain_data(data) => l.bind(py).clone(),
            _ => PICKLE_LOADS.import(py, "pickle", "loads")?.clone(),
        };
        loads.call1((py_bytes(py, data)?,)).map(Bound::unbind)
    }
}
