//! The binding's one error edge: pylibmc's exception classes (same names, same flat hierarchy
//! under `Error`, same `retcode` class attributes, `__module__ == "pylibmc"`), the one table that
//! maps core errors to them, and every pylibmc message shape ("error N from memcached_x(key): ...",
//! "... SOME ERRORS WERE REPORTED", "returned 38", "<n> keys failed"), one constructor each, named
//! by `Op`. No other file of `py/` spells a libmemcached function name or an "error N" message (a
//! test below checks). The constructors need no interpreter: they build lazy `PyErr`s, so the
//! closures of `io::detached` may return them. Uses pyo3, `crate::error`, `crate::behaviors`'s
//! `Rejected` and return codes, `crate::protocol::StoreCmd`.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};
use pyo3::{create_exception, PyErrArguments, PyTypeInfo};

use crate::behaviors::{Rejected, RC_INVALID_ARGUMENTS};
use crate::error::Error as CoreError;
use crate::protocol::StoreCmd;

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

create_exception!(
    pylibmc,
    RefusedValueError,
    Error,
    "A fetched value the client's value policy refuses: a pickle where pickles are refused, an \
     unsigned pickle where only signed ones are read, a bad signature, a class outside the \
     allow list, or a value that inflates beyond max_inflate (a fastmc extension; \
     docs/security.md)."
);

/// The class of every bad-key error fastmc raises: a `BadKeyProvided` that is also each class
/// pylibmc raised for such a key in text mode, where it sent the key and the server (or the
/// stream it corrupted) answered: `ClientError`, `ProtocolError` or `SocketCreateError`. So
/// `except BadKeyProvided` and the handlers written for pylibmc both catch it. Not listed in
/// `pylibmc.exceptions`; its bases are set at import (`init_retcodes`).
mod compat {
    use pyo3::create_exception;
    create_exception!(pylibmc, BadKeyProvided, super::BadKeyProvided);
}

/// Set the `retcode` class attributes and the compatible bad-key class's bases (once, at
/// import).
pub fn init_retcodes(py: Python<'_>) -> PyResult<()> {
    for (_, cls, rc) in all_exceptions(py) {
        if let Some(rc) = rc {
            cls.setattr("retcode", rc)?;
        }
    }
    let bases = (
        BadKeyProvided::type_object(py),
        ClientError::type_object(py),
        ProtocolError::type_object(py),
        SocketCreateError::type_object(py),
    );
    compat::BadKeyProvided::type_object(py).setattr("__bases__", bases)?;
    Ok(())
}

/// libmemcached's NOTFOUND, for a store answered NOT FOUND (no core error carries it).
const RC_NOTFOUND: u32 = 16;
/// libmemcached's MEMORY_ALLOCATION_FAILURE (see `allocation_failure`).
const RC_MEMORY_ALLOCATION_FAILURE: u32 = 17;
/// libmemcached's SOME_ERRORS, for a whole-client command that failed on some server.
const RC_SOME_ERRORS: u32 = 19;
/// libmemcached's BAD_KEY_PROVIDED, for a key refused before the core saw it.
const RC_BAD_KEY: u32 = 33;

/// What failed, as pylibmc names it in its messages (mostly the libmemcached function).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    Gets,
    /// set, add, replace, append, prepend, cas.
    Store(StoreCmd),
    Delete,
    Touch,
    Mget,
    GetsMulti,
    SetMulti,
    AddMulti,
    ReplaceMulti,
    TouchMulti,
    ServerAdd,
    FlushAll,
    GetStats,
    BehaviorSet,
    CallbackSet,
    WarmUp,
    Debug,
}

impl Op {
    pub fn libmemcached_name(self) -> &'static str {
        match self {
            Op::Get => "memcached_get",
            Op::Gets => "memcached_gets",
            Op::Store(StoreCmd::Set) => "memcached_set",
            Op::Store(StoreCmd::Add) => "memcached_add",
            Op::Store(StoreCmd::Replace) => "memcached_replace",
            Op::Store(StoreCmd::Append) => "memcached_append",
            Op::Store(StoreCmd::Prepend) => "memcached_prepend",
            Op::Store(StoreCmd::Cas) => "memcached_cas",
            Op::Delete => "memcached_delete",
            Op::Touch => "memcached_touch",
            Op::Mget => "memcached_mget",
            Op::GetsMulti => "memcached_gets_multi",
            Op::SetMulti => "memcached_set_multi",
            Op::AddMulti => "memcached_add_multi",
            Op::ReplaceMulti => "memcached_replace_multi",
            Op::TouchMulti => "memcached_touch_multi",
            Op::ServerAdd => "memcached_server_add",
            // pylibmc's own names for these two.
            Op::FlushAll => "flush_all",
            Op::GetStats => "get_stats",
            Op::BehaviorSet => "memcached_behavior_set",
            // fastmc's own
            Op::WarmUp => "warm_up",
            Op::Debug => "debug",
            Op::CallbackSet => "memcached_callback_set",
        }
    }

    /// A multi store (append, prepend and cas have no multi form: they read as set_multi).
    pub fn store_multi(cmd: StoreCmd) -> Op {
        match cmd {
            StoreCmd::Add => Op::AddMulti,
            StoreCmd::Replace => Op::ReplaceMulti,
            _ => Op::SetMulti,
        }
    }
}

/// pylibmc's exception class for each libmemcached return code the core's errors have
/// (`Error::kind`), once: `class_name_of_retcode` (for `metrics()`) and `of_class` (raising)
/// both follow it.
macro_rules! retcode_classes {
    (otherwise $other:ident; $($rc:pat => $class:ident $(in $module:ident)?,)*) => {
        /// The pylibmc exception class raised for libmemcached return code `rc`.
        pub fn class_name_of_retcode(rc: u32) -> &'static str {
            match rc {
                $($rc => stringify!($class),)*
                _ => stringify!($other),
            }
        }

        /// An exception of the pylibmc class for a core error (by its return code), built
        /// lazily with `args`.
        fn of_class<A>(e: &CoreError, args: A) -> PyErr
        where
            A: PyErrArguments + Send + Sync + 'static,
        {
            match e.retcode() {
                $($rc => $($module::)? $class::new_err(args),)*
                _ => $other::new_err(args),
            }
        }
    };
}

retcode_classes! {
    // libmemcached's TIMEOUT (31) and AUTH_FAILURE (41) have no class of their own in pylibmc
    otherwise Error;
    2 => HostLookupError,
    3 => ConnectionError,
    5 => WriteError,
    6 => ReadError,
    7 => UnknownReadFailure,
    // a reply that is not the protocol, and a command the server did not know (ERROR)
    8 => ProtocolError,
    9 => ClientError,
    // SERVER_ERROR, and out of memory storing an object
    10 | 48 => ServerError,
    17 => AllocationError,
    20 => NoServers,
    28 => NotSupportedError,
    // (the compatible class: also what pylibmc raised for such a key, see `compat`)
    33 => BadKeyProvided in compat,
    35 => ServerDead,
    37 => TooBig,
    47 => ServerDown,
}

/// `error <rc> from <op>[(<key>)]: <detail>`, of the core error's class (pylibmc prints at most
/// 32 bytes of the key). TooBig has no arguments, as in pylibmc.
pub fn op_error(op: Op, key: Option<&[u8]>, e: &CoreError) -> PyErr {
    if matches!(e, CoreError::TooBig) {
        return of_class(e, ());
    }
    let (rc, name) = (e.retcode(), op.libmemcached_name());
    of_class(e, format!("error {rc} from {name}{}: {e}", key_part(key)))
}

/// `(<key>)` as pylibmc prints it in a message (at most 32 bytes), or nothing.
fn key_part(key: Option<&[u8]>) -> String {
    match key {
        Some(k) if !k.is_empty() => {
            format!("({})", String::from_utf8_lossy(&k[..k.len().min(32)]))
        }
        _ => String::new(),
    }
}

/// A store answered NOT FOUND: `error 16 from <op>[(<key>)]` (pylibmc prints at most 32 bytes
/// of the key; libmemcached records no error text for this answer).
pub fn not_found(op: Op, key: Option<&[u8]>) -> PyErr {
    let name = op.libmemcached_name();
    NotFound::new_err(format!("error {RC_NOTFOUND} from {name}{}", key_part(key)))
}

/// libmemcached's MEMORY_ALLOCATION_FAILURE, which it reports when a number does not fit the 20
/// characters it formats a text command's numbers into: `error 17 from <op>(<key>): MEMORY
/// ALLOCATION FAILURE`.
pub fn allocation_failure(op: Op, key: &[u8]) -> PyErr {
    let name = op.libmemcached_name();
    AllocationError::new_err(format!(
        "error {RC_MEMORY_ALLOCATION_FAILURE} from {name}{}: MEMORY ALLOCATION FAILURE",
        key_part(Some(key))
    ))
}

/// A fetched value that could not be copied into a Python object: `MEMORY ALLOCATION FAILURE`.
pub fn value_allocation_failure(len: usize) -> PyErr {
    AllocationError::new_err(format!(
        "error {RC_MEMORY_ALLOCATION_FAILURE}: MEMORY ALLOCATION FAILURE (a value of {len} bytes)"
    ))
}

/// A whole-client command that failed on a server: `error 19 from <op>: SOME ERRORS WERE
/// REPORTED (<detail>)`.
pub fn some_errors(op: Op, e: &CoreError) -> PyErr {
    let name = op.libmemcached_name();
    SomeErrors::new_err(format!(
        "error {RC_SOME_ERRORS} from {name}: SOME ERRORS WERE REPORTED ({e})"
    ))
}

/// libmemcached's INVALID_ARGUMENTS: `error 38 from <op>[: <detail>]`, plain `Error`.
pub fn invalid_arguments(op: Op, detail: Option<&str>) -> PyErr {
    let name = op.libmemcached_name();
    Error::new_err(match detail {
        None => format!("error {RC_INVALID_ARGUMENTS} from {name}"),
        Some(d) => format!("error {RC_INVALID_ARGUMENTS} from {name}: {d}"),
    })
}

/// A behavior value the core refused: `memcached_behavior_set returned <rc> for behavior
/// '<name>' = <value>`, plain `Error`.
pub fn behavior_rejected(rejected: &Rejected, behavior: &str, value: i64) -> PyErr {
    let (rc, name) = (rejected.rc, Op::BehaviorSet.libmemcached_name());
    Error::new_err(format!(
        "{name} returned {rc} for behavior '{behavior}' = {value}"
    ))
}

/// libmemcached's text for BAD_KEY_PROVIDED, the detail of a key (or stats group) it refuses.
pub const BAD_KEY_DETAIL: &str = "A BAD KEY WAS PROVIDED/CHARACTERS OUT OF RANGE";

/// A key refused before any I/O: `error 33 from <op>: <detail>`.
pub fn bad_key(op: Op, detail: &str) -> PyErr {
    let name = op.libmemcached_name();
    compat::BadKeyProvided::new_err(format!("error {RC_BAD_KEY} from {name}: {detail}"))
}

/// What libmemcached's loop over an incr_multi's keys ended on, which picks pylibmc's class.
#[derive(Clone, Copy, Debug)]
pub enum ArithRc<'a> {
    /// The last key was incremented: libmemcached's SUCCESS, pylibmc's base `Error`.
    Succeeded,
    NotFound,
    /// More than one key failed: pylibmc's base `Error`, whatever the last key did.
    Generic,
    Failed(&'a CoreError),
}

/// pylibmc's incr/decr report after every key was tried: `<n> keys not found` (NotFound) when
/// every failure was a miss, else `<n> keys failed` of the class of `last`.
pub fn keys_failed(n: usize, all_misses: bool, last: ArithRc<'_>) -> PyErr {
    if all_misses {
        return NotFound::new_err(format!("{n} keys not found"));
    }
    let msg = format!("{n} keys failed");
    match last {
        ArithRc::NotFound => NotFound::new_err(msg),
        ArithRc::Failed(e) => of_class(e, msg),
        ArithRc::Succeeded | ArithRc::Generic => Error::new_err(msg),
    }
}

/// Attach the keys that failed to an exception raised after a whole batch was processed.
pub fn with_failed_keys(py: Python<'_>, err: PyErr, failed: &Bound<'_, PyList>) -> PyErr {
    // Setting an attribute on a fresh exception instance fails only if memory does.
    let _ = err.value(py).setattr("failed_keys", failed);
    err
}

/// The core answered a batch with fewer outcomes than requests (a broken invariant).
pub fn no_result() -> PyErr {
    Error::new_err("no result")
}

/// A refused value's error, naming the key when there is one.
pub fn refused(key: Option<&[u8]>, why: &str) -> PyErr {
    match key {
        Some(k) => RefusedValueError::new_err(format!(
            "value of key {:?} refused: {why}",
            String::from_utf8_lossy(k)
        )),
        None => RefusedValueError::new_err(format!("value refused: {why}")),
    }
}

pub fn plain_error(msg: impl Into<String>) -> PyErr {
    Error::new_err(msg.into())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, recursively.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The contents of the string literals on a line of code (comment lines skipped; good enough
    /// for this crate's sources, which put no `"` in a `//` comment after code).
    fn literals(line: &str) -> Vec<&str> {
        if line.trim_start().starts_with("//") {
            return Vec::new();
        }
        line.split('"').skip(1).step_by(2).collect()
    }

    /// A pylibmc message shape or a libmemcached function name spelled out in a literal.
    fn is_message_shape(lit: &str) -> bool {
        let error_n = lit
            .strip_prefix("error ")
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_digit() || c == '{');
        let function = lit
            .match_indices("memcached_")
            .any(|(i, _)| !lit[..i].ends_with("lib"));
        error_n || function
    }

    #[test]
    fn messages_are_built_only_in_errors_rs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/py");
        let mut files = Vec::new();
        rust_files(&root, &mut files);
        assert!(files.len() > 5, "found only {files:?}");
        let mut found = Vec::new();
        let mut detach_sites = Vec::new();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            for (n, line) in text.lines().enumerate() {
                let place = format!("{}:{}", path.display(), n + 1);
                // Spelled in two pieces so that this line is not a match itself.
                if line.contains(concat!("py", ".detach")) {
                    detach_sites.push(place.clone());
                }
                if path.ends_with("py/errors.rs") {
                    continue;
                }
                if literals(line).into_iter().any(is_message_shape) {
                    found.push(place);
                }
            }
        }
        assert!(
            found.is_empty(),
            "message shapes outside errors.rs: {found:?}"
        );
        assert_eq!(detach_sites.len(), 1, "detach sites: {detach_sites:?}");
    }

    #[test]
    fn the_check_sees_what_it_looks_for() {
        assert!(literals(r#"    Err(x("error 16 from memcached_replace"))"#)
            .into_iter()
            .any(is_message_shape));
        assert!(is_message_shape("error {rc} from get_stats"));
        assert!(is_message_shape("memcached_set_multi"));
        assert!(!is_message_shape("libmemcached_version"));
        assert!(!is_message_shape("unknown memcached key flags {other}"));
        assert!(literals("// \"error 19\" in a comment").is_empty());
    }
}
