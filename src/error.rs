//! The core error type. Every failure the core can produce is one `Error`; the binding maps each
//! kind to the pylibmc exception class and message in one place (`py/errors.rs`). Depends on
//! nothing.
//!
//! Two families matter to the rest of the core:
//! - per-key outcomes that leave the connection in sync (a `CLIENT_ERROR` or `SERVER_ERROR` line
//!   for one request, a key rejected before sending): `is_resumable()` is true;
//! - connection failures (I/O errors, timeouts, garbage from the server, a closed socket): the
//!   connection is dropped, and `server::health::verdict` says what it costs the server.

use std::{fmt, io};

/// A failed read or write: its kind, which decides whether a pooled connection was merely stale
/// (`Error::is_stale_connection`), and the text shown to the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoFailure {
    pub kind: io::ErrorKind,
    pub detail: String,
}

impl IoFailure {
    /// The kind and text of an I/O error.
    pub fn from_io(e: &io::Error) -> IoFailure {
        IoFailure {
            kind: e.kind(),
            detail: e.to_string(),
        }
    }

    /// The server closed the connection (a read found its end).
    pub fn closed() -> IoFailure {
        IoFailure {
            kind: io::ErrorKind::UnexpectedEof,
            detail: "connection closed by server".into(),
        }
    }

    /// A TLS failure: `kind` from the I/O error underneath, if there was one.
    pub fn tls(kind: io::ErrorKind, e: impl fmt::Display) -> IoFailure {
        IoFailure {
            kind,
            detail: format!("TLS: {e}"),
        }
    }
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// Every failure the core reports; `py/errors.rs` maps each to pylibmc's exception class.
pub enum Error {
    /// The host name could not be resolved.
    HostLookup(String),
    /// Connecting failed (refused, unreachable, connect timeout).
    Connect(String),
    /// Writing to the socket failed.
    Write(IoFailure),
    /// Reading from the socket failed, or the peer closed the connection.
    Read(IoFailure),
    /// No progress within the configured poll/receive/send timeout.
    Timeout,
    /// The server sent bytes that are not the protocol.
    Protocol(String),
    /// The server is in its retry window after a failure (libmemcached's "temporarily disabled").
    ServerDown,
    /// The server was ejected after too many failures.
    ServerDead,
    /// `CLIENT_ERROR <msg>` for one request.
    ClientError(String),
    /// `SERVER_ERROR <msg>` for one request (other than the too-large / out-of-memory cases).
    ServerError(String),
    /// `SERVER_ERROR object too large for cache`.
    TooBig,
    /// `SERVER_ERROR out of memory storing object`.
    OutOfMemory,
    /// A plain `ERROR` reply: the server did not know the command.
    UnknownCommand,
    /// A key the client refused to send (bad characters, too long, empty where not allowed).
    BadKey(String),
    /// The operation is not possible with this configuration.
    NotSupported(String),
    /// No server is configured.
    NoServers,
    /// SASL authentication failed, or the server demands it (binary protocol).
    Auth(String),
    /// A binary-protocol status the client has no meaning for (e.g. incr on a non-numeric
    /// value): one request failed, the stream is in sync after it.
    UnknownStatus(String),
    /// The client would not (a value announced over `max_value_size`) or could not (the
    /// allocator refused) make room for what the server sent. The reply is left unread, so the
    /// connection is dropped; the server is not blamed for the client's memory.
    Alloc(String),
}

impl Error {
    /// A failed read.
    pub fn read(e: &io::Error) -> Error {
        Error::Read(IoFailure::from_io(e))
    }

    /// A failed write.
    pub fn write(e: &io::Error) -> Error {
        Error::Write(IoFailure::from_io(e))
    }

    /// Whether this failure on a reused connection means "the server closed it while idle"
    /// (end of stream, reset, broken pipe), so that a request that got no reply byte can be
    /// replayed on a new connection without any risk of doing it twice. Decided by the I/O
    /// error's kind, never its text (which differs by OS and libc).
    pub fn is_stale_connection(&self) -> bool {
        match self {
            Error::Read(f) | Error::Write(f) => matches!(
                f.kind,
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
            ),
            _ => false,
        }
    }

    /// Whether a connection may go back to the pool after this error: only errors that were a
    /// complete, well-formed reply (or that happened before anything was sent) qualify.
    pub fn is_resumable(&self) -> bool {
        self.kind().resumable
    }

    /// libmemcached's return code for this error (pylibmc exposes it as `retcode`).
    pub fn retcode(&self) -> u32 {
        self.kind().retcode
    }

    /// What this error is, as the table below says.
    pub fn kind(&self) -> Kind {
        // One row per variant: libmemcached's return code, whether the connection stays usable
        // (a complete reply, or nothing sent), and whether it counts against the server's
        // health (`server::health::verdict`, which adds only its context rules). The binding
        // names pylibmc's class from the return code (`py::errors`).
        let (retcode, resumable, blames_server) = match self {
            //                               code  resumable  blames the server
            Error::HostLookup(_) => (2, false, true),
            Error::Connect(_) => (3, false, true),
            Error::Write(_) => (5, false, true),
            Error::Read(_) => (6, false, true),
            Error::Timeout => (31, false, true),
            Error::Protocol(_) => (8, false, true),
            // Skipped already: the server's record is what raised it.
            Error::ServerDown => (47, false, false),
            Error::ServerDead => (35, false, false),
            // A reply to one request: the server is alive and the stream in sync.
            Error::ClientError(_) => (9, true, false),
            Error::ServerError(_) => (10, true, false),
            Error::TooBig => (37, true, false),
            Error::OutOfMemory => (48, true, false),
            Error::UnknownCommand => (8, true, false),
            Error::UnknownStatus(_) => (7, true, false),
            Error::Auth(_) => (41, true, false),
            // Refused before anything was sent: a key, or a configuration.
            Error::BadKey(_) => (33, true, false),
            Error::NotSupported(_) => (28, true, false),
            Error::NoServers => (20, false, false),
            // The client's own memory: the reply is left unread, the connection dropped.
            Error::Alloc(_) => (17, false, false),
        };
        Kind {
            retcode,
            resumable,
            blames_server,
        }
    }
}

/// What an error is (`Error::kind`), as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// libmemcached's return code.
    pub retcode: u32,
    /// The connection may go back to the pool.
    pub resumable: bool,
    /// The failure counts against the server's health (unless its context says otherwise).
    pub blames_server: bool,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::HostLookup(m) => write!(f, "HOSTNAME LOOKUP FAILURE ({m})"),
            Error::Connect(m) => write!(f, "CONNECTION FAILURE ({m})"),
            Error::Write(m) => write!(f, "WRITE FAILURE ({m})"),
            Error::Read(m) => write!(f, "READ FAILURE ({m})"),
            Error::Timeout => f.write_str("A TIMEOUT OCCURRED"),
            Error::Protocol(m) => write!(f, "PROTOCOL ERROR ({m})"),
            Error::ServerDown => f.write_str("SERVER HAS FAILED AND IS DISABLED UNTIL TIMED RETRY"),
            Error::ServerDead => f.write_str("SERVER IS MARKED DEAD"),
            Error::ClientError(m) => write!(f, "CLIENT ERROR ({m})"),
            Error::ServerError(m) => write!(f, "SERVER ERROR ({m})"),
            Error::TooBig => f.write_str("ITEM TOO BIG"),
            Error::OutOfMemory => f.write_str("SERVER OUT OF MEMORY"),
            Error::UnknownCommand => f.write_str("UNKNOWN COMMAND (server replied ERROR)"),
            Error::BadKey(m) => write!(f, "A BAD KEY WAS PROVIDED/CHARACTERS OUT OF RANGE ({m})"),
            Error::NotSupported(m) => write!(f, "ACTION NOT SUPPORTED ({m})"),
            Error::NoServers => f.write_str("NO SERVERS DEFINED"),
            Error::Auth(m) => write!(f, "AUTHENTICATION FAILURE ({m})"),
            Error::UnknownStatus(m) => write!(f, "UNKNOWN READ FAILURE ({m})"),
            Error::Alloc(m) => write!(f, "MEMORY ALLOCATION FAILURE ({m})"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::collections::TryReserveError> for Error {
    /// The allocator refused room for bytes the server announced or sent.
    fn from(e: std::collections::TryReserveError) -> Error {
        Error::Alloc(e.to_string())
    }
}

/// The core's result type.
pub type Result<T> = std::result::Result<T, Error>;
