//! One socket to one server (TCP or UNIX), with its read and write buffers.
//!
//! Sockets stay in blocking mode with kernel send/receive timeouts, so the common single-server
//! request costs one `send` and one `recv`; the poll loop in `client` drives many connections at
//! once with per-call non-blocking flags instead. Depends on `error`, `security`,
//! `protocol::binary` (how `quit` is said) and `fake` (the in-process wire).
//!
//! `connect.rs` opens the socket, `handshake.rs` runs TLS and SASL on it, `recv.rs` is the read
//! side (the read buffer and the reads that fill it); this file keeps the writes. With TLS, a
//! rustls session sits between the buffers and the socket: the handshake (and SASL) run blocking
//! inside `connect`; afterwards plaintext goes in and out through the same non-blocking calls,
//! and `pending_write` tells the poll loop that sealed records still wait for the socket.
//!
//! A connection to a fake server that `fastmc.testing` serves in this process is in-process
//! (`crate::fake::wire::Wire`, opened by `connect::open`): the same buffers and calls, no socket.

pub mod connect;
mod handshake;
mod recv;

use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::net::{RecvFlags, SendFlags};

use crate::clock::Tick;
use crate::error::{Error, Result};
use crate::protocol::binary;
use connect::Stream;
use connect::{Address, SocketOptions};

/// The flags of every send: never block (the socket stays in blocking mode: per-call
/// `MSG_DONTWAIT`) and never raise SIGPIPE when the server has gone (a program embedding
/// CPython may not ignore it, as the `python` executable does). Linux says the latter per call,
/// `MSG_NOSIGNAL`; macOS has no such flag and says it once per socket, `SO_NOSIGPIPE`
/// (`connect::open`).
#[cfg(not(target_os = "macos"))]
const SEND: SendFlags = SendFlags::DONTWAIT.union(SendFlags::NOSIGNAL);
#[cfg(target_os = "macos")]
const SEND: SendFlags = SendFlags::DONTWAIT;

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
        rustix::net::send(self.0, buf, SEND).map_err(io::Error::from)
    }
    /// rustls hands over many small records at once: one `sendmsg` for all of them.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut control = rustix::net::SendAncillaryBuffer::default();
        rustix::net::sendmsg(self.0, bufs, &mut control, SEND).map_err(io::Error::from)
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

/// See `Connection::needs_peek`.
const PEEK_AFTER: Duration = Duration::from_millis(1);

/// The read buffer's usual size. It is never full of one unit unless a header announced a
/// larger one (`reserve_unit`): reply lines are at most `protocol::ascii::MAX_LINE`.
const READ_CHUNK: usize = 64 * 1024;
/// A read buffer that grew past this (for a huge value) is given back when the connection idles.
const KEEP_READ_BUF: usize = 1024 * 1024;

/// One open connection to one server: the socket (and TLS session), a read buffer with
/// unread bytes, and what the client must remember about it between requests (who owns it
/// after a fork, when the server last answered, how many `noreply` answers it may still owe).
pub struct Connection {
    stream: Stream,
    /// The TLS session, when the client uses TLS.
    tls: Option<Box<rustls::ClientConnection>>,
    binary: bool,
    /// Always fully initialised; `rbuf[rpos..rend]` is unread data.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// The fork generation the socket was opened in (`crate::fork`): a forked child must never
    /// use it. (Not an `os.register_at_fork` hook: uWSGI forks without running Python's hooks.)
    generation: u64,
    /// When the server last answered on this connection without an error line: see
    /// `needs_peek`.
    answered_at: Option<Tick>,
    /// When the last `noreply` write on this connection was sent (see
    /// `needs_peek_before_noreply`).
    noreply_sent_at: Option<Tick>,
    /// Whether any reply byte arrived since `begin_request` (decides if a retry is safe).
    received_since_begin: bool,
    /// Bytes read on this connection so far (for the metrics).
    read_total: u64,
    /// Counted up when the connection is dropped (its server's `closes` metric), once tracked.
    closes: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// `noreply` commands sent since the server last confirmed it had processed everything:
    /// whatever it may have answered to them (error lines) is still to be read and discarded.
    unsynced: u32,
    /// TCP_NODELAY is off for a run of `noreply` writes (see `send_noreply`).
    nagle: bool,
    /// The buffer of the last lone request sent on it (`take_request_buf`), kept for the next.
    reqbuf: Vec<u8>,
}

/// A lone request's buffer that grew beyond this (a large value) is not kept.
const REQBUF_KEPT: usize = 16 * 1024;

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(c) = &self.closes {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A `Duration` as `poll` takes it.
pub(crate) fn to_timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    }
}

pub(super) fn io_kind_is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Connection {
    /// Connect (resolving, with the connect timeout), then the TLS handshake and SASL
    /// authentication when the options ask for them.
    pub fn connect(addr: &Address, opts: &SocketOptions) -> Result<Connection> {
        let mut stream = connect::open(addr, opts)?;
        let tls = handshake::tls(&mut stream, addr, opts)?;
        let mut conn = Connection {
            stream,
            tls,
            binary: opts.binary,
            rbuf: vec![0; READ_CHUNK],
            rpos: 0,
            rend: 0,
            generation: crate::fork::generation(),
            answered_at: None,
            noreply_sent_at: None,
            read_total: 0,
            closes: None,
            received_since_begin: false,
            unsynced: 0,
            nagle: false,
            reqbuf: Vec::new(),
        };
        if let Some(c) = &opts.security.sasl {
            conn.authenticate(c)?;
        }
        if opts.recv_wait < opts.read_timeout {
            conn.stream.set_read_timeout(opts.recv_wait)?;
        }
        Ok(conn)
    }

    /// A buffer for one lone request (`client::drive::lone`), empty, with room for `size` bytes:
    /// the one the last such request on this connection left (no allocation per call).
    pub fn take_request_buf(&mut self, size: usize) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.reqbuf);
        buf.clear();
        buf.reserve(size);
        buf
    }

    /// Keep `buf` for the next lone request on this connection, unless a large value grew it.
    pub fn keep_request_buf(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= REQBUF_KEPT {
            self.reqbuf = buf;
        }
    }

    /// The kernel's send and receive buffer sizes of this socket (0 where unknown).
    pub fn buffer_sizes(&self) -> (usize, usize) {
        if let Stream::Fake(w) = &self.stream {
            return w.socket_buffer_sizes();
        }
        let fd = self.stream.fd();
        (
            rustix::net::sockopt::socket_send_buffer_size(fd).unwrap_or(0),
            rustix::net::sockopt::socket_recv_buffer_size(fd).unwrap_or(0),
        )
    }

    /// The socket, for `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.stream.fd()
    }

    /// False in a forked child: the socket is shared with the parent and must not be used.
    pub fn owned_by_this_process(&self) -> bool {
        self.generation == crate::fork::generation()
    }

    /// Whether the connection is clean: nothing unread is left over.
    pub fn is_idle_clean(&self) -> bool {
        self.rpos == self.rend
    }

    /// Call before writing a request; tracks whether any reply byte has arrived since.
    pub fn begin_request(&mut self) {
        self.received_since_begin = false;
    }

    /// Whether any reply byte arrived since `begin_request` (a retry is safe only if not).
    pub fn received_since_begin(&self) -> bool {
        self.received_since_begin
    }

    /// The server's last answers on this connection arrived at `at`; `None` when one of them
    /// was an error line (a server or proxy may close the connection after one).
    pub fn answered(&mut self, at: Option<Tick>) {
        self.answered_at = at;
    }

    /// Bytes read on this connection so far.
    pub fn read_total(&self) -> u64 {
        self.read_total
    }

    /// Count this connection in `closes` when it is dropped.
    pub fn track_close(&mut self, closes: std::sync::Arc<std::sync::atomic::AtomicU64>) {
        self.closes = Some(closes);
    }

    /// `n` `noreply` commands went out at `at`, without a closing marker.
    pub fn sent_noreply(&mut self, n: u32, at: Tick) {
        self.unsynced = self.unsynced.saturating_add(n);
        self.noreply_sent_at = Some(at);
    }

    /// Whether a `noreply` write should `peer_still_open` first: yes, unless this connection
    /// got an answer (`needs_peek`) or carried another `noreply` write within `PEEK_AFTER`, so
    /// that a tight loop of `noreply` writes makes one system call per write. The loss this
    /// allows is bounded: if the server closed the connection in that window, the write goes
    /// into the closed socket and is lost (as with pylibmc), the peer's reset comes back within
    /// a round trip, and the next write fails to send (nothing sent) and goes out on a new
    /// connection. A connection idle for longer is always peeked at, so a restart between
    /// bursts loses nothing.
    pub fn needs_peek_before_noreply(&self, now: Tick) -> bool {
        let recent = matches!(self.noreply_sent_at, Some(at) if now.within(at, PEEK_AFTER));
        self.needs_peek(now) && !recent
    }

    /// Whether a write should `peer_still_open` first: yes, unless the server answered without
    /// an error within `PEEK_AFTER`. A server that closed the connection since could not
    /// have come back yet (a restart takes longer), so a new connection would fail as well.
    /// Should it happen anyway, the write fails with an error and is not replayed: never
    /// silently lost, never applied twice. The peek is a system call, which tight loops of
    /// writes save.
    pub fn needs_peek(&self, now: Tick) -> bool {
        // (An answer after `now`, from another thread, says nothing about `now`: `within`.)
        !matches!(self.answered_at, Some(at) if now.within(at, PEEK_AFTER))
    }

    /// For an idle connection: false if the server closed it (or sent something unasked), as a
    /// restarted server's old connections do. One non-blocking peek, nothing consumed. Bytes
    /// waiting on a connection with unsynced `noreply` commands are their error lines, which the
    /// next request's sync marker reads: such a connection is still open.
    pub fn peer_still_open(&self) -> bool {
        if let Stream::Fake(w) = &self.stream {
            return w.peer_still_open(self.unsynced);
        }
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

    /// The server answered a marker sent after every unsynced command.
    pub fn synced(&mut self) {
        self.unsynced = 0;
    }

    /// One `noreply` request without blocking, as `send_nonblocking` (for plain TCP and Unix
    /// sockets only). The second and later `noreply` writes in a row on a TCP connection go out
    /// with Nagle's algorithm on (TCP_NODELAY off, pylibmc's default): while a segment is
    /// unacknowledged the kernel gathers the next small writes into one, so a loop of them
    /// costs one cheap system call each instead of one loopback transmission each. What is held
    /// goes out when the server acknowledges what was sent (at most its delayed-ACK time, ~40 ms
    /// on Linux, as with pylibmc), or at once with the next request that waits for an answer:
    /// `send_nonblocking` turns TCP_NODELAY back on first, which pushes it.
    pub fn send_noreply(&mut self, data: &[u8]) -> Result<usize> {
        if self.unsynced > 0 && !self.nagle {
            if let Stream::Tcp(s) = &self.stream {
                self.nagle = s.set_nodelay(false).is_ok();
            }
        }
        self.send_raw(data)
    }

    /// Back to TCP_NODELAY after a run of `noreply` writes, which sends what Nagle holds. (If
    /// that ever failed, the next request would still go out, after the server's ACK.)
    fn push_held_writes(&mut self) {
        if self.nagle {
            if let Stream::Tcp(s) = &self.stream {
                self.nagle = s.set_nodelay(true).is_err();
            }
        }
    }

    /// Write without blocking; returns how many bytes the kernel took (0 when its buffer is full).
    /// With TLS: how many plaintext bytes were taken (sealed records may still be pending).
    #[inline(always)]
    pub fn send_nonblocking(&mut self, data: &[u8]) -> Result<usize> {
        self.push_held_writes();
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
        self.send_raw(data)
    }

    /// `send_nonblocking` of `parts` in order, as one `sendmsg` on a plain socket (a large
    /// value goes out from the caller's bytes between its header and its end, not copied); TLS
    /// and the in-process fake take the first part that is not empty.
    pub fn send_vectored(&mut self, parts: &[io::IoSlice<'_>]) -> Result<usize> {
        if self.tls.is_some() || matches!(self.stream, Stream::Fake(_)) {
            let first = parts
                .iter()
                .find(|p| !p.is_empty())
                .map_or(&[][..], |p| &p[..]);
            return self.send_nonblocking(first);
        }
        self.push_held_writes();
        let mut control = rustix::net::SendAncillaryBuffer::default();
        match rustix::net::sendmsg(self.fd(), parts, &mut control, SEND) {
            Ok(n) => Ok(n),
            Err(rustix::io::Errno::AGAIN) => Ok(0),
            Err(rustix::io::Errno::INTR) => Ok(0),
            Err(e) => Err(Error::write(&io::Error::from(e))),
        }
    }

    #[inline(always)]
    fn send_raw(&mut self, data: &[u8]) -> Result<usize> {
        if let Stream::Fake(w) = &mut self.stream {
            return w.send(data).map_err(|e| Error::write(&e));
        }
        match rustix::net::send(self.fd(), data, SEND) {
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
            if let Stream::Fake(w) = &mut self.stream {
                let _ = w.send(&b);
                return;
            }
            let _ = self.send_nonblocking_ref(&b);
        }
    }

    fn send_nonblocking_ref(&self, data: &[u8]) -> Result<usize> {
        rustix::net::send(self.fd(), data, SEND).map_err(|e| Error::write(&io::Error::from(e)))
    }
}

#[cfg(test)]
mod tests;
