//! pylibmc's exception classes (same names, same flat hierarchy under `Error`, same `retcode`
//! class attributes, `__module__ == "pylibmc"`) and the one table that maps core errors to them.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::{create_exception, PyTypeInfo};

use crate::error::Error as CoreError;

create_exception!(
    pylibmc,
    Error,
    PyException,
    "Base class for all pylibmc (and fastmc) errors."
);

macro_rules! subclasses {
    ($($name:ident = $rc:expr),* $(,)?) => {
        $( create_exception!(pylibmc, $name, Error); )*

        /// `(name, class, retcode)` in pylibmc's order (`pylibmc.exceptions`).
        pub fn all_exceptions(py: Python<'_>) -> Vec<(&'static str, Bound<'_, PyType>, Option<u32>)> {
            let mut v = vec![
                ("Error", Error::type_object(py), None),
            ];
            $( v.push((stringify!($name), $name::type_object(py), $rc)); )*
            v
        }
    };
}

subclasses! {
    CacheMiss = None,
    Failure = Some(1),
    HostLookupError = Some(2),
    ConnectionError = Some(3),
    ConnectionBindError = Some(4),
    WriteError = Some(5),
    ReadError = Some(6),
    UnknownReadFailure = Some(7),
    ProtocolError = Some(8),
    ClientError = Some(9),
    ServerError = Some(10),
    SocketCreateError = Some(11),
    DataExists = Some(12),
    DataDoesNotExist = Some(13),
    NotFound = Some(16),
    AllocationError = Some(17),
    SomeErrors = Some(19),
    NoServers = Some(20),
    UnixSocketError = Some(27),
    NotSupportedError = Some(28),
    FetchNotFinished = Some(30),
    BadKeyProvided = Some(33),
    InvalidHostProtocolError = Some(34),
    ServerDead = Some(35),
    ServerDown = Some(47),
    TooBig = Some(37),
    UnknownStatKey = Some(36),
}

/// Set the `retcode` class attributes (done once at import).
pub fn init_retcodes(py: Python<'_>) -> PyResult<()> {
    for (_, cls, rc) in all_exceptions(py) {
        if let Some(rc) = rc {
            cls.setattr("retcode", rc)?;
        }
    }
    Ok(())
}

/// The pylibmc class for a core error (the libmemcached code is `CoreError::retcode`).
fn class_of<'py>(py: Python<'py>, e: &CoreError) -> Bound<'py, PyType> {
    match e {
        CoreError::HostLookup(_) => HostLookupError::type_object(py),
        CoreError::Connect(_) => ConnectionError::type_object(py),
        CoreError::Write(_) => WriteError::type_object(py),
        CoreError::Read(_) => ReadError::type_object(py),
        // libmemcached's MEMCACHED_TIMEOUT has no class of its own in pylibmc.
        CoreError::Timeout => Error::type_object(py),
        CoreError::Protocol(_) | CoreError::UnknownCommand => ProtocolError::type_object(py),
        CoreError::ServerDown => ServerDown::type_object(py),
        CoreError::ServerDead => ServerDead::type_object(py),
        CoreError::ClientError(_) => ClientError::type_object(py),
        CoreError::ServerError(_) | CoreError::OutOfMemory => ServerError::type_object(py),
        CoreError::TooBig => TooBig::type_object(py),
        CoreError::BadKey(_) => BadKeyProvided::type_object(py),
        CoreError::NotSupported(_) => NotSupportedError::type_object(py),
        CoreError::NoServers => NoServers::type_object(py),
        // libmemcached's AUTH_FAILURE (41) has no class of its own in pylibmc.
        CoreError::Auth(_) => Error::type_object(py),
        CoreError::UnknownStatus(_) => UnknownReadFailure::type_object(py),
    }
}

/// pylibmc's message shape: `error <rc> from <what>[(<key>)]: <detail>`.
pub fn op_error(py: Python<'_>, what: &str, key: Option<&[u8]>, e: &CoreError) -> PyErr {
    let cls = class_of(py, e);
    let rc = e.retcode();
    if matches!(e, CoreError::TooBig) {
        // pylibmc raises TooBig with no arguments.
        return PyErr::from_type(cls, ());
    }
    let key_part = match key {
        Some(k) if !k.is_empty() => {
            format!("({})", String::from_utf8_lossy(&k[..k.len().min(32)]))
        }
        _ => String::new(),
    };
    PyErr::from_type(cls, format!("error {rc} from {what}{key_part}: {e}"))
}

/// An error with a plain message, of the class the core error maps to.
pub fn error_with_message(py: Python<'_>, e: &CoreError, msg: String) -> PyErr {
    let cls = class_of(py, e);
    PyErr::from_type(cls, msg)
}

pub fn plain_error(msg: impl Into<String>) -> PyErr {
    Error::new_err(msg.into())
}
