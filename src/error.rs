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
        matches!(
            self,
            Error::ClientError(_)
                | Error::ServerError(_)
                | Error::TooBig
                | Error::OutOfMemory
                | Error::UnknownCommand
                | Error::BadKey(_)
                | Error::NotSupported(_)
                | Error::Auth(_)
                | Error::UnknownStatus(_)
        )
    }

    /// libmemcached's return code for this error (pylibmc exposes it as `retcode`).
    pub fn retcode(&self) -> u32 {
        match self {
            Error::HostLookup(_) => 2,
            Error::Connect(_) => 3,
            Error::Write(_) => 5,
            Error::Read(_) => 6,
            Error::Timeout => 31,
            Error::Protocol(_) => 8,
            Error::ServerDown => 47,
            Error::ServerDead => 35,
            Error::ClientError(_) => 9,
            Error::ServerError(_) => 10,
            Error::TooBig => 37,
            Error::OutOfMemory => 48,
            Error::UnknownCommand => 8,
            Error::BadKey(_) => 33,
            Error::NotSupported(_) => 28,
            Error::NoServers => 20,
            Error::Auth(_) => 41,
            Error::UnknownStatus(_) => 7,
            Error::Alloc(_) => 17,
        }
    }
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
