//! A server batch in flight on its connection: its requests written as the socket takes them
//! (TLS record ends honoured), the replies that have arrived handed to `Replies` to route.
//!
//! Owns `InFlight`. Uses `connection::Connection` (non-blocking send, read buffer), the plan's
//! `ServerBatch`, `Replies` and the sinks. Never waits: the driver does.

use std::io::IoSlice;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};

use super::batch::ServerBatch;
use super::replies::Replies;
use super::sink::Sink;
use super::stall::Check;
use crate::connection::Connection;
use crate::error::{Error, Result};

/// A batch in flight on its connection.
pub(super) struct InFlight<'k> {
    pub batch: ServerBatch<'k>,
    pub conn: Box<Connection>,
    binary: bool,
    /// Index of the next entry of `batch.record_ends` to honour.
    record: usize,
    /// Whether the connection came from the pool (only those are retried when found closed).
    pub reused: bool,
    /// Whether the requests may be sent again after a reply-less failure (reads only).
    pub replay_safe: bool,
    /// How much of `batch.wbuf` is written.
    pub wpos: usize,
    /// Bytes written before `batch.wbuf` was started over (`append`).
    written: usize,
    /// The first of `batch.ext` not all written, and how much of it is.
    ext_next: usize,
    ext_pos: usize,
    pub replies: Replies,
    pub last_progress: Instant,
    pub failed: Option<Error>,
    /// Whether the batch stalled and what a fresh connection found (see `stall`).
    pub check: Check,
    /// When the batch started, and how many bytes its connection had read by then (metrics).
    pub started: Instant,
    pub read_before: u64,
}

impl<'k> InFlight<'k> {
    /// `now`: when the batch starts (its first deadline counts from there).
    pub fn new(
        batch: ServerBatch<'k>,
        conn: Box<Connection>,
        binary: bool,
        reused: bool,
        replay_safe: bool,
        now: Instant,
    ) -> Self {
        let read_before = conn.read_total();
        InFlight {
            batch,
            conn,
            binary,
            record: 0,
            reused,
            replay_safe,
            wpos: 0,
            written: 0,
            ext_next: 0,
            ext_pos: 0,
            replies: Replies::default(),
            last_progress: now,
            failed: None,
            check: Check::None,
            started: now,
            read_before,
        }
    }

    /// Queue a later piece of the same operation for this server behind what is in flight
    /// (`ServerBatch::append`); its no-progress clock starts over at `now`.
    /// A write whose buffer is all written starts it over, so that the buffer holds one piece
    /// at a time, not the whole operation (a read keeps all of it, to replay it).
    pub fn append(&mut self, more: ServerBatch<'k>, now: Instant) {
        if !self.replay_safe && !self.batch_writing() {
            self.written = self.sent();
            self.rewind();
            self.batch.wbuf.clear();
            self.batch.record_ends.clear();
            self.batch.ext.clear();
        }
        self.batch.append(more);
        self.last_progress = now;
    }

    /// Bytes of the requests written so far.
    pub fn sent(&self) -> usize {
        let values: usize = self.batch.ext[..self.ext_next]
            .iter()
            .map(|(_, d)| d.len())
            .sum();
        self.written + self.wpos + values + self.ext_pos
    }

    /// Bytes of all its requests, written or not.
    pub fn request_bytes(&self) -> usize {
        self.written + self.batch.request_len()
    }

    /// Back to the start of `batch`'s requests.
    fn rewind(&mut self) {
        self.wpos = 0;
        self.record = 0;
        self.ext_next = 0;
        self.ext_pos = 0;
    }

    /// Start over on a new connection: nothing of the batch was answered.
    pub fn restart_on(&mut self, conn: Box<Connection>) {
        self.read_before = conn.read_total();
        self.conn = conn;
        self.reused = false;
        self.written = 0;
        self.rewind();
        let max_value = self.replies.max_value;
        self.replies = Replies::default();
        self.replies.max_value = max_value;
        self.last_progress = Instant::now();
    }

    /// Whether the batch may be sent again from the start on a fresh connection: it only reads
    /// and nothing of its reply has arrived.
    pub fn replayable(&self) -> bool {
        self.replay_safe && !self.conn.received_since_begin() && self.replies.req == 0
    }

    /// Finished: failed, or every reply is in and every byte of the requests is out. (A server
    /// may answer before it has read all of a request: memcached refuses a too-large value
    /// after its command line and swallows the data block, which must still be sent in full.)
    pub fn done(&self) -> bool {
        self.failed.is_some() || (self.replies.complete(&self.batch) && !self.writing())
    }

    pub fn writing(&self) -> bool {
        self.batch_writing() || self.conn.pending_write()
    }

    /// Some of `batch`'s bytes are not written yet.
    fn batch_writing(&self) -> bool {
        self.wpos < self.batch.wbuf.len() || self.ext_next < self.batch.ext.len()
    }

    /// Parse every complete unit that has arrived into `sink`. A value the sink claimed (one
    /// that came in a read buffer grown past its usual size for it) is handed the buffer itself.
    pub fn parse_available(&mut self, sink: &mut dyn Sink) -> Result<()> {
        // Nothing read yet (the first look of every exchange, before its `recv`): routing no
        // bytes would find no reply, consume nothing and leave nothing over.
        if self.conn.unread().is_empty() {
            return Ok(());
        }
        if let Some(c) = sink.claims() {
            c.allow(self.conn.holds_large_unit());
        }
        let d = self
            .replies
            .route(&self.batch, self.binary, self.conn.unread(), sink);
        if let Ok(d) = &d {
            self.conn.consume(d.used);
        }
        if let Some((at, len)) = sink.claims().and_then(|c| c.pending()) {
            // (After a broken reply the connection is dropped, and the key fails with it.)
            let taken = d
                .as_ref()
                .ok()
                .and_then(|_| self.conn.take_read_buffer(at, len));
            if let Some(k) = sink.claims().and_then(|c| c.settle(taken)) {
                let lost = Error::Protocol("a large value's buffer was lost".into());
                sink.revoke(&[k], &lost);
            }
        }
        let d = d?;
        if d.synced {
            self.conn.synced();
        }
        if let Some(n) = d.need {
            self.conn.reserve_unit(n)?;
        }
        // After the last reply unit that has arrived: any byte left over was never asked for.
        if self.conn.is_idle_clean() || !self.replies.complete(&self.batch) {
            Ok(())
        } else {
            Err(Error::Protocol(
                "the server sent more than was asked".into(),
            ))
        }
    }

    /// Its connection as `poll` watches it: for reading, and for writing while it writes.
    pub fn poll_fd(&self) -> PollFd<'_> {
        let mut flags = PollFlags::IN;
        if self.writing() {
            flags |= PollFlags::OUT;
        }
        PollFd::from_borrowed_fd(self.conn.fd(), flags)
    }

    /// Write what the socket takes now; true if anything was written.
    pub fn write_some(&mut self) -> Result<bool> {
        if !self.batch.ext.is_empty() {
            return self.write_vectored();
        }
        let mut progressed = false;
        while self.writing() {
            let pending = self.conn.pending_write();
            let mut end = self.batch.wbuf.len();
            while let Some(&e) = self.batch.record_ends.get(self.record) {
                if e > self.wpos {
                    end = e;
                    break;
                }
                self.record += 1;
            }
            let n = self
                .conn
                .send_nonblocking(&self.batch.wbuf[self.wpos..end])?;
            if n == 0 {
                progressed |= pending && !self.conn.pending_write();
                break;
            }
            self.wpos += n;
            progressed = true;
        }
        Ok(progressed)
    }

    /// `write_some` for a batch with borrowed values (`ServerBatch::ext`, never under TLS, so
    /// no record ends): what is left, up to `PARTS` slices of `wbuf` and values in their
    /// order, in one vectored send at a time.
    fn write_vectored(&mut self) -> Result<bool> {
        const PARTS: usize = 16;
        let mut progressed = false;
        while self.writing() {
            let pending = self.conn.pending_write();
            let (b, mut parts, mut k) = (&self.batch, [IoSlice::new(&[]); PARTS], 0);
            let (mut at, mut next) = (self.wpos, self.ext_next);
            let mut pos = self.ext_pos;
            while let (true, Some((seg, value))) = (k < PARTS, b.segment(at, next, pos)) {
                parts[k] = IoSlice::new(seg);
                k += 1;
                if value {
                    (next, pos) = (next + 1, 0);
                } else {
                    at += seg.len();
                }
            }
            let n = self.conn.send_vectored(&parts[..k])?;
            if n == 0 {
                progressed |= pending && !self.conn.pending_write();
                break;
            }
            self.advance(n);
            progressed = true;
        }
        Ok(progressed)
    }

    /// `n` more bytes of the requests written (`write_vectored`).
    fn advance(&mut self, mut n: usize) {
        while let Some((seg, value)) = self.batch.segment(self.wpos, self.ext_next, self.ext_pos) {
            let (len, m) = (seg.len(), n.min(seg.len()));
            if !value {
                self.wpos += m;
            } else if m == len {
                (self.ext_next, self.ext_pos) = (self.ext_next + 1, 0);
            } else {
                self.ext_pos += m;
            }
            n -= m;
            if n == 0 {
                break;
            }
        }
    }

    /// The remaining keys of this batch, which will get no reply now.
    pub fn fail_rest(&self, sink: &mut dyn Sink, e: &Error) {
        self.replies.fail_rest(&self.batch, sink, e);
    }
}
