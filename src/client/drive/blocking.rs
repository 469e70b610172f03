//! The blocking driver: an operation planned, driven and settled (`perform`). Check out a connection per server batch, then write and read all of
//! them at once. One batch alone is written and read with blocking calls (one `send`, one
//! `recv` for a small request); several are driven by one `poll` loop that interleaves writes
//! and reads, so no batch size can deadlock on full socket buffers. Each batch has its own
//! deadline, so a hung server fails only its own keys.
//!
//! Waits on sockets (`rustix::event::poll`, and blocking reads); a stalled batch is checked on a
//! fresh connection (`start_checks`, see `stall`). Uses the shared `steps`, `stall`, the
//! in-flight batches and the sinks.

use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::steps::count_hot;
use crate::client::batch::{Batches, ServerBatch};
use crate::client::inflight::InFlight;
use crate::client::op::{Args, Operation};
use crate::client::sink::Sink;
use crate::client::snapshot::Snapshot;
use crate::client::stall::{self, bounded, due, start_ping, Check};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::metrics::Family;

/// Keys in the first piece of a streamed write (`Client::perform_streamed`); a write of fewer
/// than twice as many is planned whole.
const STREAM_PIECE: usize = 1024;

impl Client {
    /// Send the planned batches (counted in `family`) and collect the outcomes in `sink`, keys
    /// failed up front (`rejected`) included. (The sink is borrowed: a sink is large, and
    /// moving it in and out was a copy each way.)
    #[allow(clippy::too_many_arguments)]
    pub(in crate::client) fn execute<S: Sink>(
        &self,
        snap: &Snapshot,
        family: Family,
        mut batches: Batches,
        rejected: Vec<(u32, Error)>,
        sink: &mut S,
        replay_safe: bool,
    ) {
        for b in &mut batches {
            b.family = family;
        }
        for (i, e) in rejected {
            sink.reject(i, e);
        }
        self.run(snap, batches, sink, replay_safe);
    }

    /// The blocking call of `op` on `snap`: plan, drive every batch, settle.
    pub(in crate::client) fn perform<O: Operation>(
        &self,
        snap: &Snapshot,
        op: &O,
        args: Args<'_, '_>,
    ) -> O::Output {
        if args.count() >= 2 * STREAM_PIECE && op.streams(snap) {
            return self.perform_streamed(snap, op, args);
        }
        let p = op.plan(snap, args);
        count_hot(snap, &p.batches, args);
        let mut sink = op.sink(snap, &p.wire_keys[..], args);
        let (family, replay_safe) = (op.family(), op.replay_safe());
        self.execute(snap, family, p.batches, p.rejected, &mut sink, replay_safe);
        op.settle(self, snap, sink, args)
    }

    /// `perform` for a large write, in pieces (`STREAM_PIECE` keys, then each twice the last):
    /// each piece is planned, queued on its servers' connections and written as far as the
    /// sockets take it before the next is encoded, so the servers work on the first keys while
    /// the client encodes the rest (planned whole, a batch of 10,000 keys left the servers idle
    /// for the time it took to encode). A server's pieces go out in order on one connection, a
    /// connection's buffer holds one piece at a time, and a server that could not be reached is
    /// tried once per call and fails the keys of every piece with the same error, as in `run`.
    /// Where the client and the servers share one CPU nothing overlaps, and the pieces cost a
    /// few more sends.
    fn perform_streamed<O: Operation>(
        &self,
        snap: &Snapshot,
        op: &O,
        args: Args<'_, '_>,
    ) -> O::Output {
        let no_wire: &[std::borrow::Cow<'_, [u8]>] = &[];
        let mut sink = op.sink(snap, no_wire, args);
        let (family, replay_safe) = (op.family(), op.replay_safe());
        let n = args.count();
        let mut flights: Vec<InFlight> = Vec::with_capacity(snap.topo.servers.len().min(n));
        let mut unreachable: Vec<(usize, Error)> = Vec::new();
        let mut now = Instant::now();
        let (mut at, mut piece) = (0, STREAM_PIECE);
        while at < n {
            // Each piece twice the last (the rest whole when it is less than twice as long):
            // the first one starts the servers early, and few sends go out in all.
            let end = if n - at < 2 * piece { n } else { at + piece };
            piece *= 2;
            let p = op.plan(snap, args.piece(at, end));
            count_hot(snap, &p.batches, args.piece(at, end));
            for (i, e) in p.rejected {
                sink.reject(i + at as u32, e);
            }
            for mut b in p.batches {
                b.family = family;
                b.shift_keys(at as u32);
                if let Some(a) = flights.iter_mut().find(|a| a.batch.server == b.server) {
                    a.append(b, now);
                } else if let Some((_, e)) = unreachable.iter().find(|(s, _)| *s == b.server) {
                    sink.fail(&b.keys, e);
                } else {
                    let server = b.server;
                    match self.start(snap, b, &mut sink, replay_safe, &mut now) {
                        Ok(a) => flights.push(a),
                        Err(e) => unreachable.push((server, e)),
                    }
                }
            }
            self.push_writes(snap, &mut flights, &mut sink);
            now = Instant::now();
            at = end;
        }
        self.drive_many(snap, &mut flights, &mut sink);
        for a in flights {
            self.finish(snap, a, &mut sink);
        }
        op.settle(self, snap, sink, args)
    }

    /// Check out connections for the batches and drive them to completion.
    /// `replay_safe`: the requests only read, so a stale pooled connection that failed before any
    /// reply byte may replay them on a new one. Writes are replayed only if nothing was sent, and
    /// their pooled connections are peeked at for a server-side close before anything is sent.
    pub(in crate::client) fn run(
        &self,
        snap: &Snapshot,
        batches: Batches,
        sink: &mut dyn Sink,
        replay_safe: bool,
    ) {
        let mut now = Instant::now();
        let n = batches.len();
        let mut batches = batches.into_iter();
        // One server (every single-key call): no list of connections, no poll loop, and the
        // batch in flight moved as little as can be (it is large: a move is a copy).
        if n == 1 {
            if let Some(b) = batches.next() {
                if let Ok(mut a) = self.start(snap, b, &mut *sink, replay_safe, &mut now) {
                    self.drive_one(snap, &mut a, sink);
                    self.finish(snap, a, sink);
                }
            }
            return;
        }
        let mut flights: Vec<InFlight> = Vec::with_capacity(n);
        flights.extend(
            batches.filter_map(|b| self.start(snap, b, &mut *sink, replay_safe, &mut now).ok()),
        );
        if let [a] = flights.as_mut_slice() {
            // One connection of several (the others failed to start): no poll loop either.
            self.drive_one(snap, a, sink);
        } else {
            self.drive_many(snap, &mut flights, sink);
        }
        for a in flights {
            self.finish(snap, a, sink);
        }
    }

    /// Check out a connection for `batch`; the error when that failed (the batch's keys are
    /// failed with it). `now` is read again after a checkout that had to connect.
    fn start<'k>(
        &self,
        snap: &Snapshot,
        batch: ServerBatch<'k>,
        sink: &mut dyn Sink,
        replay_safe: bool,
        now: &mut Instant,
    ) -> Result<InFlight<'k>> {
        let peek = Self::peek_for(&batch, replay_safe);
        match self.checkout_for(snap, batch.server, peek) {
            Ok((conn, reused)) => {
                if !reused {
                    // Connecting may have taken a while: the next checkout needs the time.
                    *now = Instant::now();
                }
                Ok(Self::launch(snap, batch, conn, reused, replay_safe, *now))
            }
            Err(e) => {
                sink.fail(&batch.keys, &e);
                Err(e)
            }
        }
    }

    /// One server: write, then blocking reads with the socket's timeout (one `send`, one `recv`
    /// for a small request). Falls back to the poll loop if the request does not fit the socket
    /// or a signal interrupts a read.
    pub(in crate::client) fn drive_one(
        &self,
        snap: &Snapshot,
        a: &mut InFlight,
        sink: &mut dyn Sink,
    ) {
        loop {
            match Self::exchange_blocking(a, sink) {
                Ok(true) => return,
                Ok(false) => {
                    self.drive_many(snap, std::slice::from_mut(a), sink);
                    return;
                }
                Err(e) => {
                    if self.retry_fresh(snap, a, &e) {
                        continue;
                    }
                    a.failed = Some(e);
                    return;
                }
            }
        }
    }

    /// `drive_one`'s blocking exchange: true when done, false when the poll loop must go on.
    fn exchange_blocking(a: &mut InFlight, sink: &mut dyn Sink) -> Result<bool> {
        a.write_some()?;
        if a.writing() {
            return Ok(false);
        }
        let mut received = false;
        loop {
            a.parse_available(sink)?;
            if a.done() {
                return Ok(true);
            }
            // The clock is read only when a reply takes more than one read.
            if received {
                a.last_progress = Instant::now();
            }
            match a.conn.recv_blocking() {
                // A signal interrupted the wait. Waiting again would restart the socket's
                // timeout (periodic signals would stretch it forever): the poll loop goes on
                // against the deadline counted from the last progress.
                Ok(0) => return Ok(false),
                Ok(_) => received = true,
                // The socket's wait ran out: at the deadline, or at the check point when
                // stalls are checked (`SocketOptions::recv_wait`). The poll loop decides which.
                Err(Error::Timeout) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Several servers at once: one poll loop over every batch not done yet.
    pub(in crate::client) fn drive_many(
        &self,
        snap: &Snapshot,
        flights: &mut [InFlight],
        sink: &mut dyn Sink,
    ) {
        // Start every write without waiting; afterwards touch a socket only when poll says so.
        self.push_writes(snap, flights, sink);
        let mut waiting: Vec<usize> = Vec::with_capacity(flights.len());
        let mut ready: Vec<PollFlags> = Vec::with_capacity(flights.len());
        let mut pinged: Vec<(usize, PollFlags)> = Vec::new();
        let checks = snap.policy.check_stalls;
        loop {
            let mut wait = Self::expire(snap, flights, checks);
            // Connecting for a check blocks: first see what arrived meanwhile.
            if checks && self.start_checks(snap, flights) {
                wait = Duration::ZERO;
            }
            waiting.clear();
            waiting.extend((0..flights.len()).filter(|&i| !flights[i].done()));
            if waiting.is_empty() {
                return;
            }
            Self::poll(flights, &waiting, wait, &mut ready, &mut pinged);
            for &(i, events) in &pinged {
                if !events.is_empty() {
                    flights[i].check.serve_ping(snap.behaviors.binary);
                }
            }
            for (&i, &events) in waiting.iter().zip(&ready) {
                if events.is_empty() {
                    continue;
                }
                let a = &mut flights[i];
                match Self::serve(a, events, sink) {
                    Ok(true) => a.last_progress = Instant::now(),
                    Ok(false) => {}
                    Err(e) => {
                        if !self.retry_fresh(snap, a, &e) {
                            a.failed = Some(e);
                        }
                    }
                }
            }
        }
    }

    /// Write what each unfinished batch's socket takes now and parse what has arrived, without
    /// waiting.
    fn push_writes(&self, snap: &Snapshot, flights: &mut [InFlight], sink: &mut dyn Sink) {
        for a in flights.iter_mut().filter(|a| !a.done()) {
            if let Err(e) = a.write_some().and_then(|_| a.parse_available(sink)) {
                if !self.retry_fresh(snap, a, &e) {
                    a.failed = Some(e);
                }
            }
        }
    }

    /// Deadlines: no progress for the read (or write) timeout fails that server only. Returns
    /// how long the next poll may wait (with `checks`, until the next check point at most).
    fn expire(snap: &Snapshot, flights: &mut [InFlight], checks: bool) -> Duration {
        let now = Instant::now();
        let mut wait = Duration::from_secs(3600);
        for a in flights.iter_mut().filter(|a| !a.done()) {
            let limit = Self::limit(snap, a);
            let answered = a.conn.received_since_begin();
            let deadline = a.check.deadline(a.last_progress, limit, answered);
            if deadline <= now {
                a.failed = Some(Error::Timeout);
                continue;
            }
            wait = wait.min(deadline - now);
            if checks && !a.check.started() {
                let at = a.last_progress + stall::check_after(limit);
                wait = wait.min(at.saturating_duration_since(now));
            }
        }
        wait
    }

    /// Wait until one of the `waiting` batches can read or write (or `wait` passed); `ready`
    /// gets each one's events, `pinged` those of the checks' pings (batch index, events).
    fn poll(
        flights: &[InFlight],
        waiting: &[usize],
        wait: Duration,
        ready: &mut Vec<PollFlags>,
        pinged: &mut Vec<(usize, PollFlags)>,
    ) {
        let mut fds: Vec<PollFd<'_>> = waiting.iter().map(|&i| flights[i].poll_fd()).collect();
        let n = fds.len();
        pinged.clear();
        for &i in waiting {
            if let Some(p) = flights[i].check.ping() {
                fds.push(PollFd::from_borrowed_fd(p.fd(), PollFlags::IN));
                pinged.push((i, PollFlags::empty()));
            }
        }
        let ts = crate::connection::to_timespec(wait.max(Duration::from_millis(1)));
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        ready.clear();
        ready.extend(fds[..n].iter().map(|f| f.revents()));
        for (p, f) in pinged.iter_mut().zip(&fds[n..]) {
            p.1 = f.revents();
        }
    }

    /// Check each batch that made no progress up to its check point on a fresh connection,
    /// within what is left of its timeout: a read with no reply byte yet is sent again there,
    /// anything else gets a ping. True if any was checked (connecting blocked meanwhile).
    fn start_checks(&self, snap: &Snapshot, flights: &mut [InFlight]) -> bool {
        let mut any = false;
        for a in flights
            .iter_mut()
            .filter(|a| !a.done() && !a.check.started())
        {
            let limit = Self::limit(snap, a);
            let now = Instant::now();
            if !due(a.last_progress, limit, now) {
                continue;
            }
            any = true;
            let left = (a.last_progress + limit).saturating_duration_since(now);
            let opts = bounded(&snap.opts, left);
            let fresh = match snap.topo.servers.get(a.batch.server) {
                Some(server) => server.connect(&opts),
                None => Err(Error::NoServers),
            };
            a.check = match fresh {
                Ok(c) if a.replayable() => {
                    // The deadline stays where it was: the check runs inside the timeout.
                    a.restart_on(c);
                    Check::Replayed(now + left)
                }
                Ok(c) => start_ping(c, snap.behaviors.binary),
                Err(_) => Check::Failed,
            };
        }
        any
    }
}
