//! Construction and configuration: `__init__`, `clone`, `get_behaviors`, `set_behaviors`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString};

use super::PyClient;
use crate::behaviors::{Behaviors, ALL_BEHAVIORS, FASTMC_BEHAVIORS};
use crate::client::Client;
use crate::py::args::*;
use crate::py::errors::{self, op_error, plain_error};
use crate::py::servers::*;
use crate::security::{Credentials, Security, Tls, TlsOptions};

/// `_pylibmc.client(servers, binary=False, username=None, password=None, behaviors=None)`,
/// plus fastmc's keyword-only TLS arguments.
#[allow(clippy::too_many_arguments)]
pub(super) fn init(
    slf: &Bound<'_, PyClient>,
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
        Some(b) => {
            require_int(b)?;
            b.extract::<i64>()? != 0
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
    let base = py.get_type::<PyClient>();
    let cls = slf.get_type();
    let overridden =
        |name: &str| -> PyResult<bool> { Ok(!cls.getattr(name)?.is(&base.getattr(name)?)) };
    this.user_serialize
        .store(overridden("serialize")?, Ordering::Relaxed);
    this.user_deserialize
        .store(overridden("deserialize")?, Ordering::Relaxed);
    Ok(())
}

/// Clone this client: same servers and behaviors, its own connections.
pub(super) fn clone(slf: &Bound<'_, PyClient>) -> PyResult<Py<PyAny>> {
    let this = slf.get();
    let cls = slf.get_type();
    let new = cls.call_method1(intern!(slf.py(), "__new__"), (&cls,))?;
    let other = new.cast::<PyClient>()?.get();
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

/// The behaviors as numbers, in pylibmc's order.
pub(super) fn get_behaviors(slf: &Bound<'_, PyClient>) -> PyResult<Py<PyDict>> {
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
pub(super) fn set_behaviors(
    slf: &Bound<'_, PyClient>,
    behaviors: &Bound<'_, PyAny>,
) -> PyResult<()> {
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

/// Apply a behaviors dict at construction; returns the namespace.
fn apply_behaviors(
    this: &PyClient,
    b: &mut Behaviors,
    d: &Bound<'_, PyDict>,
    binary: bool,
) -> PyResult<Vec<u8>> {
    Ok(apply_behaviors_inner(this, b, d, binary)?.unwrap_or_default())
}

/// Walk the behaviors in pylibmc's fixed order, whatever the dict's order; then `namespace`.
fn apply_behaviors_inner(
    this: &PyClient,
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
