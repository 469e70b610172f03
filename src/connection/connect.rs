//! Opening a socket: where a server lives (`Address`), the socket options taken from the
//! behaviors, resolving and connecting with the connect timeout, and the socket-level options.
//! Speaks no protocol. Depends on `error` and `security` (carried in the options).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fake::wire::Wire;
use crate::security::Security;

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
    /// How long a blocking read waits before the caller looks at its deadlines again (at most
    /// `read_timeout`; the handshake and SASL wait `read_timeout`).
    pub recv_wait: Duration,
    pub tcp_keepalive: bool,
    pub send_buffer: Option<usize>,
    pub recv_buffer: Option<usize>,
}

impl SocketOptions {
    /// Whether a connection opened with these options is one `other` would open as well: the
    /// same protocol, security (one shared value, which behavior changes keep), timeouts and
    /// socket options.
    pub fn opens_as(&self, other: &SocketOptions) -> bool {
        self.binary == other.binary
            && std::sync::Arc::ptr_eq(&self.security, &other.security)
            && self.connect_timeout == other.connect_timeout
            && self.read_timeout == other.read_timeout
            && self.write_timeout == other.write_timeout
            && self.recv_wait == other.recv_wait
            && self.tcp_keepalive == other.tcp_keepalive
            && self.send_buffer == other.send_buffer
            && self.recv_buffer == other.recv_buffer
    }

    /// Text protocol, no security, 4 s timeouts, a 250 ms blocking read: for the unit tests,
    /// which change what they test.
    #[cfg(test)]
    pub(crate) fn for_tests() -> SocketOptions {
        let ms = Duration::from_millis;
        SocketOptions {
            binary: false,
            security: Default::default(),
            connect_timeout: ms(4000),
            read_timeout: ms(4000),
            write_timeout: ms(4000),
            recv_wait: ms(250),
            tcp_keepalive: false,
            send_buffer: None,
            recv_buffer: None,
        }
    }
}

/// A connected socket, or an in-process connection to a fake server (`crate::fake`).
pub(super) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Fake(Box<Wire>),
}

impl Stream {
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
            Stream::Fake(w) => w.fd(),
        }
    }

    /// The kernel's receive timeout for blocking reads.
    pub(super) fn set_read_timeout(&mut self, d: Duration) -> Result<()> {
        let r = match self {
            Stream::Tcp(s) => s.set_read_timeout(Some(d)),
            Stream::Unix(s) => s.set_read_timeout(Some(d)),
            Stream::Fake(w) => {
                w.set_read_timeout(d);
                Ok(())
            }
        };
        r.map_err(|e| Error::Connect(e.to_string()))
    }
}

/// Blocking I/O (with the socket's timeouts), for the handshake and blocking reads.
impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Fake(w) => w.recv(buf, true),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Fake(w) => w.send(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Resolve and connect, honouring the connect timeout, and apply the socket options: no Nagle,
/// keepalive, buffer sizes, and the kernel's send/receive timeouts for blocking calls.
pub(super) fn open(addr: &Address, opts: &SocketOptions) -> Result<Stream> {
    if let Some((fake, host, port)) = in_process(addr, opts) {
        let w = Wire::connect(fake, (host, port), opts.read_timeout)
            .map_err(|e| Error::Connect(format!("{}: {e}", addr.display_name())))?;
        return Ok(Stream::Fake(Box::new(w)));
    }
    let stream = match addr {
        Address::Tcp { host, port } => Stream::Tcp(connect_tcp(addr, host, *port, opts)?),
        Address::Unix(path) => {
            let s =
                UnixStream::connect(path).map_err(|e| Error::Connect(format!("{path}: {e}")))?;
            Stream::Unix(s)
        }
    };
    let fd = stream.fd();
    // macOS has no per-call MSG_NOSIGNAL: the socket itself must not raise SIGPIPE (see
    // `SEND` in connection/mod.rs). std sets this on its own sockets; the TCP ones are rustix's.
    #[cfg(target_os = "macos")]
    rustix::net::sockopt::set_socket_nosigpipe(fd, true)
        .map_err(|e| Error::Connect(e.to_string()))?;
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
        Stream::Fake(_) => {}
    }
    Ok(stream)
}

/// The fake server `fastmc.testing` serves in this process at `addr`, if any: talked to
/// in-process (it speaks neither TLS nor SASL, which go to its socket and fail there as on it).
fn in_process<'a>(
    addr: &'a Address,
    opts: &SocketOptions,
) -> Option<(std::sync::Arc<crate::fake::Fake>, &'a str, u16)> {
    let Address::Tcp { host, port } = addr else {
        return None;
    };
    if opts.security.tls.is_some() || opts.security.sasl.is_some() {
        return None;
    }
    crate::fake::lookup(host, *port).map(|f| (f, host.as_str(), *port))
}

/// The first address of `host` that accepts a connection within the connect timeout.
fn connect_tcp(addr: &Address, host: &str, port: u16, opts: &SocketOptions) -> Result<TcpStream> {
    let host = if host.is_empty() { "localhost" } else { host };
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::HostLookup(format!("{host}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::HostLookup(format!("{host}: no address")));
    }
    let mut last = None;
    let mut found = None;
    for sa in addrs {
        match connect_hedged(&sa, opts.connect_timeout) {
            Ok(s) => {
                found = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(s) = found else {
        let msg = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
        return Err(Error::Connect(format!("{}: {msg}", addr.display_name())));
    };
    // Requests are written whole; Nagle would only delay the tail of a pipeline.
    s.set_nodelay(true)
        .map_err(|e| Error::Connect(e.to_string()))?;
    if opts.tcp_keepalive {
        rustix::net::sockopt::set_socket_keepalive(&s, true)
            .map_err(|e| Error::Connect(e.to_string()))?;
    }
    Ok(s)
}

/// A connect timeout at least this long gets a second attempt half-way (`connect_hedged`).
const MIN_HEDGED: Duration = Duration::from_millis(20);

/// Connect to `sa` within `timeout`. A SYN lost on the way, or its answer, costs Linux a 1 s
/// retransmission, longer than most connect timeouts: over a lossy link a healthy server would
/// fail the connect and be marked down. So when half the timeout passes without an answer, a
/// second attempt starts on a new socket (a new SYN), and whichever connects first is kept. A
/// refused connect fails at once, and a server that answers neither attempt fails at the
/// timeout, as before.
fn connect_hedged(sa: &std::net::SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::io::Errno;
    let start = std::time::Instant::now();
    let deadline = start + timeout;
    let mut hedge_at = (timeout >= MIN_HEDGED).then(|| start + timeout / 2);
    let mut pending: Vec<std::os::fd::OwnedFd> = Vec::with_capacity(2);
    let begin = |pending: &mut Vec<std::os::fd::OwnedFd>| -> io::Result<Option<TcpStream>> {
        let family = if sa.is_ipv4() {
            rustix::net::AddressFamily::INET
        } else {
            rustix::net::AddressFamily::INET6
        };
        let fd = new_socket(family)?;
        match rustix::net::connect(&fd, sa) {
            Ok(()) => Ok(Some(connected(fd)?)),
            Err(Errno::INPROGRESS) | Err(Errno::INTR) => {
                pending.push(fd);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    };
    if let Some(s) = begin(&mut pending)? {
        return Ok(s);
    }
    let mut last_error: Option<io::Error> = None;
    loop {
        let now = std::time::Instant::now();
        if now >= deadline {
            return Err(last_error.unwrap_or_else(timed_out));
        }
        if hedge_at.is_some_and(|at| now >= at) {
            hedge_at = None;
            if let Some(s) = begin(&mut pending)? {
                return Ok(s);
            }
        }
        let wake = hedge_at.map_or(deadline, |at| at.min(deadline));
        let wait = super::to_timespec(wake.saturating_duration_since(now));
        let mut fds: Vec<PollFd<'_>> = pending
            .iter()
            .map(|fd| PollFd::new(fd, PollFlags::OUT))
            .collect();
        match poll(&mut fds, Some(&wait)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        for i in (0..pending.len()).rev() {
            if !ready[i] {
                continue;
            }
            let fd = pending.remove(i);
            match rustix::net::sockopt::socket_error(&fd)? {
                Ok(()) => return connected(fd),
                // Nobody listens there: fail now, as a dead server must.
                Err(Errno::CONNREFUSED) => return Err(Errno::CONNREFUSED.into()),
                Err(e) => last_error = Some(e.into()),
            }
        }
        if pending.is_empty() {
            if hedge_at.is_none() {
                return Err(last_error.unwrap_or_else(timed_out));
            }
            // The first attempt failed early (unreachable, reset): the second goes now.
            hedge_at = Some(now);
        }
    }
}

/// A non-blocking, close-on-exec stream socket, made so in the one call Linux has for it.
#[cfg(not(target_os = "macos"))]
fn new_socket(family: rustix::net::AddressFamily) -> io::Result<std::os::fd::OwnedFd> {
    let flags = rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC;
    Ok(rustix::net::socket_with(
        family,
        rustix::net::SocketType::STREAM,
        flags,
        None,
    )?)
}

/// macOS has no SOCK_NONBLOCK or SOCK_CLOEXEC: the flags are set right after (as std does
/// there; a fork and exec in between may inherit the socket, which macOS cannot prevent).
#[cfg(target_os = "macos")]
fn new_socket(family: rustix::net::AddressFamily) -> io::Result<std::os::fd::OwnedFd> {
    let fd = rustix::net::socket(family, rustix::net::SocketType::STREAM, None)?;
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
    rustix::io::ioctl_fionbio(&fd, true)?;
    Ok(fd)
}

/// What a connect that got no answer within its timeout fails with (std's words for it).
fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "connection timed out")
}

/// A connected non-blocking socket as a blocking `TcpStream`.
fn connected(fd: std::os::fd::OwnedFd) -> io::Result<TcpStream> {
    rustix::io::ioctl_fionbio(&fd, false)?;
    Ok(TcpStream::from(fd))
}
