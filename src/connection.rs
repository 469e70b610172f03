//! One socket to one server (TCP or UNIX), with its read and write buffers.
//!
//! Sockets stay in blocking mode with kernel send/receive timeouts, so the common single-server
//! request costs one `send` and one `recv`; the poll loop in `client` drives many connections at
//! once with per-call non-blocking flags instead. Depends on `error`, `security` and the binary
//! protocol's SASL encoder.
//!
//! With TLS, a rustls session sits between the buffers and the socket: the handshake (and SASL)
//! run blocking inside `connect`; afterwards plaintext goes in and out through the same
//! non-blocking calls, and `pending_write` tells the poll loop that sealed records still wait for
//! the socket.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::net::{RecvFlags, SendFlags};

use crate::error::{Error, IoFailure, Result};
use crate::protocol::{binary, Parsed};
use crate::security::{Credentials, Security};

/// Where a server lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp { host: String, port: u16 },
    Unix(String),
}

impl Address {
    /// The name pylibmc reports in `get_stats()`: `host:port`, or `path:0` for a UNIX socket.
    pub fn display_name(&self) -> String {
        match self {
            Address::Tcp { host, port } => format!("{host}:{port}"),
            Address::Unix(path) => format!("{path}:0"),
        }
    }
}

/// Socket options taken from the client's behaviors.
#[derive(Clone, Debug)]
pub struct SocketOptions {
    /// The connection speaks the binary protocol (decides how `quit` is said).
    pub binary: bool,
    /// TLS and SASL, done in `connect` before any request.
    pub security: std::sync::Arc<Security>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub tcp_keepalive: bool,
    pub send_buffer: Option<usize>,
    pub recv_buffer: Option<usize>,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// Blocking I/O (with the socket's timeouts), for the handshake and blocking reads.
impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Non-blocking I/O on a socket that stays in blocking mode: per-call `MSG_DONTWAIT`.
struct NonBlocking<'a>(BorrowedFd<'a>);

impl Read for NonBlocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        rustix::net::recv(self.0, buf, RecvFlags::DONTWAIT)
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    }
}

impl Write for NonBlocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        rustix::net::send(self.0, buf, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)
            .map_err(io::Error::from)
    }
    /// rustls hands over many small records at once: one `sendmsg` for all of them.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut control = rustix::net::SendAncillaryBuffer::default();
        rustix::net::sendmsg(
            self.0,
            bufs,
            &mut control,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        )
        .map_err(io::Error::from)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Plaintext handed to rustls per call: bounds what sits sealed in memory ahead of the socket.
const TLS_CHUNK: usize = 64 * 1024;

/// Write sealed TLS records until the socket would block.
fn flush_tls(tls: &mut rustls::ClientConnection, fd: BorrowedFd<'_>) -> Result<()> {
    while tls.wants_write() {
        match tls.write_tls(&mut NonBlocking(fd)) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if io_kind_is_timeout(&e) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::write(&e)),
        }
    }
    Ok(())
}

/// See `Connection::needs_probe`.
const PROBE_AFTER: Duration = Duration::from_millis(1);

const READ_CHUNK: usize = 64 * 1024;
/// A read buffer that grew past this (for a huge value) is given back when the connection idles.
const KEEP_READ_BUF: usize = 1024 * 1024;

pub struct Connection {
    stream: Stream,
    /// The TLS session, when the client uses TLS.
    tls: Option<Box<rustls::ClientConnection>>,
    binary: bool,
    /// Always fully initialised; `rbuf[rpos..rend]` is unread data.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// The process that opened the socket: a forked child must never use it. (A pid, not an
    /// `os.register_at_fork` hook: uWSGI forks its workers without running Python's hooks.)
    pid: u32,
    /// When the server last answered on this connection without an error line: see
    /// `needs_probe`.
    answered_at: Option<Instant>,
    /// Whether any reply byte arrived since `begin_request` (decides if a retry is safe).
    received_since_begin: bool,
    /// `noreply` commands sent since the server last confirmed it had processed everything:
    /// whatever it may have answered to them (error lines) is still to be read and discarded.
    unsynced: u32,
}

fn io_kind_is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Connection {
    /// Resolve and connect, honouring the connect timeout.
    pub fn connect(addr: &Address, opts: &SocketOptions) -> Result<Connection> {
        let stream = match addr {
            Address::Tcp { host, port } => {
                let host = if host.is_empty() {
                    "localhost"
                } else {
                    host.as_str()
                };
                let addrs: Vec<_> = (host, *port)
                    .to_socket_addrs()
                    .map_err(|e| Error::HostLookup(format!("{host}: {e}")))?
                    .collect();
                if addrs.is_empty() {
                    return Err(Error::HostLookup(format!("{host}: no address")));
                }
                let mut last = None;
                let mut found = None;
                for sa in addrs {
                    match TcpStream::connect_timeout(&sa, opts.connect_timeout) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let s = match found {
                    Some(s) => s,
                    None => {
                        let msg = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
                        return Err(Error::Connect(format!("{}: {msg}", addr.display_name())));
                    }
                };
                // Requests are written whole; Nagle would only delay the tail of a pipeline.
                s.set_nodelay(true)
                    .map_err(|e| Error::Connect(e.to_string()))?;
                if opts.tcp_keepalive {
                    rustix::net::sockopt::set_socket_keepalive(&s, true)
                        .map_err(|e| Error::Connect(e.to_string()))?;
                }
                Stream::Tcp(s)
            }
            Address::Unix(path) => {
                let s = UnixStream::connect(path)
                    .map_err(|e| Error::Connect(format!("{path}: {e}")))?;
                Stream::Unix(s)
            }
        };
        let fd = stream.fd();
        if let Some(n) = opts.send_buffer {
            let _ = rustix::net::sockopt::set_socket_send_buffer_size(fd, n);
        }
        if let Some(n) = opts.recv_buffer {
            let _ = rustix::net::sockopt::set_socket_recv_buffer_size(fd, n);
        }
        let set = |r: io::Result<()>| r.map_err(|e| Error::Connect(e.to_string()));
        match &stream {
            Stream::Tcp(s) => {
                set(s.set_read_timeout(Some(opts.read_timeout)))?;
                set(s.set_write_timeout(Some(opts.write_timeout)))?;
            }
            Stream::Unix(s) => {
                set(s.set_read_timeout(Some(opts.read_timeout)))?;
                set(s.set_write_timeout(Some(opts.write_timeout)))?;
            }
        }
        let mut stream = stream;
        let tls = match &opts.security.tls {
            None => None,
            Some(t) => {
                let host = match addr {
                    Address::Tcp { host, .. } if !host.is_empty() => host.as_str(),
                    _ => "localhost",
                };
                let name = t.server_name_for(host).map_err(Error::Connect)?;
                let mut session = rustls::ClientConnection::new(t.config(), name)
                    .map_err(|e| Error::Connect(format!("TLS: {e}")))?;
                while session.is_handshaking() {
                    session.complete_io(&mut stream).map_err(|e| {
                        Error::Connect(format!(
                            "TLS handshake with {} failed: {e}",
                            addr.display_name()
                        ))
                    })?;
                }
                Some(Box::new(session))
            }
        };
        let mut conn = Connection {
            stream,
            tls,
            binary: opts.binary,
            rbuf: vec![0; READ_CHUNK],
            rpos: 0,
            rend: 0,
            pid: std::process::id(),
            answered_at: None,
            received_since_begin: false,
            unsynced: 0,
        };
        if let Some(c) = &opts.security.sasl {
            conn.authenticate(c)?;
        }
        Ok(conn)
    }

    /// SASL PLAIN over the binary protocol; nothing else is sent until the server says yes.
    fn authenticate(&mut self, c: &Credentials) -> Result<()> {
        let mut buf = Vec::new();
        binary::encode_sasl_plain(&mut buf, &c.username, &c.password);
        self.write_all_blocking(&buf)?;
        loop {
            if let Parsed::Done(r, used) = binary::parse_response(self.unread())? {
                let outcome = binary::sasl_outcome(&r);
                self.consume(used);
                if outcome.is_ok() && !self.is_idle_clean() {
                    return Err(Error::Protocol("data after the SASL answer".into()));
                }
                return outcome;
            }
            self.recv_blocking()?;
        }
    }

    /// Write everything, blocking up to the socket's write timeout.
    fn write_all_blocking(&mut self, data: &[u8]) -> Result<()> {
        let werr = |e: io::Error| {
            if io_kind_is_timeout(&e) {
                Error::Timeout
            } else {
                Error::write(&e)
            }
        };
        match &mut self.tls {
            Some(tls) => {
                tls.writer().write_all(data).map_err(werr)?;
                while tls.wants_write() {
                    tls.write_tls(&mut self.stream).map_err(werr)?;
                }
                Ok(())
            }
            None => self.stream.write_all(data).map_err(werr),
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.stream.fd()
    }

    /// False in a forked child: the socket is shared with the parent and must not be used.
    pub fn owned_by_this_process(&self) -> bool {
        self.pid == std::process::id()
    }

    /// Whether the connection is clean: nothing unread is left over.
    pub fn is_idle_clean(&self) -> bool {
        self.rpos == self.rend
    }

    /// Call before writing a request; tracks whether any reply byte has arrived since.
    pub fn begin_request(&mut self) {
        self.received_since_begin = false;
    }

    pub fn received_since_begin(&self) -> bool {
        self.received_since_begin
    }

    /// The server's last answers on this connection arrived at `at`; `None` when one of them
    /// was an error line (a server or proxy may close the connection after one).
    pub fn answered(&mut self, at: Option<Instant>) {
        self.answered_at = at;
    }

    /// Whether a write should `peer_still_open` first: yes, unless the server answered without
    /// an error within `PROBE_AFTER`. A server that closed the connection since could not
    /// have come back yet (a restart takes longer), so a new connection would fail as well.
    /// Should it happen anyway, the write fails with an error and is not replayed: never
    /// silently lost, never applied twice. The peek is a system call, which tight loops of
    /// writes save.
    pub fn needs_probe(&self, now: Instant) -> bool {
        match self.answered_at {
            // (An answer after `now`, from another thread, says nothing about `now`.)
            Some(at) if at <= now => now.duration_since(at) >= PROBE_AFTER,
            _ => true,
        }
    }

    /// For an idle connection: false if the server closed it (or sent something unasked), as a
    /// restarted server's old connections do. One non-blocking peek, nothing consumed. Bytes
    /// waiting on a connection with unsynced `noreply` commands are their error lines, which the
    /// next request's sync marker reads: such a connection is still open.
    pub fn peer_still_open(&self) -> bool {
        let mut b = [0u8; 1];
        match rustix::net::recv(self.fd(), &mut b, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Err(rustix::io::Errno::AGAIN) => true,
            Ok((n, _)) => n > 0 && self.unsynced > 0,
            Err(_) => false,
        }
    }

    /// `noreply` commands sent and not yet confirmed (see the field).
    pub fn unsynced(&self) -> u32 {
        self.unsynced
    }

    /// `n` more `noreply` commands went out without a closing marker.
    pub fn add_unsynced(&mut self, n: u32) {
        self.unsynced = self.unsynced.saturating_add(n);
    }

    /// The server answered a marker sent after every unsynced command.
    pub fn synced(&mut self) {
        self.unsynced = 0;
    }

    /// Write without blocking; returns how many bytes the kernel took (0 when its buffer is full).
    /// With TLS: how many plaintext bytes were taken (sealed records may still be pending).
    pub fn send_nonblocking(&mut self, data: &[u8]) -> Result<usize> {
        if let Some(tls) = &mut self.tls {
            let fd = self.stream.fd();
            flush_tls(tls, fd)?;
            if tls.wants_write() || data.is_empty() {
                return Ok(0);
            }
            let n = tls
                .writer()
                .write(&data[..data.len().min(TLS_CHUNK)])
                .map_err(|e| Error::write(&e))?;
            flush_tls(tls, fd)?;
            return Ok(n);
        }
        match rustix::net::send(self.fd(), data, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
            Ok(n) => Ok(n),
            Err(rustix::io::Errno::AGAIN) => Ok(0),
            Err(rustix::io::Errno::INTR) => Ok(0),
            Err(e) => Err(Error::write(&io::Error::from(e))),
        }
    }

    /// Whether TLS records are sealed but not yet written (the poll loop must wait for POLLOUT).
    pub fn pending_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// The unread bytes.
    pub fn unread(&self) -> &[u8] {
        &self.rbuf[self.rpos..self.rend]
    }

    /// Mark `n` unread bytes as used.
    pub fn consume(&mut self, n: usize) {
        self.rpos = (self.rpos + n).min(self.rend);
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        }
    }

    /// Make room at the end of the read buffer, keeping unread data.
    fn make_room(&mut self) {
        if self.rend < self.rbuf.len() {
            return;
        }
        if self.rpos > 0 {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rend -= self.rpos;
            self.rpos = 0;
        }
        if self.rend == self.rbuf.len() {
            let grow = self.rbuf.len().max(READ_CHUNK);
            self.rbuf.resize(self.rbuf.len() + grow, 0);
        }
    }

    fn after_read(&mut self, r: io::Result<usize>, blocking: bool) -> Result<usize> {
        match r {
            Ok(0) => Err(Error::Read(IoFailure::closed())),
            Ok(n) => {
                self.rend += n;
                self.received_since_begin = true;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) if io_kind_is_timeout(&e) => {
                if blocking {
                    Err(Error::Timeout)
                } else {
                    Ok(0)
                }
            }
            Err(e) => Err(Error::read(&e)),
        }
    }

    /// Move every decrypted byte rustls holds into the read buffer.
    fn drain_plaintext(&mut self) -> Result<usize> {
        let mut total = 0;
        loop {
            self.make_room();
            let end = self.rend;
            let Some(tls) = self.tls.as_mut() else {
                return Ok(total);
            };
            match tls.reader().read(&mut self.rbuf[end..]) {
                Ok(0) => {
                    if total == 0 {
                        return Err(Error::Read(IoFailure::closed()));
                    }
                    break;
                }
                Ok(n) => {
                    self.rend += n;
                    self.received_since_begin = true;
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(Error::Read(IoFailure::closed()))
                }
                Err(e) => return Err(Error::Read(IoFailure::tls(e.kind(), &e))),
            }
        }
        Ok(total)
    }

    /// TLS read: records from the socket, decrypted into the read buffer.
    fn recv_tls(&mut self, blocking: bool) -> Result<usize> {
        loop {
            let Some(tls) = &mut self.tls else {
                return Ok(0);
            };
            let r = if blocking {
                tls.read_tls(&mut self.stream)
            } else {
                tls.read_tls(&mut NonBlocking(self.stream.fd()))
            };
            if !matches!(r, Ok(n) if n > 0) {
                // Closed, interrupted, timed out or failed: the same outcomes as a plain read.
                return self.after_read(r, blocking);
            }
            tls.process_new_packets()
                .map_err(|e| Error::Read(IoFailure::tls(io::ErrorKind::InvalidData, e)))?;
            // Post-handshake messages (key updates) may need an answer.
            flush_tls(tls, self.stream.fd())?;
            let n = self.drain_plaintext()?;
            if n > 0 || !blocking {
                return Ok(n);
            }
        }
    }

    /// Read what is available without blocking; Ok(0) means nothing was there.
    pub fn recv_nonblocking(&mut self) -> Result<usize> {
        if self.tls.is_some() {
            return self.recv_tls(false);
        }
        self.make_room();
        let end = self.rend;
        let r = rustix::net::recv(self.stream.fd(), &mut self.rbuf[end..], RecvFlags::DONTWAIT)
            .map(|(n, _)| n)
            .map_err(io::Error::from);
        self.after_read(r, false)
    }

    /// Read, blocking up to the socket's read timeout (then `Error::Timeout`).
    pub fn recv_blocking(&mut self) -> Result<usize> {
        if self.tls.is_some() {
            return self.recv_tls(true);
        }
        self.make_room();
        let end = self.rend;
        let r = self.stream.read(&mut self.rbuf[end..]);
        self.after_read(r, true)
    }

    /// Give back an oversized read buffer before the connection goes idle.
    pub fn shrink(&mut self) {
        if self.rbuf.len() > KEEP_READ_BUF && self.rpos == self.rend {
            self.rbuf = vec![0; READ_CHUNK];
            self.rpos = 0;
            self.rend = 0;
        }
    }

    /// Best-effort `quit` before closing (what pylibmc's `disconnect_all` sends).
    pub fn quit(mut self) {
        if self.owned_by_this_process() {
            let mut b = Vec::new();
            if self.binary {
                binary::encode_quit(&mut b);
            } else {
                crate::protocol::text::encode_quit(&mut b);
            }
            if let Some(tls) = &mut self.tls {
                let _ = tls.writer().write_all(&b);
                tls.send_close_notify();
                let _ = flush_tls(tls, self.stream.fd());
                return;
            }
            let _ = self.send_nonblocking_ref(&b);
        }
    }

    fn send_nonblocking_ref(&self, data: &[u8]) -> Result<usize> {
        rustix::net::send(self.fd(), data, SendFlags::DONTWAIT | SendFlags::NOSIGNAL)
            .map_err(|e| Error::write(&io::Error::from(e)))
    }
}

/// The kernel's socket buffer sizes for a new socket of this address's family, reported as
/// `_socket_send_size`/`_socket_recv_size` when those were never set (pylibmc asks a live socket).
pub fn default_socket_buffer_sizes(addr: &Address) -> (usize, usize) {
    use rustix::net::{socket, AddressFamily, SocketType};
    let family = match addr {
        Address::Tcp { .. } => AddressFamily::INET,
        Address::Unix(_) => AddressFamily::UNIX,
    };
    match socket(family, SocketType::STREAM, None) {
        Ok(fd) => (
            rustix::net::sockopt::socket_send_buffer_size(&fd).unwrap_or(0),
            rustix::net::sockopt::socket_recv_buffer_size(&fd).unwrap_or(0),
        ),
        Err(_) => (0, 0),
    }
}
