//! Construction and configuration: `__init__` (SASL, TLS, servers, initial behaviors), `clone`,
//! `get_behaviors`, `set_behaviors`, the `BehaviorPlan` a behaviors dict is read into, and the
//! `BehaviorFlags` mirror that every change of the core's behaviors goes through. Core calls go
//! through `io::detached`; errors come from `py::errors`. Uses `py::args`, `py::servers`,
//! `behaviors`, `client::Client`, `security`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString};

use super::state::{BehaviorFlags, PyClient, DEFAULT_MAX_INFLATE};
use crate::behaviors::{
    Behaviors, Rejected, ALL_BEHAVIORS, FASTMC_BEHAVIORS, RC_INVALID_ARGUMENTS,
};
use crate::client::Client;
use crate::py::args::*;
use crate::py::errors::{self, plain_error, Op};
use crate::py::io::{detached, released};
use crate::py::servers::parse_servers;
use crate::py::structured::Serializer;
use crate::py::values::{Compression, PickleMode, ValuePolicy};
use crate::security::{Credentials, Security, Tls, TlsOptions};

/// `__init__`'s keyword-only pickle arguments: `pickle`, `signing_keys`, `accept_unsigned_pickles`,
/// `pickle_loads`.
pub(super) type PickleArgs<'a> = (&'a str, Vec<Vec<u8>>, bool, Option<Py<PyAny>>);

/// `__init__`'s keyword-only compression arguments: `compression`, `zstd_level`, `zstd_dict`,
/// `zstd_min_len`.
pub(super) type CompressionArgs<'a> = (&'a str, i32, Option<Vec<u8>>, u32);

/// The value policy `__init__`'s keywords ask for: the compression is checked first, then the
/// pickle mode, the serializer (its module imported now), then the policy as a whole.
pub(super) fn value_policy(
    py: Python<'_>,
    (pickle, signing_keys, accept_unsigned, loads): PickleArgs<'_>,
    (compression, level, dict, min_len): CompressionArgs<'_>,
    serializer: &str,
) -> PyResult<ValuePolicy> {
    let compression = Compression::parse(compression, level, dict.as_deref(), min_len)?;
    let mode = PickleMode::parse(pickle)?;
    let serializer = Serializer::parse(serializer)?;
    serializer.ready(py)?;
    ValuePolicy::new(
        mode,
        signing_keys,
        accept_unsigned,
        loads,
        compression,
        serializer,
    )
}

/// `__init__`'s TLS file keywords: `tls_ca_file`, `tls_cert_file`, `tls_key_file`,
/// `tls_server_name`.
pub(super) fn tls_options(
    (ca_file, cert_file, key_file, server_name): (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
) -> TlsOptions {
    TlsOptions {
        ca_file,
        cert_file,
        key_file,
        server_name,
    }
}

/// `_pylibmc.client(servers, binary=False, username=None, password=None, behaviors=None)`,
/// plus fastmc's keyword-only TLS arguments; checked and applied in pylibmc's order.
pub(super) fn init(
    slf: &Bound<'_, PyClient>,
    servers: &Bound<'_, PyAny>,
    binary: Option<&Bound<'_, PyAny>>,
    sasl: (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    behaviors: Option<&Bound<'_, PyAny>>,
    tls: bool,
    tls_options: TlsOptions,
) -> PyResult<()> {
    let this = slf.get();
    let binary = match binary {
        None => false,
        Some(b) => {
            require_int(b)?;
            b.extract::<i64>()? != 0
        }
    };
    let mut security = Security {
        sasl: credentials(sasl, binary)?,
        ..Security::default()
    };
    // Any TLS argument turns TLS on.
    if tls || tls_options != TlsOptions::default() {
        let t = released(slf.py(), || Tls::new(tls_options))
            .map_err(|m| plain_error(format!("TLS setup failed: {m}")))?;
        security.tls = Some(t);
    }
    let specs = parse_servers(servers)?;
    // Behaviors apply before the servers are added, as in pylibmc.
    let mut b = Behaviors {
        binary,
        security: Arc::new(security),
        ..Behaviors::default()
    };
    let namespace = match behaviors.filter(|d| !d.is_none()) {
        None => Vec::new(),
        Some(d) => {
            let d = d
                .cast::<PyDict>()
                .map_err(|_| PyTypeError::new_err("behaviors must be a dict"))?;
            let mut plan = BehaviorPlan::read(d);
            let namespace = plan.namespace.take();
            let applied = plan.apply(this, &mut b, binary);
            plan.outcome(applied)?;
            namespace.unwrap_or_default()
        }
    };
    let flags = BehaviorFlags::of(&b);
    let core =
        Client::new(specs, b, namespace).map_err(|e| errors::op_error(Op::ServerAdd, None, &e))?;
    *this.core.write() = Some(Arc::new(core));
    this.set_flags(flags);
    this.binary.store(binary, Ordering::Relaxed);
    note_serializer_overrides(slf)
}

/// SASL credentials: both or neither, str, and only with the binary protocol.
fn credentials(
    (username, password): (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    binary: bool,
) -> PyResult<Option<Credentials>> {
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
        (None, None) => Ok(None),
        (Some(_), None) | (None, Some(_)) => Err(PyTypeError::new_err(
            "SASL requires both username and password",
        )),
        (Some(_), Some(_)) if !binary => Err(PyTypeError::new_err(
            "SASL requires the memcached binary protocol",
        )),
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.extract::<String>()?.into_bytes(),
            password: p.extract::<String>()?.into_bytes(),
        })),
    }
}

/// Serializer overrides count at class level only, detected at construction as pylibmc does.
fn note_serializer_overrides(slf: &Bound<'_, PyClient>) -> PyResult<()> {
    let this = slf.get();
    let base = slf.py().get_type::<PyClient>();
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
    let (core, flags) = detached(slf.py(), this, |core| {
        let c = core.clone_client();
        let flags = BehaviorFlags::of(&c.behaviors());
        Ok((c, flags))
    })?;
    *other.core.write() = Some(Arc::new(core));
    other.set_flags(flags);
    other
        .binary
        .store(this.binary.load(Ordering::Relaxed), Ordering::Relaxed);
    other.pickle_protocol.store(
        this.pickle_protocol.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
    other.set_values(this.values().copy(slf.py()));
    other
        .max_inflate
        .store(this.max_inflate.load(Ordering::Relaxed), Ordering::Relaxed);
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
    let (b, socket_sizes) = detached(py, this, |core| {
        let b = core.behaviors();
        // Never set: what a live connection to the first server has, as pylibmc reads it.
        let unset = |name| b.get(name).is_none();
        let sizes = if unset("_socket_send_size") || unset("_socket_recv_size") {
            core.socket_buffer_sizes()
        } else {
            (0, 0)
        };
        Ok((b, sizes))
    })?;
    let d = PyDict::new(py);
    for name in ALL_BEHAVIORS.iter().chain(FASTMC_BEHAVIORS.iter()) {
        let v = match *name {
            "pickle_protocol" => this.pickle_protocol.load(Ordering::Relaxed),
            "max_inflate" => match this.max_inflate.load(Ordering::Relaxed) {
                usize::MAX => 0,
                v => v as i64,
            },
            "_socket_send_size" => b.get(name).unwrap_or(socket_sizes.0 as i64),
            "_socket_recv_size" => b.get(name).unwrap_or(socket_sizes.1 as i64),
            n => b.get(n).unwrap_or(0),
        };
        // fastmc's own behaviors appear only once set to something else than their default,
        // so the read-back stays pylibmc's.
        if FASTMC_BEHAVIORS.contains(name) && v == fastmc_default(name) {
            continue;
        }
        d.set_item(*name, v)?;
    }
    Ok(d.unbind())
}

/// A fastmc behavior's default, at which `get_behaviors` leaves it out.
fn fastmc_default(name: &str) -> i64 {
    match name {
        "max_inflate" => DEFAULT_MAX_INFLATE as i64,
        n => Behaviors::default().get(n).unwrap_or(0),
    }
}

/// Set behaviors from a dict of numbers (names as in `all_behaviors`, plus `namespace`). The dict
/// is read into a `BehaviorPlan` first, attached; the core's lock is then taken detached and only
/// pure Rust runs under it.
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
    this.flags()?; // not initialized: raised before the dict is read
    let mut plan = BehaviorPlan::read(d);
    let namespace = plan.namespace.take();
    let binary = this.binary.load(Ordering::Relaxed);
    let applied = detached(slf.py(), this, |core| {
        let mut rejected_at = 0;
        let applied = core.update_behaviors(|b| {
            let r = plan.apply(this, b, binary);
            this.set_flags(BehaviorFlags::of(b));
            r.map_err(|(i, rejected)| {
                rejected_at = i;
                rejected
            })
        });
        if let (Ok(()), Some(ns)) = (&applied, namespace) {
            core.set_namespace(ns);
        }
        Ok(applied.map_err(|rejected| (rejected_at, rejected)))
    })?;
    plan.outcome(applied)
}

/// A behaviors dict read into plain Rust while attached (reading it may run Python code: a dict
/// lookup, an int subclass's `__and__`), so that applying it runs no Python code under the core's
/// lock. pylibmc walks the behaviors in its fixed order, whatever the dict's order, applying each
/// as it goes, then reads `namespace`; the plan keeps that order and its outcome: the values up to
/// the first that does not convert, and that error, raised after the ones before it are applied.
struct BehaviorPlan {
    values: Vec<(&'static str, i64)>,
    /// What ended the walk early: a value that is not an int, a bad namespace.
    stop: Option<PyErr>,
    /// The namespace to set once every value is applied (only if the walk did not stop).
    namespace: Option<Vec<u8>>,
}

impl BehaviorPlan {
    fn read(d: &Bound<'_, PyDict>) -> Self {
        let mut values = Vec::new();
        match Self::walk(d, &mut values) {
            Ok(namespace) => BehaviorPlan {
                values,
                stop: None,
                namespace,
            },
            Err(e) => BehaviorPlan {
                values,
                stop: Some(e),
                namespace: None,
            },
        }
    }

    fn walk(
        d: &Bound<'_, PyDict>,
        values: &mut Vec<(&'static str, i64)>,
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
            values.push((name, wrap_i64(&v)?));
        }
        match d.get_item("namespace")? {
            None => Ok(None),
            Some(ns) if ns.is_none() => Ok(Some(Vec::new())),
            Some(ns) => match ns.cast::<PyBytes>() {
                Ok(bts) if !bts.as_bytes().is_empty() => Ok(Some(bts.as_bytes().to_vec())),
                Ok(_) => Err(errors::invalid_arguments(
                    Op::CallbackSet,
                    Some("namespace must not be empty"),
                )),
                Err(_) => Err(PyTypeError::new_err("namespace must be bytes")),
            },
        }
    }

    /// Apply the values in order: pure Rust, run under the core's lock by `set_behaviors`.
    /// `pickle_protocol` is the binding's own. On a rejected value, the ones before it stay
    /// applied (as in libmemcached): `Err((its index, the rejection))`.
    fn apply(
        &self,
        this: &PyClient,
        b: &mut Behaviors,
        binary: bool,
    ) -> Result<(), (usize, Rejected)> {
        for (i, &(name, value)) in self.values.iter().enumerate() {
            if name == "pickle_protocol" {
                this.pickle_protocol.store(value, Ordering::Relaxed);
                continue;
            }
            if name == "max_inflate" {
                let max = match value {
                    0 => usize::MAX,
                    v => usize::try_from(v).map_err(|_| {
                        (
                            i,
                            Rejected {
                                rc: RC_INVALID_ARGUMENTS,
                            },
                        )
                    })?,
                };
                this.max_inflate.store(max, Ordering::Relaxed);
                continue;
            }
            b.set(name, value, binary)
                .map_err(|rejected| (i, rejected))?;
        }
        Ok(())
    }

    /// What to raise once applied: the rejection, else what stopped the walk.
    fn outcome(self, applied: Result<(), (usize, Rejected)>) -> PyResult<()> {
        match applied {
            Err((i, rejected)) => {
                let (name, value) = self.values.get(i).copied().unwrap_or(("", 0));
                Err(errors::behavior_rejected(&rejected, name, value))
            }
            Ok(()) => self.stop.map_or(Ok(()), Err),
        }
    }
}
