//! The native client class, `_pylibmc.client`, with pylibmc's C-level signatures. It converts
//! arguments while attached to the interpreter, runs the core detached (GIL released), then
//! re-attaches to build results: every I/O method goes through `Native::run`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use super::errors::{self, op_error, plain_error};
use super::serde;
use crate::behaviors::{Behaviors, ALL_BEHAVIORS, FASTMC_BEHAVIORS};
use crate::client::{Client, ServerSpec, StoreItem, StoreStatus};
use crate::connection::Address;
use crate::error::Error as CoreError;
use crate::protocol::{StoreCmd, MAX_KEY_LEN};
use crate::security::{Credentials, Security, Tls, TlsOptions};

const SERVER_TYPE_TCP: i64 = 1;
const SERVER_TYPE_UDP: i64 = 2;
const SERVER_TYPE_UNIX: i64 = 4;

/// The 22 stats libmemcached parses (and so pylibmc returns), in its order.
const STAT_KEYS: [&str; 22] = [
    "pid",
    "uptime",
    "time",
    "version",
    "pointer_size",
    "rusage_user",
    "rusage_system",
    "curr_items",
    "total_items",
    "bytes",
    "curr_connections",
    "total_connections",
    "connection_structures",
    "cmd_get",
    "cmd_set",
    "get_hits",
    "get_misses",
    "evictions",
    "bytes_read",
    "bytes_written",
    "limit_maxbytes",
    "threads",
];

#[pyclass(name = "client", module = "_pylibmc", subclass, frozen, dict, weakref)]
pub struct Native {
    core: RwLock<Option<Arc<Client>>>,
    binary: AtomicBool,
    pickle_protocol: AtomicI64,
    user_serialize: AtomicBool,
    user_deserialize: AtomicBool,
}

/// A positional argument that may be left out. Unlike `Option`, a `None` passed counts as given.
enum MaybeArg<'a, 'py> {
    Given(Borrowed<'a, 'py, PyAny>),
    Missing,
}

impl<'a, 'py> FromPyObject<'a, 'py> for MaybeArg<'a, 'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(MaybeArg::Given(obj))
    }
}

/// How a method reports a key of the wrong type (pylibmc has two wordings).
#[derive(Clone, Copy)]
enum KeyType {
    /// get, gets and the multi methods.
    MustBeBytes,
    /// methods that parse the key with the `s#` format.
    BytesLike,
}

fn key_bytes<'a>(obj: &'a Bound<'_, PyAny>, style: KeyType) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(match style {
        KeyType::MustBeBytes => PyTypeError::new_err("key must be bytes"),
        KeyType::BytesLike => {
            let tn = obj
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            PyTypeError::new_err(format!("a bytes-like object is required, not '{tn}'"))
        }
    })
}

fn check_key_len(k: &[u8]) -> PyResult<()> {
    if k.len() > MAX_KEY_LEN {
        return Err(PyValueError::new_err(format!(
            "key length {} too long, max is {MAX_KEY_LEN}",
            k.len()
        )));
    }
    Ok(())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// An int argument that C parses as `unsigned int` without overflow checking: wraps mod 2**32.
fn wrap_u32(obj: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    let Some(obj) = obj else { return Ok(0) };
    if obj.is_none() {
        return Ok(0);
    }
    if !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "'{}' object cannot be interpreted as an integer",
            type_name(obj)
        )));
    }
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v as u32);
    }
    let masked = obj.call_method1(intern!(obj.py(), "__and__"), (0xFFFF_FFFFu64,))?;
    masked.extract::<u32>()
}

/// An int behavior value, wrapped to 64 bits like `PyLong_AsUnsignedLongMask`.
fn wrap_i64(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(v);
    }
    let masked = obj.call_method1(intern!(obj.py(), "__and__"), (u64::MAX,))?;
    Ok(masked.extract::<u64>()? as i64)
}

fn prefix_bytes(prefix: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u8>> {
    match prefix {
        None => Ok(Vec::new()),
        Some(p) if p.is_none() => Ok(Vec::new()),
        Some(p) => key_bytes(p, KeyType::BytesLike).map(<[u8]>::to_vec),
    }
}

fn join_key<'a>(prefix: &[u8], key: &'a [u8]) -> Cow<'a, [u8]> {
    if prefix.is_empty() {
        Cow::Borrowed(key)
    } else {
        let mut v = Vec::with_capacity(prefix.len() + key.len());
        v.extend_from_slice(prefix);
        v.extend_from_slice(key);
        Cow::Owned(v)
    }
}

/// Attach the failed keys to an exception raised after a whole batch was processed.
fn with_failed_keys(py: Python<'_>, err: PyErr, failed: &Bound<'_, PyList>) -> PyErr {
    let _ = err.value(py).setattr("failed_keys", failed);
    err
}

fn parse_server(item: &Bound<'_, PyAny>) -> PyResult<(i64, ServerSpec)> {
    if let Ok(t) = item.cast::<PyTuple>() {
        if t.len() != 3 && t.len() != 4 {
            return Err(PyTypeError::new_err(
                "server tuples must be (type, host, port[, weight])",
            ));
        }
        let kind: i64 = t.get_item(0)?.extract()?;
        let host: String = t.get_item(1)?.extract()?;
        let port: i64 = t.get_item(2)?.extract()?;
        let weight: i64 = if t.len() == 4 {
            t.get_item(3)?.extract()?
        } else {
            1
        };
        let weight = (weight as u16).max(1) as u32;
        let address = match kind {
            SERVER_TYPE_UNIX => {
                if port != 0 {
                    return Err(PyValueError::new_err("can't set port on unix sockets"));
                }
                Address::Unix(host)
            }
            SERVER_TYPE_TCP | SERVER_TYPE_UDP => {
                let port = port as u16; // C "H" format: wraps
                Address::Tcp {
                    host,
                    port: if port == 0 { 11211 } else { port },
                }
            }
            _ => return Err(PyValueError::new_err(format!("bad server type: {kind}"))),
        };
        return Ok((kind, ServerSpec { address, weight }));
    }
    let spec: String = if let Ok(b) = item.cast::<PyBytes>() {
        String::from_utf8_lossy(b.as_bytes()).into_owned()
    } else {
        item.extract()?
    };
    parse_spec_string(&spec)
}

/// libmemcached-style `host[:port[:weight]]`, `[v6]:port`, `/path`.
fn parse_spec_string(spec: &str) -> PyResult<(i64, ServerSpec)> {
    let bad = || PyValueError::new_err(format!("bad server spec: {spec:?}"));
    if spec.starts_with('/') {
        return Ok((
            SERVER_TYPE_UNIX,
            ServerSpec {
                address: Address::Unix(spec.to_string()),
                weight: 1,
            },
        ));
    }
    let (host, rest) = if let Some(r) = spec.strip_prefix('[') {
        let end = r.find(']').ok_or_else(bad)?;
        (r[..end].to_string(), &r[end + 1..])
    } else {
        match spec.find(':') {
            Some(i) => (spec[..i].to_string(), &spec[i..]),
            None => (spec.to_string(), ""),
        }
    };
    let mut parts = rest.split(':').skip(1);
    let port = match parts.next() {
        Some(p) => p.parse::<u16>().map_err(|_| bad())?,
        None => 11211,
    };
    let weight = match parts.next() {
        Some(w) => w.parse::<u16>().map_err(|_| bad())? as u32,
        None => 1,
    };
    Ok((
        SERVER_TYPE_TCP,
        ServerSpec {
            address: Address::Tcp { host, port },
            weight: weight.max(1),
        },
    ))
}

/// The keys of a multi operation: the objects with a non-empty key, their keys with the prefix
/// (borrowed from the objects when there is no prefix), and the objects with an empty key.
type MultiKeys<'a, 'py> = (
    Vec<&'a Bound<'py, PyAny>>,
    Vec<Cow<'a, [u8]>>,
    Vec<&'a Bound<'py, PyAny>>,
);

impl Native {
    fn core(&self) -> PyResult<Arc<Client>> {
        self.core
            .read()
            .clone()
            .ok_or_else(|| plain_error("client is not initialized (call __init__ first)"))
    }

    fn verify_keys(core: &Client) -> bool {
        core.behaviors().verify_keys
    }

    fn encode_value<'a>(
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
    fn decode_item(
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

    #[allow(clippy::too_many_arguments)]
    fn store_one(
        &self,
        slf: &Bound<'_, Self>,
        cmd: StoreCmd,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        cas: u64,
        noreply: bool,
    ) -> PyResult<bool> {
        let py = slf.py();
        let key = key_bytes(key, KeyType::BytesLike)?;
        check_key_len(key)?;
        let exptime = wrap_u32(time)?;
        let mcl = wrap_u32(min_compress_len)?;
        let level = check_compress_level(compress_level)?;
        // cas never compresses (pylibmc takes no min_compress_len for it).
        let mcl = if cmd == StoreCmd::Cas { 0 } else { mcl };
        let (data, flags) = self.encode_value(slf, val, mcl, level)?;
        if key.is_empty() {
            if cmd == StoreCmd::Cas {
                return Err(errors::BadKeyProvided::new_err(
                    "error 33 from memcached_cas: key is empty",
                ));
            }
            return Ok(false);
        }
        let core = self.core()?;
        let item = StoreItem {
            key,
            flags,
            exptime,
            data: &data,
            cas,
        };
        let r = py.detach(|| core.store_multi(cmd, &[item], noreply)).pop();
        let what = match cmd {
            StoreCmd::Set => "memcached_set",
            StoreCmd::Add => "memcached_add",
            StoreCmd::Replace => "memcached_replace",
            StoreCmd::Append => "memcached_append",
            StoreCmd::Prepend => "memcached_prepend",
            StoreCmd::Cas => "memcached_cas",
        };
        match r {
            Some(Ok(StoreStatus::Stored)) => Ok(true),
            // Binary replace of a missing key: NOT FOUND (text mode says NOT_STORED: False).
            Some(Ok(StoreStatus::NotFound)) if cmd == StoreCmd::Replace => {
                Err(errors::NotFound::new_err("error 16 from memcached_replace"))
            }
            Some(Ok(StoreStatus::NotFound)) if cmd == StoreCmd::Cas => {
                Err(errors::NotFound::new_err(format!(
                    "error 16 from memcached_cas({}): NOT FOUND",
                    String::from_utf8_lossy(key)
                )))
            }
            Some(Ok(_)) => Ok(false),
            Some(Err(CoreError::BadKey(_))) if Self::verify_keys(&core) && cmd != StoreCmd::Cas => {
                Ok(false)
            }
            Some(Err(e)) => {
                let k = if cmd == StoreCmd::Cas {
                    Some(key)
                } else {
                    None
                };
                Err(op_error(py, what, k, &e))
            }
            None => Err(plain_error("no result")),
        }
    }

    /// Convert a key list for a multi operation: (original objects, full keys). Keys that are
    /// empty after prefixing are reported through `empty` (no I/O for them).
    fn multi_keys<'a, 'py>(
        keys_iter: &'a [Bound<'py, PyAny>],
        prefix: &[u8],
        check_prefixed: bool,
    ) -> PyResult<MultiKeys<'a, 'py>> {
        let mut objs = Vec::with_capacity(keys_iter.len());
        let mut full = Vec::with_capacity(keys_iter.len());
        let mut empty = Vec::new();
        for obj in keys_iter {
            let k = key_bytes(obj, KeyType::MustBeBytes)?;
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
        Ok((objs, full, empty))
    }
}

fn check_compress_level(level: i64) -> PyResult<i32> {
    if !(-1..=9).contains(&level) {
        return Err(PyValueError::new_err(
            "compress_level must be between 0 and 9 inclusive",
        ));
    }
    Ok(level as i32)
}

/// The objects of a sized iterable (`len()` is required, as in pylibmc), rejecting dicts.
fn sized_items<'py>(keys: &Bound<'py, PyAny>, dict_msg: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
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

#[pymethods]
impl Native {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        Native {
            core: RwLock::new(None),
            binary: AtomicBool::new(false),
            pickle_protocol: AtomicI64::new(-1),
            user_serialize: AtomicBool::new(false),
            user_deserialize: AtomicBool::new(false),
        }
    }

    /// `_pylibmc.client(servers, binary=False, username=None, password=None, behaviors=None)`,
    /// plus fastmc's keyword-only TLS arguments.
    #[pyo3(signature = (servers, binary=None, username=None, password=None, behaviors=None, *,
                        tls=false, tls_ca_file=None, tls_cert_file=None, tls_key_file=None,
                        tls_server_name=None))]
    #[allow(clippy::too_many_arguments)]
    fn __init__(
        slf: &Bound<'_, Self>,
        servers: &Bound<'_, PyAny>,
        binary: Option<&Bound<'_, PyAny>>,
        username: Option<&Bound<'_, PyAny>>,
        password: Option<&Bound<'_, PyAny>>,
        behaviors: Option<&Bound<'_, PyAny>>,
        tls: bool,
        tls_ca_file: Option<String>,
        tls_cert_file: Option<String>,
        tls_key_file: Option<String>,
        tls_server_name: Option<String>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let binary = match binary {
            None => false,
            Some(b) if b.is_instance_of::<PyInt>() => b.extract::<i64>()? != 0,
            Some(b) => {
                return Err(PyTypeError::new_err(format!(
                    "'{}' object cannot be interpreted as an integer",
                    type_name(b)
                )))
            }
        };
        let username = username.filter(|u| !u.is_none());
        let password = password.filter(|p| !p.is_none());
        for a in [username, password].into_iter().flatten() {
            if !a.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(
                    "SASL username and password must be str",
                ));
            }
        }
        match (username, password) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(PyTypeError::new_err(
                    "SASL requires both username and password",
                ))
            }
            (Some(_), Some(_)) if !binary => {
                return Err(PyTypeError::new_err(
                    "SASL requires the memcached binary protocol",
                ))
            }
            _ => {}
        }
        let mut security = Security::default();
        if let (Some(u), Some(p)) = (username, password) {
            security.sasl = Some(Credentials {
                username: u.extract::<String>()?.into_bytes(),
                password: p.extract::<String>()?.into_bytes(),
            });
        }
        let tls_options = TlsOptions {
            ca_file: tls_ca_file,
            cert_file: tls_cert_file,
            key_file: tls_key_file,
            server_name: tls_server_name,
        };
        // Any TLS argument turns TLS on.
        if tls || tls_options != TlsOptions::default() {
            let t = py
                .detach(|| Tls::new(tls_options))
                .map_err(|m| plain_error(format!("TLS setup failed: {m}")))?;
            security.tls = Some(t);
        }
        let mut specs = Vec::new();
        let mut kinds = Vec::new();
        for item in servers.try_iter()? {
            let (kind, spec) = parse_server(&item?)?;
            kinds.push(kind);
            specs.push(spec);
        }
        if specs.is_empty() {
            return Err(plain_error("empty server list"));
        }
        if kinds.iter().any(|&k| k != kinds[0]) {
            return Err(PyValueError::new_err("can't mix transport types"));
        }
        if kinds[0] == SERVER_TYPE_UDP {
            return Err(errors::NotSupportedError::new_err(
                "fastmc does not support UDP servers (pylibmc cannot read over UDP either)",
            ));
        }
        // Behaviors apply before the servers are added, as in pylibmc.
        let mut b = Behaviors {
            binary,
            security: std::sync::Arc::new(security),
            ..Behaviors::default()
        };
        let mut namespace = Vec::new();
        if let Some(d) = behaviors.filter(|d| !d.is_none()) {
            let d = d
                .cast::<PyDict>()
                .map_err(|_| PyTypeError::new_err("behaviors must be a dict"))?;
            namespace = apply_behaviors(this, &mut b, d, binary)?;
        }
        let core = Client::new(specs, b, namespace)
            .map_err(|e| op_error(py, "memcached_server_add", None, &e))?;
        *this.core.write() = Some(Arc::new(core));
        this.binary.store(binary, Ordering::Relaxed);
        // Serializer overrides count at class level only, detected here as pylibmc does.
        let base = py.get_type::<Native>();
        let cls = slf.get_type();
        let overridden =
            |name: &str| -> PyResult<bool> { Ok(!cls.getattr(name)?.is(&base.getattr(name)?)) };
        this.user_serialize
            .store(overridden("serialize")?, Ordering::Relaxed);
        this.user_deserialize
            .store(overridden("deserialize")?, Ordering::Relaxed);
        Ok(())
    }

    /// Retrieve a key from a memcached.
    #[pyo3(signature = (key, default=None, /))]
    fn get(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let default = default.unwrap_or_else(|| py.None());
        let k = key_bytes(key, KeyType::MustBeBytes)?;
        check_key_len(k)?;
        if k.is_empty() {
            return Ok(default);
        }
        let core = this.core()?;
        let mut f = py.detach(|| core.get_multi(&[k], false));
        match f.items.pop() {
            Some(Ok(Some(item))) => Ok(this
                .decode_item(slf, f.bytes(&item), item.flags)?
                .unwrap_or(default)),
            Some(Ok(None)) => Ok(default),
            Some(Err(e)) => Err(op_error(py, "memcached_get", Some(k), &e)),
            None => Ok(default),
        }
    }

    /// Retrieve a key and cas_id from a memcached.
    #[pyo3(signature = (key, /))]
    fn gets(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let py = slf.py();
        let this = slf.get();
        let k = key_bytes(key, KeyType::MustBeBytes)?;
        check_key_len(k)?;
        if k.is_empty() {
            return Ok((py.None(), py.None()));
        }
        let core = this.core()?;
        if !core.behaviors().cas {
            return Err(PyValueError::new_err("gets without cas behavior"));
        }
        let mut f = py.detach(|| core.get_multi(&[k], true));
        match f.items.pop() {
            Some(Ok(Some(item))) => match this.decode_item(slf, f.bytes(&item), item.flags)? {
                Some(v) => Ok((v, item.cas.unwrap_or(0).into_py_any(py)?)),
                None => Ok((py.None(), py.None())),
            },
            Some(Ok(None)) | None => Ok((py.None(), py.None())),
            Some(Err(e)) => Err(op_error(py, "memcached_gets", Some(k), &e)),
        }
    }

    /// Set a key unconditionally.
    #[pyo3(signature = (key, val, time=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn set(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<bool> {
        slf.get().store_one(
            slf,
            StoreCmd::Set,
            key,
            val,
            time,
            min_compress_len,
            compress_level,
            0,
            noreply,
        )
    }

    /// Add a key if it does not exist.
    #[pyo3(signature = (key, val, time=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<bool> {
        slf.get().store_one(
            slf,
            StoreCmd::Add,
            key,
            val,
            time,
            min_compress_len,
            compress_level,
            0,
            noreply,
        )
    }

    /// Replace a key if it exists.
    #[pyo3(signature = (key, val, time=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn replace(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<bool> {
        slf.get().store_one(
            slf,
            StoreCmd::Replace,
            key,
            val,
            time,
            min_compress_len,
            compress_level,
            0,
            noreply,
        )
    }

    /// Append data to a key.
    #[pyo3(signature = (key, val, time=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn append(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<bool> {
        slf.get().store_one(
            slf,
            StoreCmd::Append,
            key,
            val,
            time,
            min_compress_len,
            compress_level,
            0,
            noreply,
        )
    }

    /// Prepend data to a key.
    #[pyo3(signature = (key, val, time=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn prepend(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<bool> {
        slf.get().store_one(
            slf,
            StoreCmd::Prepend,
            key,
            val,
            time,
            min_compress_len,
            compress_level,
            0,
            noreply,
        )
    }

    /// Attempt to compare-and-store a key by CAS ID.
    #[pyo3(signature = (key, val, cas, time=None))]
    fn cas(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        val: &Bound<'_, PyAny>,
        cas: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let this = slf.get();
        let token: i64 = if cas.is_instance_of::<PyInt>() {
            cas.extract()?
        } else {
            return Err(PyTypeError::new_err(format!(
                "'{}' object cannot be interpreted as an integer",
                type_name(cas)
            )));
        };
        let k = key_bytes(key, KeyType::BytesLike)?;
        if !k.is_empty() && !this.core()?.behaviors().cas {
            return Err(PyValueError::new_err("cas without cas behavior"));
        }
        this.store_one(
            slf,
            StoreCmd::Cas,
            key,
            val,
            time,
            None,
            -1,
            token as u64,
            false,
        )
    }

    /// Delete a key.
    /// The rest of the positional arguments is gathered only for pylibmc's message ("delete()
    /// takes exactly 1 argument (N given)"): with one argument no tuple is built.
    #[pyo3(
        signature = (key = MaybeArg::Missing, /, *rest, noreply=false),
        text_signature = "($self, key, /, *, noreply=False)"
    )]
    fn delete(
        slf: &Bound<'_, Self>,
        key: MaybeArg<'_, '_>,
        rest: &Bound<'_, PyTuple>,
        noreply: bool,
    ) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let key = match key {
            MaybeArg::Given(key) if rest.is_empty() => key,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "delete() takes exactly 1 argument ({} given)",
                    usize::from(matches!(key, MaybeArg::Given(_))) + rest.len()
                )))
            }
        };
        let k = key_bytes(&key, KeyType::BytesLike)?;
        check_key_len(k)?;
        if k.is_empty() {
            return Ok(false);
        }
        let core = this.core()?;
        let r = py.detach(|| core.delete_multi(&[k], noreply)).pop();
        match r {
            Some(Ok(d)) => Ok(d),
            Some(Err(CoreError::BadKey(_))) if Self::verify_keys(&core) => Ok(false),
            Some(Err(e)) => Err(op_error(py, "memcached_delete", Some(k), &e)),
            None => Ok(false),
        }
    }

    /// Change the expiry time of a key.
    #[pyo3(signature = (key, time, /, *, noreply=false))]
    fn touch(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        time: &Bound<'_, PyAny>,
        noreply: bool,
    ) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let k = key_bytes(key, KeyType::BytesLike)?;
        check_key_len(k)?;
        let exptime = wrap_u32(Some(time))?;
        if k.is_empty() {
            return Ok(false);
        }
        let core = this.core()?;
        let r = py.detach(|| core.touch_multi(&[k], exptime, noreply)).pop();
        match r {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(op_error(py, "memcached_touch", Some(k), &e)),
            None => Ok(false),
        }
    }

    /// Increment a key by a delta.
    #[pyo3(signature = (key, delta=None, /))]
    fn incr(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        delta: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        arith_one(slf, true, key, delta)
    }

    /// Decrement a key by a delta.
    #[pyo3(signature = (key, delta=None, /))]
    fn decr(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        delta: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        arith_one(slf, false, key, delta)
    }

    /// Get multiple keys at once; misses are absent from the result.
    #[pyo3(signature = (keys, key_prefix=None))]
    fn get_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDict>> {
        fetch_multi(slf, keys, key_prefix, false)
    }

    /// fastmc extension: `get_multi` with CAS tokens: `{key: (value, cas)}`.
    #[pyo3(signature = (keys, key_prefix=None))]
    fn gets_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyDict>> {
        fetch_multi(slf, keys, key_prefix, true)
    }

    /// Set multiple keys at once; returns the keys that were not stored.
    #[pyo3(signature = (keys, time=None, key_prefix=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn set_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<Py<PyList>> {
        store_multi(
            slf,
            StoreCmd::Set,
            "memcached_set_multi",
            keys,
            time,
            key_prefix,
            min_compress_len,
            compress_level,
            noreply,
        )
    }

    /// Add multiple keys at once; returns the keys that were not stored.
    #[pyo3(signature = (keys, time=None, key_prefix=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn add_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<Py<PyList>> {
        store_multi(
            slf,
            StoreCmd::Add,
            "memcached_add_multi",
            keys,
            time,
            key_prefix,
            min_compress_len,
            compress_level,
            noreply,
        )
    }

    /// fastmc extension: replace multiple keys at once; returns the keys that were not stored.
    #[pyo3(signature = (keys, time=None, key_prefix=None, min_compress_len=None, compress_level=-1, *, noreply=false))]
    #[allow(clippy::too_many_arguments)]
    fn replace_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        min_compress_len: Option<&Bound<'_, PyAny>>,
        compress_level: i64,
        noreply: bool,
    ) -> PyResult<Py<PyList>> {
        store_multi(
            slf,
            StoreCmd::Replace,
            "memcached_replace_multi",
            keys,
            time,
            key_prefix,
            min_compress_len,
            compress_level,
            noreply,
        )
    }

    /// Delete multiple keys at once; True only if every key was deleted.
    #[pyo3(signature = (keys, key_prefix=None, *, noreply=false))]
    fn delete_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        noreply: bool,
    ) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        if keys.is_instance_of::<PyDict>() {
            return Err(PyTypeError::new_err(
                "keys must be a sequence, not a mapping",
            ));
        }
        let prefix = prefix_bytes(key_prefix)?;
        let mut items = Vec::new();
        for k in keys.try_iter()? {
            items.push(k?);
        }
        let mut all = true;
        let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(items.len());
        for obj in &items {
            let k = key_bytes(obj, KeyType::BytesLike)?;
            let fk = join_key(&prefix, k);
            check_key_len(&fk)?;
            if fk.is_empty() {
                all = false;
                continue;
            }
            full.push(fk);
        }
        let core = this.core()?;
        let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
        let results = py.detach(|| core.delete_multi(&refs, noreply));
        let verify = Self::verify_keys(&core);
        let mut first_err = None;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(true) => {}
                Ok(false) => all = false,
                Err(CoreError::BadKey(_)) if verify => all = false,
                Err(e) => {
                    all = false;
                    first_err.get_or_insert((i, e));
                }
            }
        }
        if let Some((i, e)) = first_err {
            return Err(op_error(
                py,
                "memcached_delete",
                Some(&refs[i][prefix.len()..]),
                &e,
            ));
        }
        Ok(all)
    }

    /// Increment multiple keys by a delta; returns None.
    #[pyo3(signature = (keys, key_prefix=None, delta=None))]
    fn incr_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        delta: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let delta = match delta {
            None => 1,
            Some(d) => wrap_u32(Some(d))?,
        };
        let items = sized_items(keys, "keys must be a sequence, not a mapping")?;
        let prefix = prefix_bytes(key_prefix)?;
        let mut full = Vec::with_capacity(items.len());
        for obj in &items {
            let k = key_bytes(obj, KeyType::MustBeBytes)?;
            full.push(join_key(&prefix, k));
        }
        let core = this.core()?;
        let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
        let results = py.detach(|| core.arith_multi(true, &refs, delta as u64));
        report_arith(py, results)
    }

    /// fastmc extension: touch multiple keys; returns the keys that were not found.
    #[pyo3(signature = (keys, time=None, key_prefix=None, *, noreply=false))]
    fn touch_multi(
        slf: &Bound<'_, Self>,
        keys: &Bound<'_, PyAny>,
        time: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
        noreply: bool,
    ) -> PyResult<Py<PyList>> {
        let py = slf.py();
        let this = slf.get();
        let exptime = wrap_u32(time)?;
        let prefix = prefix_bytes(key_prefix)?;
        let items = sized_items(keys, "keys must be a sequence, not a mapping")?;
        let (objs, full, empty) = Self::multi_keys(&items, &prefix, true)?;
        let core = this.core()?;
        let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
        let results = py.detach(|| core.touch_multi(&refs, exptime, noreply));
        let failed = PyList::empty(py);
        for e in empty {
            failed.append(e)?;
        }
        let mut first_err = None;
        for (obj, r) in objs.iter().zip(results) {
            match r {
                Ok(true) => {}
                Ok(false) => failed.append(obj)?,
                Err(e) => {
                    failed.append(obj)?;
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(with_failed_keys(
                py,
                op_error(py, "memcached_touch_multi", None, &e),
                &failed,
            ));
        }
        Ok(failed.unbind())
    }

    /// Flush all data on all servers.
    #[pyo3(signature = (time=None))]
    fn flush_all(slf: &Bound<'_, Self>, time: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let py = slf.py();
        let delay: i64 = match time {
            None => 0,
            Some(t) if t.is_instance_of::<PyInt>() => t.extract::<i64>().unwrap_or(i64::MAX),
            Some(t) => {
                return Err(PyTypeError::new_err(format!(
                    "'{}' object cannot be interpreted as an integer",
                    type_name(t)
                )))
            }
        };
        let delay = delay.clamp(0, u32::MAX as i64) as u32;
        let core = slf.get().core()?;
        let results = py.detach(|| core.flush_all(delay));
        if let Some(e) = results.into_iter().find_map(|r| r.err()) {
            return Err(errors::SomeErrors::new_err(format!(
                "error 19 from flush_all: SOME ERRORS WERE REPORTED ({e})"
            )));
        }
        Ok(true)
    }

    /// Retrieve statistics from all memcached servers.
    #[pyo3(signature = (stat_args=None, /))]
    fn get_stats(
        slf: &Bound<'_, Self>,
        stat_args: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyList>> {
        let py = slf.py();
        let args: Vec<u8> = match stat_args {
            None => Vec::new(),
            Some(a) => match a.cast::<PyString>() {
                Ok(s) => s.to_str()?.as_bytes().to_vec(),
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "argument 1 must be str, not {}",
                        type_name(a)
                    )))
                }
            },
        };
        let core = slf.get().core()?;
        let results = py.detach(|| core.stats(&args));
        let addrs = core.addresses();
        let out = PyList::empty(py);
        for (i, r) in results.into_iter().enumerate() {
            let stats = match r {
                Ok(s) => s,
                Err(CoreError::UnknownCommand) | Err(CoreError::ClientError(_)) => {
                    return Err(plain_error("error 38 from get_stats"))
                }
                Err(e) => {
                    return Err(errors::SomeErrors::new_err(format!(
                        "error 19 from get_stats: SOME ERRORS WERE REPORTED ({e})"
                    )))
                }
            };
            let d = PyDict::new(py);
            for name in STAT_KEYS {
                let v = stats
                    .iter()
                    .find(|(n, _)| n.as_slice() == name.as_bytes())
                    .map_or(&b"0"[..], |(_, v)| v.as_slice());
                d.set_item(name, PyBytes::new(py, v))?;
            }
            let label = format!("{} ({i})", addrs[i].display_name());
            out.append((PyBytes::new(py, label.as_bytes()), d))?;
        }
        Ok(out.unbind())
    }

    /// Disconnect from all servers and reset their failure state.
    fn disconnect_all(slf: &Bound<'_, Self>) -> PyResult<()> {
        let core = slf.get().core()?;
        slf.py().detach(|| core.disconnect_all());
        Ok(())
    }

    /// Clone this client: same servers and behaviors, its own connections.
    fn clone(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let this = slf.get();
        let cls = slf.get_type();
        let new = cls.call_method1(intern!(slf.py(), "__new__"), (&cls,))?;
        let other = new.cast::<Native>()?.get();
        *other.core.write() = Some(Arc::new(this.core()?.clone_client()));
        other
            .binary
            .store(this.binary.load(Ordering::Relaxed), Ordering::Relaxed);
        other.pickle_protocol.store(
            this.pickle_protocol.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        other.user_serialize.store(
            this.user_serialize.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        other.user_deserialize.store(
            this.user_deserialize.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        Ok(new.unbind())
    }

    /// The index of the server a key maps to.
    #[pyo3(signature = (key, /))]
    fn hash(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<usize> {
        let k = key_bytes(key, KeyType::BytesLike)?;
        Ok(slf.get().core()?.server_for(k))
    }

    /// Serialize a value to (bytes, flags) the way pylibmc does (no compression).
    #[pyo3(signature = (value, /))]
    fn serialize(slf: &Bound<'_, Self>, value: &Bound<'_, PyAny>) -> PyResult<(Py<PyBytes>, u32)> {
        let py = slf.py();
        let (data, flags) =
            serde::serialize(py, value, slf.get().pickle_protocol.load(Ordering::Relaxed))?;
        Ok((PyBytes::new(py, &data).unbind(), flags))
    }

    /// Deserialize (bytes, flags) the way pylibmc does (no decompression).
    #[pyo3(signature = (data, flags, /))]
    fn deserialize(
        slf: &Bound<'_, Self>,
        data: &Bound<'_, PyAny>,
        flags: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let flags = wrap_u32(Some(flags))?;
        if flags & 0x17 == 0 {
            return Ok(data.clone().unbind());
        }
        let bytes = data.cast::<PyBytes>().map_err(|_| {
            PyTypeError::new_err(format!(
                "a bytes-like object is required, not '{}'",
                type_name(data)
            ))
        })?;
        serde::deserialize(py, bytes.as_bytes(), flags)
    }

    /// The behaviors as numbers, in pylibmc's order.
    fn get_behaviors(slf: &Bound<'_, Self>) -> PyResult<Py<PyDict>> {
        let py = slf.py();
        let this = slf.get();
        let core = this.core()?;
        let b = core.behaviors();
        let d = PyDict::new(py);
        let addrs = core.addresses();
        for name in ALL_BEHAVIORS.iter().chain(FASTMC_BEHAVIORS.iter()) {
            let v = match *name {
                "pickle_protocol" => this.pickle_protocol.load(Ordering::Relaxed),
                "_socket_send_size" | "_socket_recv_size" => match b.get(name) {
                    Some(v) => v,
                    None => {
                        let (snd, rcv) = crate::connection::default_socket_buffer_sizes(&addrs[0]);
                        (if *name == "_socket_send_size" {
                            snd
                        } else {
                            rcv
                        }) as i64
                    }
                },
                n => b.get(n).unwrap_or(0),
            };
            // fastmc's own behaviors appear only once set, so the read-back stays pylibmc's.
            if FASTMC_BEHAVIORS.contains(name) && v == 0 {
                continue;
            }
            d.set_item(*name, v)?;
        }
        Ok(d.unbind())
    }

    /// Set behaviors from a dict of numbers (names as in `all_behaviors`, plus `namespace`).
    fn set_behaviors(slf: &Bound<'_, Self>, behaviors: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = slf.get();
        if behaviors.is_none() {
            return Ok(());
        }
        let d = behaviors
            .cast::<PyDict>()
            .map_err(|_| PyTypeError::new_err("behaviors must be a dict"))?;
        let core = this.core()?;
        let binary = this.binary.load(Ordering::Relaxed);
        let mut result = Ok(());
        let mut ns = None;
        let _ = core.update_behaviors(|b| {
            match apply_behaviors_inner(this, b, d, binary) {
                Ok(n) => ns = n,
                Err(e) => result = Err(e),
            }
            Ok(())
        });
        if let Some(n) = ns {
            core.set_namespace(n);
        }
        result
    }

    #[getter]
    fn binary_protocol(slf: &Bound<'_, Self>) -> bool {
        slf.get().binary.load(Ordering::Relaxed)
    }
}

/// Apply a behaviors dict at construction; returns the namespace.
fn apply_behaviors(
    this: &Native,
    b: &mut Behaviors,
    d: &Bound<'_, PyDict>,
    binary: bool,
) -> PyResult<Vec<u8>> {
    Ok(apply_behaviors_inner(this, b, d, binary)?.unwrap_or_default())
}

/// Walk the behaviors in pylibmc's fixed order, whatever the dict's order; then `namespace`.
fn apply_behaviors_inner(
    this: &Native,
    b: &mut Behaviors,
    d: &Bound<'_, PyDict>,
    binary: bool,
) -> PyResult<Option<Vec<u8>>> {
    for name in ALL_BEHAVIORS.iter().chain(FASTMC_BEHAVIORS.iter()) {
        let Some(v) = d.get_item(*name)? else {
            continue;
        };
        if !v.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "behavior {name} must be int, not {}",
                type_name(&v)
            )));
        }
        let n = wrap_i64(&v)?;
        if *name == "pickle_protocol" {
            this.pickle_protocol.store(n, Ordering::Relaxed);
            continue;
        }
        if b.set(name, n, binary).is_err() {
            return Err(plain_error(format!(
                "memcached_behavior_set returned 38 for behavior '{name}' = {n}"
            )));
        }
    }
    match d.get_item("namespace")? {
        None => Ok(None),
        Some(ns) if ns.is_none() => Ok(Some(Vec::new())),
        Some(ns) => match ns.cast::<PyBytes>() {
            Ok(bts) if !bts.as_bytes().is_empty() => Ok(Some(bts.as_bytes().to_vec())),
            Ok(_) => Err(plain_error(
                "error 38 from memcached_callback_set: namespace must not be empty",
            )),
            Err(_) => Err(PyTypeError::new_err("namespace must be bytes")),
        },
    }
}

fn arith_one(
    slf: &Bound<'_, Native>,
    incr: bool,
    key: &Bound<'_, PyAny>,
    delta: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let py = slf.py();
    let one = 1i64.into_pyobject(py)?.into_any();
    let delta = delta.unwrap_or(&one);
    if !delta.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "'{}' object cannot be interpreted as an integer",
            type_name(delta)
        )));
    }
    // pylibmc parses the delta as a C int: OverflowError outside its range, either side.
    let d: i64 = match delta.extract() {
        Ok(d) => d,
        Err(_) if delta.lt(0).unwrap_or(false) => i64::MIN,
        Err(_) => i64::MAX,
    };
    if d < i32::MIN as i64 {
        return Err(PyOverflowError::new_err(
            "signed integer is less than minimum",
        ));
    }
    if d < 0 {
        return Err(PyValueError::new_err("delta must be positive"));
    }
    if d > i32::MAX as i64 {
        return Err(PyOverflowError::new_err(
            "signed integer is greater than maximum",
        ));
    }
    let k = key_bytes(key, KeyType::BytesLike)?;
    check_key_len(k)?;
    if k.is_empty() {
        return Err(errors::BadKeyProvided::new_err("1 keys failed"));
    }
    let core = slf.get().core()?;
    let r = py.detach(|| core.arith_multi(incr, &[k], d as u64)).pop();
    match r {
        Some(Ok(Some(n))) => Ok(n),
        Some(Ok(None)) => Err(errors::NotFound::new_err("1 keys not found")),
        Some(Err(e)) => Err(errors::error_with_message(py, &e, "1 keys failed".into())),
        None => Err(plain_error("no result")),
    }
}

/// pylibmc's incr/incr_multi error report, after every key was tried: `<n> keys not found` when
/// all failures were misses, else `<n> keys failed` (the error's class if there was one hard error).
fn report_arith(py: Python<'_>, results: Vec<crate::error::Result<Option<u64>>>) -> PyResult<()> {
    let mut misses = 0usize;
    let mut hard: Vec<CoreError> = Vec::new();
    for r in results {
        match r {
            Ok(Some(_)) => {}
            Ok(None) => misses += 1,
            Err(e) => hard.push(e),
        }
    }
    let n = misses + hard.len();
    match hard.as_slice() {
        [] if n == 0 => Ok(()),
        [] => Err(errors::NotFound::new_err(format!("{n} keys not found"))),
        [e] => Err(errors::error_with_message(
            py,
            e,
            format!("{n} keys failed"),
        )),
        _ => Err(plain_error(format!("{n} keys failed"))),
    }
}

fn fetch_multi(
    slf: &Bound<'_, Native>,
    keys: &Bound<'_, PyAny>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    with_cas: bool,
) -> PyResult<Py<PyDict>> {
    let py = slf.py();
    let this = slf.get();
    let items = sized_items(keys, "dict is not a sequence")?;
    let prefix = prefix_bytes(key_prefix)?;
    let (mut objs, mut full, _) = Native::multi_keys(&items, &prefix, false)?;
    if full.iter().any(|k| k.len() > MAX_KEY_LEN) {
        return Err(errors::BadKeyProvided::new_err(
            "error 33 from memcached_mget: A BAD KEY WAS PROVIDED/CHARACTERS OUT OF RANGE",
        ));
    }
    // A str and a bytes spelling of one key give one entry, under the str form.
    let has_str = objs.iter().any(|o| o.is_instance_of::<PyString>());
    let has_bytes = objs.iter().any(|o| o.is_instance_of::<PyBytes>());
    if has_str && has_bytes {
        let mut seen: std::collections::HashMap<Cow<'_, [u8]>, usize> =
            std::collections::HashMap::new();
        let mut o2 = Vec::with_capacity(objs.len());
        let mut f2 = Vec::with_capacity(full.len());
        for (o, f) in objs.into_iter().zip(full) {
            match seen.get(&f) {
                Some(&i) => {
                    if o.is_instance_of::<PyString>() {
                        o2[i] = o;
                    }
                }
                None => {
                    seen.insert(f.clone(), o2.len());
                    o2.push(o);
                    f2.push(f);
                }
            }
        }
        objs = o2;
        full = f2;
    }
    let core = this.core()?;
    let refs: Vec<&[u8]> = full.iter().map(|k| &**k).collect();
    let mut fetched = py.detach(|| core.get_multi(&refs, with_cas));
    let results = std::mem::take(&mut fetched.items);
    let raise_on_error = core.behaviors().get_multi_raise_on_error;
    let out = PyDict::new(py);
    let mut first_err: Option<CoreError> = None;
    let mut any_ok = false;
    for (obj, r) in objs.iter().zip(results) {
        match r {
            Ok(Some(item)) => {
                any_ok = true;
                if let Some(v) = this.decode_item(slf, fetched.bytes(&item), item.flags)? {
                    if with_cas {
                        out.set_item(obj, (v, item.cas.unwrap_or(0)))?;
                    } else {
                        out.set_item(obj, v)?;
                    }
                }
            }
            Ok(None) => any_ok = true,
            Err(CoreError::BadKey(m)) => {
                return Err(errors::BadKeyProvided::new_err(format!(
                    "error 33 from memcached_mget: {m}"
                )))
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        // pylibmc leaves a failed server's keys out unless every server failed.
        if raise_on_error || !any_ok {
            return Err(op_error(
                py,
                if with_cas {
                    "memcached_gets_multi"
                } else {
                    "memcached_mget"
                },
                None,
                &e,
            ));
        }
    }
    Ok(out.unbind())
}

#[allow(clippy::too_many_arguments)]
fn store_multi(
    slf: &Bound<'_, Native>,
    cmd: StoreCmd,
    what: &str,
    keys: &Bound<'_, PyAny>,
    time: Option<&Bound<'_, PyAny>>,
    key_prefix: Option<&Bound<'_, PyAny>>,
    min_compress_len: Option<&Bound<'_, PyAny>>,
    compress_level: i64,
    noreply: bool,
) -> PyResult<Py<PyList>> {
    let py = slf.py();
    let this = slf.get();
    let mapping = keys.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!("argument 1 must be dict, not {}", type_name(keys)))
    })?;
    let exptime = wrap_u32(time)?;
    let prefix = prefix_bytes(key_prefix)?;
    let mcl = wrap_u32(min_compress_len)?;
    let level = check_compress_level(compress_level)?;
    let failed = PyList::empty(py);
    // Serialize everything first: a failure here stores nothing.
    // Keep the pairs alive so that keys and bytes/str values are borrowed, not copied.
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = mapping.iter().collect();
    let mut objs = Vec::with_capacity(pairs.len());
    let mut full: Vec<Cow<'_, [u8]>> = Vec::with_capacity(pairs.len());
    let mut values: Vec<(Cow<'_, [u8]>, u32)> = Vec::with_capacity(pairs.len());
    for (k, v) in &pairs {
        let kb = key_bytes(k, KeyType::MustBeBytes)?;
        let fk = join_key(&prefix, kb);
        check_key_len(&fk)?;
        let enc = this.encode_value(slf, v, mcl, level)?;
        if fk.is_empty() {
            failed.append(k)?;
            continue;
        }
        full.push(fk);
        values.push(enc);
        objs.push(k);
    }
    let core = this.core()?;
    let items: Vec<StoreItem<'_>> = full
        .iter()
        .zip(&values)
        .map(|(k, (data, flags))| StoreItem {
            key: k,
            flags: *flags,
            exptime,
            data,
            cas: 0,
        })
        .collect();
    let results = py.detach(|| core.store_multi(cmd, &items, noreply));
    let verify = Native::verify_keys(&core);
    let mut first_err = None;
    for (obj, r) in objs.iter().zip(results) {
        match r {
            Ok(StoreStatus::Stored) => {}
            Ok(_) => failed.append(obj)?,
            Err(CoreError::BadKey(_)) if verify => failed.append(obj)?,
            Err(e) => {
                failed.append(obj)?;
                first_err.get_or_insert(e);
            }
        }
    }
    // When a key is given both as str and as bytes, pylibmc reports the str form.
    if !failed.is_empty()
        && pairs.iter().any(|(k, _)| k.is_instance_of::<PyString>())
        && pairs.iter().any(|(k, _)| k.is_instance_of::<PyBytes>())
    {
        let mut str_form = std::collections::HashMap::new();
        for (k, _) in &pairs {
            if k.is_instance_of::<PyString>() {
                str_form.insert(key_bytes(k, KeyType::MustBeBytes)?.to_vec(), k);
            }
        }
        for i in 0..failed.len() {
            let k = failed.get_item(i)?;
            if let Some(&s) = str_form.get(key_bytes(&k, KeyType::MustBeBytes)?) {
                failed.set_item(i, s)?;
            }
        }
    }
    if let Some(e) = first_err {
        return Err(with_failed_keys(py, op_error(py, what, None, &e), &failed));
    }
    Ok(failed.unbind())
}
