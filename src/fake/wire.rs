//! An in-process connection to a `Fake`: what a socket would carry, with no socket and no
//! thread. A write is answered at once, synchronously (the fake's brain runs in the caller's
//! thread), and the replies wait in memory for the reads, so a read after a write never blocks.
//!
//! To the poll loops (`client::drive`, the asyncio client's direct path) the connection is a
//! descriptor (`token`) that is readable whenever `recv` has something, so they go straight to
//! the replies. The failure switches act here as on a socket: `down` and `drop_connections`
//! close the connection (a write fails with a broken pipe, a read sees the end of the stream)
//! and refuse new ones; `slow` holds each reply until its time, a blocking read sleeping up to
//! its timeout for it.

use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::session::Session;
use super::token::{Token, NAPS, RECHECK};
use super::Fake;

/// Room for replies kept between reads (more, for a huge value, is given back once read).
const KEEP_READY: usize = 1024 * 1024;
/// The longest nap of a non-blocking read while a held reply is not due.
const NAP: Duration = Duration::from_millis(1);

/// One in-process connection to a fake server.
pub struct Wire {
    fake: Arc<Fake>,
    session: Session,
    /// The fake's epoch when this connection opened (`Fake::drop_connections`).
    epoch: u64,
    /// Replies ready to read: `ready[rpos..]`.
    ready: Vec<u8>,
    rpos: usize,
    /// Replies held by `slow`: when each may be read (None: never).
    held: VecDeque<(Option<Instant>, Vec<u8>)>,
    read_timeout: Duration,
    /// The fake's loopback address (`socket_buffer_sizes`).
    addr: (String, u16),
    /// The descriptor the poll loops wait on.
    token: Token,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").field("epoch", &self.epoch).finish()
    }
}

fn refused() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionRefused,
        "Connection refused (fake server down)",
    )
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "Broken pipe (fake server closed the connection)",
    )
}

impl Wire {
    /// Open a connection (refused while the fake is down).
    pub fn connect(fake: Arc<Fake>, addr: (&str, u16), read_timeout: Duration) -> io::Result<Wire> {
        if fake.is_down() {
            return Err(refused());
        }
        let token = Token::new()?;
        fake.accepted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Wire {
            epoch: fake.epoch(),
            fake,
            session: Session::new(),
            ready: Vec::new(),
            rpos: 0,
            held: VecDeque::new(),
            read_timeout,
            addr: (addr.0.to_string(), addr.1),
            token,
        })
    }

    /// The descriptor to poll.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.token.fd()
    }

    pub fn set_read_timeout(&mut self, d: Duration) {
        self.read_timeout = d;
    }

    /// Closed by the fake (down, dropped connections) or after `quit`.
    fn is_closed(&self) -> bool {
        self.fake.epoch() != self.epoch
    }

    /// Hand `data` to the fake; its replies wait for `recv`. Takes everything.
    pub fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.is_closed() || self.session.closing {
            return Err(closed());
        }
        match self.fake.delay() {
            // the usual case: the replies go straight where the reads take them from
            Some(d) if d.is_zero() && self.held.is_empty() => {
                self.fake.handle(&mut self.session, data, &mut self.ready);
            }
            delay => {
                let mut out = Vec::new();
                self.fake.handle(&mut self.session, data, &mut out);
                if !out.is_empty() {
                    let at = delay.and_then(|d| Instant::now().checked_add(d));
                    self.held.push_back((at, out));
                }
            }
        }
        if self.rpos < self.ready.len() {
            self.token.set_ready();
        }
        Ok(data.len())
    }

    /// Move the held replies that are due to `ready`; the time the next one is due, if any
    /// is held (None inside: never).
    fn release(&mut self) -> Option<Option<Instant>> {
        if self.held.is_empty() {
            return None;
        }
        let now = Instant::now();
        let answer_now = self.fake.delay().is_some_and(|d| d.is_zero());
        while let Some((at, _)) = self.held.front() {
            let due = answer_now || at.is_some_and(|t| t <= now);
            if !due {
                return Some(*at);
            }
            if let Some((_, r)) = self.held.pop_front() {
                self.ready.extend_from_slice(&r);
            }
        }
        None
    }

    /// Read replies into `buf`: Ok(0) is the end of the stream (closed); with nothing to read,
    /// `WouldBlock` (non-blocking) or, after waiting up to the read timeout, `TimedOut`.
    pub fn recv(&mut self, buf: &mut [u8], blocking: bool) -> io::Result<usize> {
        let mut start = None;
        loop {
            if self.is_closed() {
                return Ok(0);
            }
            let next = self.release();
            if self.rpos < self.ready.len() {
                let n = buf.len().min(self.ready.len() - self.rpos);
                buf[..n].copy_from_slice(&self.ready[self.rpos..self.rpos + n]);
                self.rpos += n;
                if self.rpos == self.ready.len() {
                    self.ready.clear();
                    self.rpos = 0;
                    if self.ready.capacity() > KEEP_READY {
                        self.ready = Vec::new(); // a huge value's room is given back
                    }
                }
                return Ok(n);
            }
            if self.session.closing {
                return Ok(0);
            }
            let now = Instant::now();
            let wait = match next {
                Some(Some(at)) => at.saturating_duration_since(now),
                _ => Duration::MAX,
            };
            if !blocking {
                // nothing yet: the poll loops sleep until a held reply is due
                self.token.wake_in(wait.min(RECHECK));
                if NAPS && next.is_some() {
                    std::thread::sleep(wait.min(NAP));
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let deadline = *start.get_or_insert(now) + self.read_timeout;
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            std::thread::sleep(wait.min(left).min(Duration::from_millis(50)));
        }
    }

    /// The kernel's send and receive buffer sizes of a loopback connection to the fake's socket
    /// (what a client reports as its socket's; 0 where unknown): one short-lived connection.
    pub fn socket_buffer_sizes(&self) -> (usize, usize) {
        let Ok(s) = std::net::TcpStream::connect((self.addr.0.as_str(), self.addr.1)) else {
            return (0, 0);
        };
        (
            rustix::net::sockopt::socket_send_buffer_size(&s).unwrap_or(0),
            rustix::net::sockopt::socket_recv_buffer_size(&s).unwrap_or(0),
        )
    }

    /// Whether the fake still has the connection open: false once it closed it, or if it sent
    /// something unasked (`unsynced`: `noreply` commands whose error lines may be waiting).
    pub fn peer_still_open(&self, unsynced: u32) -> bool {
        !self.is_closed() && (self.rpos == self.ready.len() || unsynced > 0)
    }
}
