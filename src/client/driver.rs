//! Driving batches to completion: check out a connection per server batch, then write and read
//! all of them at once. One batch alone is written and read with blocking calls (one `send`,
//! one `recv` for a small request); several are driven by one `poll` loop that interleaves
//! writes and reads, so no batch size can deadlock on full socket buffers. Each batch has its
//! own deadline, so a hung server fails only its own keys. At the end a clean connection goes
//! back to the pool and a failed one is dropped, with the server's health noted.
//!
//! The only file that waits on sockets (`rustix::event::poll`). Uses `server::Server` (checkout,
//! checkin, health), `connection`, the in-flight batches and the sinks.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::check::{self, Check};
use super::inflight::InFlight;
use super::plan::ServerBatch;
use super::sink::{unexpected, LineSink, Sink, Tally};
use super::snapshot::Snapshot;
use super::{Client, EventKind};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::server::{Probe, Server};

/// After this many unwaited `noreply` writes on a connection, the next one waits for the server
/// to catch up (`ServerBatch::prepend_sync`): what it may owe stays bounded. memcached answers a
/// `noreply` command only when it cannot parse it, so the debt is rarely more than a count. The
/// wait is rare too: a wait every 1,024 writes cost a loop of `noreply` writes on one CPU with
/// its server a third more time (each wait hands the CPU to the server, and the scheduler then
/// keeps preempting the client), more than the write itself costs in the client.
const MAX_UNSYNCED: u32 = 1 << 16;

/// How far a single `noreply` write got without blocking (`Client::forget_start`).
pub enum Quick<T> {
    /// Sent whole, or failed at once (a server in its retry window): the outcome.
    Done(Result<T>),
    /// Partly sent, or the send failed: `Client::forget_rest` finishes it, and may block.
    Rest(Box<Unfinished<T>>),
    /// Nothing done: the general path applies (it may block: connecting, a sync).
    Blocking,
}

/// A single `noreply` write that `forget_start` began (`Client::forget_rest` ends it).
pub struct Unfinished<T> {
    snap: Arc<Snapshot>,
    a: InFlight,
    ok: T,
}

thread_local! {
    /// `forget_start`'s request buffer, kept between calls on a thread.
    static FORGET_BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A buffer that grew beyond this (a large value) is not kept.
const FORGET_BUF_KEPT: usize = 16 * 1024;

impl Client {
    /// Check out connections for the batches and drive them to completion.
    /// `replay_safe`: the requests only read, so a stale pooled connection that failed before any
    /// reply byte may replay them on a new one. Writes are replayed only if nothing was sent, and
    /// their pooled connections are probed for a server-side close before anything is sent.
    pub(super) fn run(
        &self,
        snap: &Snapshot,
        batches: Vec<ServerBatch>,
        sink: &mut dyn Sink,
        replay_safe: bool,
    ) {
        let mut now = Instant::now();
        let n = batches.len();
        let mut started = batches
            .into_iter()
            .filter_map(|b| self.start(snap, b, &mut *sink, replay_safe, &mut now));
        let (first, second) = (started.next(), started.next());
        let mut flights: Vec<InFlight> = match (first, second) {
            (Some(a), Some(b)) => {
                let mut all = Vec::with_capacity(n);
                all.extend([a, b].into_iter().chain(started));
                all
            }
            // One connection (or none): no list of them to keep, no poll loop.
            (one, _) => {
                drop(started);
                if let Some(a) = one {
                    let a = self.drive_one(snap, a, sink);
                    self.finish(snap, a, sink);
                }
                return;
            }
        };
        self.drive_many(snap, &mut flights, sink);
        for a in flights {
            self.finish(snap, a, sink);
        }
    }

    /// Check out a connection for `batch`; `None` when that failed (the batch's keys are
    /// failed). `now` is read again after a checkout that had to connect.
    fn start(
        &self,
        snap: &Snapshot,
        batch: ServerBatch,
        sink: &mut dyn Sink,
        replay_safe: bool,
        now: &mut Instant,
    ) -> Option<InFlight> {
        let probe = Self::probe_for(&batch, replay_safe, *now);
        match self.checkout_for(snap, batch.server, probe, now) {
            Ok((conn, reused)) => Some(Self::launch(snap, batch, conn, reused, replay_safe, *now)),
            Err(e) => {
                sink.fail(&batch.keys, &e);
                None
            }
        }
    }

    /// When a pooled connection for `batch` is peeked at before anything is sent (see
    /// `Server::checkout`).
    pub(super) fn probe_for(batch: &ServerBatch, replay_safe: bool, now: Instant) -> Probe {
        if replay_safe {
            Probe::Never
        } else if batch.forget {
            Probe::BeforeNoreply(now)
        } else {
            Probe::UnlessAnswered(now)
        }
    }

    /// `batch` in flight on `conn`, which was checked out for it: a sync goes first if the
    /// connection owes one.
    pub(super) fn launch(
        snap: &Snapshot,
        mut batch: ServerBatch,
        mut conn: Connection,
        reused: bool,
        replay_safe: bool,
        now: Instant,
    ) -> InFlight {
        conn.begin_request();
        if conn.unsynced() > 0 && (!batch.forget || conn.unsynced() >= MAX_UNSYNCED) {
            batch.prepend_sync();
        }
        let binary = snap.behaviors.binary;
        let mut a = InFlight::new(batch, conn, binary, reused, replay_safe, now);
        a.replies.max_value = snap.behaviors.max_value_size;
        a
    }

    /// A connection to server `s` for a batch, unless the server is in its retry window or
    /// ejected (`ServerDown`/`ServerDead` at once) or the connect fails (counted against the
    /// server). `now` is read again after a checkout that had to connect.
    fn checkout_for(
        &self,
        snap: &Snapshot,
        s: usize,
        probe: Probe,
        now: &mut Instant,
    ) -> Result<(Connection, bool)> {
        let Some(server) = snap.topo.servers.get(s) else {
            return Err(Error::NoServers);
        };
        Self::healthy(server, *now)?;
        match server.checkout(&snap.opts, probe) {
            Ok((conn, reused)) => {
                if !reused {
                    // Connecting may have taken a while: the next checkout needs the time.
                    *now = Instant::now();
                }
                Ok((conn, reused))
            }
            Err(e) => {
                server.metrics.error(&e);
                self.server_failed(snap, s, &e);
                Err(e)
            }
        }
    }

    /// The outcome of a `forget_start`, finishing what it left (this may block); `None`: the
    /// general path applies.
    pub(crate) fn forget_end<T: Clone + Tally>(&self, q: Quick<T>) -> Option<Result<T>> {
        match q {
            Quick::Done(r) => Some(r),
            Quick::Rest(u) => self.forget_rest(*u),
            Quick::Blocking => None,
        }
    }

    /// One `noreply` text write of one key (a loop of `set(..., noreply=True)`), up to its
    /// first `send`: the steps of `run` for a batch of one (route, health, checkout with the
    /// `noreply` peek rule, send, accounting) without a plan, a sink or an in-flight record, so
    /// that the call is one `send` and little else. `ok` is the outcome a `noreply` write
    /// reports (and tallies); `per_key` is what the request takes besides the key.
    /// `Quick::Blocking` when the case is not this simple (binary, TLS, an invalid key, a
    /// connection that owes a sync, or, with `may_connect` false, no idle connection): nothing
    /// was sent, and the caller takes the general path. A send that the socket does not take
    /// whole, or that fails, is `Quick::Rest`, which `forget_end` goes on with as the general
    /// path's batch would. With `may_connect` false it never blocks, so that the binding may
    /// call it without releasing the interpreter, and release it only for what is left.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forget_start<T: Clone + Tally>(
        &self,
        snap: &Arc<Snapshot>,
        family: Family,
        key: &[u8],
        verify_keys: bool,
        per_key: usize,
        ok: T,
        encode: impl FnOnce(&mut Vec<u8>, &[u8]),
        may_connect: bool,
    ) -> Quick<T> {
        if snap.behaviors.binary || snap.opts.security.tls.is_some() {
            return Quick::Blocking;
        }
        let Ok(wire) = snap.wire_key(key, verify_keys) else {
            return Quick::Blocking;
        };
        let s = snap.route(key, &wire);
        let Some(server) = snap.topo.servers.get(s) else {
            return Quick::Blocking;
        };
        let mut now = Instant::now();
        let probe = Probe::BeforeNoreply(now);
        let checked_out = if may_connect {
            self.checkout_for(snap, s, probe, &mut now).map(Some)
        } else {
            Self::healthy(server, now).map(|()| server.checkout_idle(probe).map(|c| (c, true)))
        };
        let (mut conn, reused) = match checked_out {
            Ok(Some(c)) => c,
            Ok(None) => return Quick::Blocking,
            Err(e) => return Quick::Done(Err(e)),
        };
        if conn.unsynced() >= MAX_UNSYNCED {
            server.checkin(conn);
            return Quick::Blocking;
        }
        // The buffer of this thread's previous such write: no allocation per call.
        let mut wbuf = FORGET_BUF.take();
        wbuf.clear();
        wbuf.reserve(wire.len() + per_key);
        encode(&mut wbuf, &wire);
        conn.begin_request();
        let sent = conn.send_noreply(&wbuf).unwrap_or(0);
        if sent == wbuf.len() {
            server.metrics.batch(family, 1, None, sent, 0);
            ok.tally(&server.metrics);
            conn.sent_noreply(1, now);
            self.answered_again(server);
            server.checkin(conn);
            if wbuf.capacity() <= FORGET_BUF_KEPT {
                FORGET_BUF.set(wbuf);
            }
            return Quick::Done(Ok(ok));
        }
        // The rest of the write (or its failure, which the general path retries on a new
        // connection when nothing was sent) as a batch of one.
        let mut batch = ServerBatch::new(s);
        batch.wbuf = wbuf;
        batch.keys.push(0);
        batch.family = family;
        batch.close_noreply();
        let mut a = InFlight::new(batch, conn, false, reused, false, now);
        a.wpos = sent;
        Quick::Rest(Box::new(Unfinished {
            snap: Arc::clone(snap),
            a,
            ok,
        }))
    }

    /// What `forget_start` left: the rest of a write the socket did not take whole (this may
    /// wait for the socket, or reconnect).
    fn forget_rest<T: Clone + Tally>(&self, u: Unfinished<T>) -> Option<Result<T>> {
        let Unfinished { snap, a, ok } = u;
        let mut sink = LineSink::new(1, |_| Err(unexpected()), Some(ok));
        let a = self.drive_one(&snap, a, &mut sink);
        self.finish(&snap, a, &mut sink);
        sink.out.finish().pop()
    }

    /// `ServerDown`/`ServerDead` at once (counted) while the server is in its retry window or
    /// ejected.
    pub(super) fn healthy(server: &Server, now: Instant) -> Result<()> {
        server
            .check_health(now)
            .inspect_err(|e| Self::count_skip(server, e))
    }

    /// Count a call that skipped `server` (in its retry window or ejected) with `e`.
    pub(super) fn count_skip(server: &Server, e: &Error) {
        server.metrics.down_skips.fetch_add(1, Ordering::Relaxed);
        server.metrics.error(e);
    }

    /// A clean exchange with `server`: clear its failure record, and note that it is up again
    /// if it had failed.
    fn answered_again(&self, server: &Server) {
        if server.record_success() {
            self.note_event(EventKind::Up, &server.address, None);
        }
    }

    /// Replace a stale pooled connection that failed before any reply byte with a new one and
    /// start the batch over. Returns false if that is not safe or the reconnect failed: a write
    /// that reached the server may have been applied, so it is replayed only if nothing was sent.
    pub(super) fn retry_fresh(&self, snap: &Snapshot, a: &mut InFlight, e: &Error) -> bool {
        if !(a.reused
            && !a.conn.received_since_begin()
            && a.replies.req == 0
            && (a.replay_safe || a.wpos == 0)
            && e.is_stale_connection())
        {
            return false;
        }
        let Some(server) = snap.topo.servers.get(a.batch.server) else {
            return false;
        };
        match server.connect(&snap.opts) {
            Ok(c) => {
                a.restart_on(c);
                true
            }
            Err(_) => false,
        }
    }

    /// One server: write, then blocking reads with the socket's timeout (one `send`, one `recv`
    /// for a small request). Falls back to the poll loop if the request does not fit the socket
    /// or a signal interrupts a read.
    fn drive_one(&self, snap: &Snapshot, mut a: InFlight, sink: &mut dyn Sink) -> InFlight {
        loop {
            match Self::exchange_blocking(&mut a, sink) {
                Ok(true) => return a,
                Ok(false) => {
                    self.drive_many(snap, std::slice::from_mut(&mut a), sink);
                    return a;
                }
                Err(e) => {
                    if self.retry_fresh(snap, &mut a, &e) {
                        continue;
                    }
                    a.failed = Some(e);
                    return a;
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
    pub(super) fn drive_many(
        &self,
        snap: &Snapshot,
        flights: &mut [InFlight],
        sink: &mut dyn Sink,
    ) {
        // Start every write without waiting; afterwards touch a socket only when poll says so.
        for a in flights.iter_mut().filter(|a| !a.done()) {
            if let Err(e) = a.write_some().and_then(|_| a.parse_available(sink)) {
                if !self.retry_fresh(snap, a, &e) {
                    a.failed = Some(e);
                }
            }
        }
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

    /// The no-progress timeout that applies to a batch now: the write timeout while it writes.
    pub(super) fn limit(snap: &Snapshot, a: &InFlight) -> Duration {
        if a.writing() {
            snap.opts.write_timeout
        } else {
            snap.opts.read_timeout
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
                let at = a.last_progress + check::check_after(limit);
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

    /// Write and read what `events` allow; true if anything moved.
    pub(super) fn serve(a: &mut InFlight, events: PollFlags, sink: &mut dyn Sink) -> Result<bool> {
        let broken = events.intersects(PollFlags::ERR | PollFlags::HUP);
        let mut progressed = false;
        if a.writing() && (events.contains(PollFlags::OUT) || broken) {
            progressed |= a.write_some()?;
        }
        if (events.contains(PollFlags::IN) || broken) && a.conn.recv_nonblocking()? > 0 {
            progressed = true;
            a.parse_available(sink)?;
        }
        Ok(progressed)
    }

    /// Return a clean connection to the pool; otherwise drop it, fail what is left and note
    /// the server's failure.
    pub(super) fn finish(&self, snap: &Snapshot, mut a: InFlight, sink: &mut dyn Sink) {
        let Some(server) = snap.topo.servers.get(a.batch.server) else {
            let e = a.failed.take().unwrap_or(Error::NoServers);
            a.fail_rest(sink, &e);
            return;
        };
        let m = &server.metrics;
        let read = a.conn.read_total().saturating_sub(a.read_before);
        let b = &a.batch;
        let timed = (!b.forget).then(|| a.started.elapsed());
        m.batch(b.family, b.keys.len(), timed, b.wbuf.len(), read);
        if let Some(e) = &a.failed {
            m.error(e);
        }
        match a.failed.take() {
            None if a.conn.is_idle_clean() => {
                if a.batch.forget {
                    sink.assume_ok(&a.batch.keys);
                    a.conn
                        .sent_noreply(a.batch.keys.len() as u32, a.last_progress);
                } else {
                    // The server answered at the last progress noted, or later.
                    a.conn
                        .answered((!a.replies.error_reply).then_some(a.last_progress));
                }
                if matches!(a.check, Check::Replayed(_)) {
                    // A read that stalled was answered on a fresh connection.
                    m.transient.fetch_add(1, Ordering::Relaxed);
                }
                self.answered_again(server);
                let conn = if a.batch.probe_after {
                    self.probe_meta(server, a.conn)
                } else {
                    Some(a.conn)
                };
                if let Some(conn) = conn {
                    server.checkin(conn);
                }
            }
            None => {}
            Some(e) => {
                if a.batch.forget {
                    sink.fail(&a.batch.keys, &e);
                }
                a.fail_rest(sink, &e);
                // A server that answered with an error line and then closed the connection
                // (twemproxy, after a backend failed a multi-key get) is alive: only this
                // connection is gone, and the next request opens another.
                // A timeout while the server answered a ping on a fresh connection is this
                // connection's (a lost packet), not the server's: it raises, nothing more.
                if a.check.spares_server(&e) {
                    m.transient.fetch_add(1, Ordering::Relaxed);
                } else if !(a.replies.error_reply && e.is_stale_connection()) {
                    self.server_failed(snap, a.batch.server, &e);
                }
            }
        }
        sink.tally(&a.batch.keys, m);
    }
}
