//! The read side of a `Connection`: its read buffer (the unread bytes, consuming them, room for a
//! reply unit, handing a buffer grown for a large value over to it whole or giving back an
//! oversized buffer) and the reads that fill it, plain or through rustls, blocking or not. Uses
//! the connection's fields and `mod.rs`'s helpers (`NonBlocking`, `flush_tls`, the buffer sizes),
//! `error`; no other module.

use std::io::{self, Read};

use rustix::net::RecvFlags;

use super::connect::Stream;
use super::{flush_tls, io_kind_is_timeout, Connection, NonBlocking, KEEP_READ_BUF, READ_CHUNK};
use crate::error::{Error, IoFailure, Result};

impl Connection {
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

    /// Move the unread bytes to the start of the read buffer.
    fn compact(&mut self) {
        if self.rpos > 0 {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rend -= self.rpos;
            self.rpos = 0;
        }
    }

    /// Make room at the end of the read buffer, keeping unread data. A buffer full of one
    /// unit that announced no size (only TLS plaintext rustls holds past a unit's end can do
    /// that) grows by one chunk, never by doubling.
    #[inline(always)]
    fn make_room(&mut self) -> Result<()> {
        if self.rend < self.rbuf.len() {
            return Ok(());
        }
        self.compact();
        if self.rend == self.rbuf.len() {
            self.rbuf.try_reserve_exact(READ_CHUNK)?;
            self.rbuf.resize(self.rbuf.len() + READ_CHUNK, 0);
        }
        Ok(())
    }

    /// Room for a reply unit of `total` bytes whose header is the first unread byte (the size
    /// its header announced, checked against the caller's limit): past `KEEP_READ_BUF` the
    /// buffer grows to exactly that, so a large value costs its size once here; below, at least
    /// to twice its size, so a run of growing medium values does not grow it each time. A
    /// refusal of the allocator is an `Error::Alloc` rather than an abort. (The fresh buffer is
    /// zero-filled: it holds only initialised bytes, which the reads need.)
    pub fn reserve_unit(&mut self, total: usize) -> Result<()> {
        if self.rpos + total <= self.rbuf.len() {
            return Ok(());
        }
        if total <= self.rbuf.len() {
            self.compact();
            return Ok(());
        }
        let size = total.max(self.rbuf.len().saturating_mul(2).min(KEEP_READ_BUF));
        let mut buf = Vec::new();
        buf.try_reserve_exact(size)?;
        buf.extend_from_slice(self.unread());
        buf.resize(size, 0);
        self.rend -= self.rpos;
        self.rpos = 0;
        self.rbuf = buf;
        Ok(())
    }

    #[inline(always)]
    fn after_read(&mut self, r: io::Result<usize>, blocking: bool) -> Result<usize> {
        match r {
            Ok(0) => Err(Error::Read(IoFailure::closed())),
            Ok(n) => {
                self.rend += n;
                self.read_total += n as u64;
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
            self.make_room()?;
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
                    self.read_total += n as u64;
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
        self.make_room()?;
        let end = self.rend;
        let r = match &mut self.stream {
            Stream::Fake(w) => w.recv(&mut self.rbuf[end..], false),
            s => rustix::net::recv(s.fd(), &mut self.rbuf[end..], RecvFlags::DONTWAIT)
                .map(|(n, _)| n)
                .map_err(io::Error::from),
        };
        self.after_read(r, false)
    }

    /// Read, blocking up to the socket's read timeout (then `Error::Timeout`).
    #[inline(always)]
    pub fn recv_blocking(&mut self) -> Result<usize> {
        if self.tls.is_some() {
            return self.recv_tls(true);
        }
        self.make_room()?;
        let end = self.rend;
        let r = self.stream.read(&mut self.rbuf[end..]);
        self.after_read(r, true)
    }

    /// Whether the read buffer grew past `KEEP_READ_BUF` for a unit: a value in it may be taken
    /// with the whole buffer (`take_read_buffer`) rather than copied out.
    pub fn holds_large_unit(&self) -> bool {
        self.rbuf.len() > KEEP_READ_BUF
    }

    /// The read buffer whole, and the offset in it of the `len` bytes at address `at` (a value
    /// parsed out of `unread` since the last read), when it grew past `KEEP_READ_BUF`: a buffer
    /// that `shrink` would give back anyway becomes the value's, which saves a copy of the
    /// value and the memory of a second one. The unread bytes (call after `consume`) move to a
    /// fresh buffer of the usual size. `None` when the buffer is not that large, the bytes are
    /// not inside it, or the fresh buffer cannot be had.
    pub fn take_read_buffer(&mut self, at: usize, len: usize) -> Option<(Vec<u8>, usize)> {
        let start = at.checked_sub(self.rbuf.as_ptr() as usize)?;
        if !self.holds_large_unit() || start.checked_add(len)? > self.rbuf.len() {
            return None;
        }
        let rest = self.rend - self.rpos;
        let size = rest.max(READ_CHUNK);
        let mut fresh = Vec::new();
        fresh.try_reserve_exact(size).ok()?;
        fresh.extend_from_slice(self.unread());
        fresh.resize(size, 0);
        self.rpos = 0;
        self.rend = rest;
        Some((std::mem::replace(&mut self.rbuf, fresh), start))
    }

    /// Give back an oversized read buffer before the connection goes idle.
    pub fn shrink(&mut self) {
        if self.rbuf.len() > KEEP_READ_BUF && self.rpos == self.rend {
            self.rbuf = vec![0; READ_CHUNK];
            self.rpos = 0;
            self.rend = 0;
        }
    }
}
