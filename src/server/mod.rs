//! One server as the client sees it: its address, a pool of idle connections, and its health
//! record (`health`: the failure policy, a pure state machine, kept here under a lock). Depends
//! on `connection`, `error` and `behaviors` (through `health`).
//!
//! The locks here are held only to push or pop a connection or to read or update the health
//! record, never across I/O, so threads sharing a client run their I/O in parallel.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::clock::Tick;
use crate::connection::connect::{Address, SocketOptions};
use crate::connection::Connection;
use crate::error::Result;
use crate::metrics::ServerMetrics;

pub mod health;

use health::{Counted, FailurePolicy, Health};

/// How many idle connections a server keeps; more are closed when returned.
const MAX_IDLE: usize = 64;

/// When `checkout` peeks at an idle connection before handing it out.
#[derive(Clone, Copy, Debug)]
pub enum Peek {
    /// Reads: a read that finds the connection closed is simply sent again on a new one.
    Never,
    /// `noreply` writes: nothing would ever tell that one went into a closed connection, so the
    /// connection is peeked at unless it carried a `noreply` write (or got an answer) shortly
    /// before this instant (see `Connection::needs_peek_before_noreply`).
    BeforeNoreply(Tick),
    /// Writes that wait for their answer: unless the server answered on the connection without
    /// an error line shortly before this instant (see `Connection::needs_peek`). Should the
    /// connection be closed after all, the write fails with an error and is not sent again.
    UnlessAnswered(Tick),
}

/// Whether a server speaks the meta protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaSupport {
    /// No probe has been answered since the server was last seen failing.
    Unknown,
    Yes,
    No,
}

/// One server of a client: where it is, its idle connections and its health. Shared by every
/// thread using the client; see the file header for the locking rule.
pub struct Server {
    pub address: Address,
    pub weight: u32,
    // Boxed on purpose: a connection moves out of this list and back on every call, and a
    // box moves as a pointer where the struct would be copied whole.
    #[allow(clippy::vec_box)]
    idle: Mutex<Vec<Box<Connection>>>,
    health: Mutex<Health>,
    /// Whether `health` holds anything but a clean record (written under its lock): lets the
    /// healthy common case check and clear it without taking the lock.
    troubled: std::sync::atomic::AtomicBool,
    /// Whether the server speaks the meta protocol: `META_UNKNOWN` until a probe answered.
    meta: AtomicU8,
    pub metrics: Arc<ServerMetrics>,
    /// Set when the server is ejected, cleared by `rejoined` once the ejection has run out.
    out_of_ring: std::sync::atomic::AtomicBool,
}

const META_UNKNOWN: u8 = 0;
const META_NO: u8 = 1;
const META_YES: u8 = 2;

impl Server {
    /// A server with no connection yet and a clean health record.
    pub fn new(address: Address, weight: u32) -> Server {
        Server {
            address,
            weight,
            idle: Mutex::new(Vec::new()),
            health: Mutex::new(Health::default()),
            troubled: std::sync::atomic::AtomicBool::new(false),
            meta: AtomicU8::new(META_UNKNOWN),
            metrics: Arc::new(ServerMetrics::default()),
            out_of_ring: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the server speaks the meta protocol, as far as a probe has told.
    pub fn meta_support(&self) -> MetaSupport {
        match self.meta.load(Ordering::Relaxed) {
            META_YES => MetaSupport::Yes,
            META_NO => MetaSupport::No,
            _ => MetaSupport::Unknown,
        }
    }

    /// Record what a probe (`mn`) found.
    pub fn set_meta_support(&self, yes: bool) {
        self.meta
            .store(if yes { META_YES } else { META_NO }, Ordering::Relaxed);
    }

    /// Fail fast while the server is in its retry window or ejected (`Health::check`).
    pub fn check_health(&self) -> Result<()> {
        if !self.troubled.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.health.lock().check(Instant::now())
    }

    /// True once when an ejection has run out (or was cleared): the server is back in the ring.
    pub fn rejoined(&self, now: Instant) -> bool {
        self.out_of_ring.load(Ordering::Relaxed)
            && !self.is_ejected(now)
            && self.out_of_ring.swap(false, Ordering::Relaxed)
    }

    /// Whether the server is currently out of the ring.
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.health.lock().is_ejected(now)
    }

    /// Count a failure that `health::verdict` holds against the server
    /// (`Health::record_failure`); an ejected server's idle connections are closed.
    pub fn record_failure(&self, now: Instant, policy: &FailurePolicy) -> Counted {
        // The server may come back as another program: probe its protocols again.
        self.meta.store(META_UNKNOWN, Ordering::Relaxed);
        let mut h = self.health.lock();
        self.troubled.store(true, Ordering::Relaxed);
        let counted = h.record_failure(now, policy);
        drop(h);
        if counted.ejected {
            self.idle.lock().clear();
            self.out_of_ring.store(true, Ordering::Relaxed);
        }
        counted
    }

    /// A successful exchange clears the failure record; true if the server had failed.
    pub fn record_success(&self) -> bool {
        if !self.troubled.load(Ordering::Relaxed) {
            return false;
        }
        let mut h = self.health.lock();
        self.troubled.store(false, Ordering::Relaxed);
        h.record_success()
    }

    /// Forget failures (pylibmc's `disconnect_all` resets libmemcached's failure state).
    pub fn reset_health(&self) {
        let mut h = self.health.lock();
        *h = Health::default();
        self.troubled.store(false, Ordering::Relaxed);
    }

    /// An idle connection if there is a usable one, else a new one. The flag says whether the
    /// connection was reused (only those get a transparent retry when found closed). `peek`
    /// says when idle connections are peeked at first, to skip those the server has closed (a
    /// restart) before anything is sent on them: writes cannot be replayed once sent.
    #[inline(always)]
    pub fn checkout(&self, opts: &SocketOptions, peek: Peek) -> Result<(Box<Connection>, bool)> {
        match self.checkout_idle(peek) {
            Some(c) => Ok((c, true)),
            None => self.connect(opts).map(|c| (c, false)),
        }
    }

    /// A usable idle connection, if there is one; never connects, never blocks (the peek is
    /// non-blocking).
    #[inline(always)]
    pub fn checkout_idle(&self, when: Peek) -> Option<Box<Connection>> {
        loop {
            let c = self.idle.lock().pop()?;
            // Inherited across fork(): drop our handle, never touch the shared socket.
            if !c.owned_by_this_process() {
                continue;
            }
            let peek = match when {
                Peek::Never => false,
                Peek::BeforeNoreply(now) => c.needs_peek_before_noreply(now),
                Peek::UnlessAnswered(now) => c.needs_peek(now),
            };
            if peek && !c.peer_still_open() {
                continue;
            }
            return Some(c);
        }
    }

    /// A new connection, counted in the metrics.
    pub fn connect(&self, opts: &SocketOptions) -> Result<Box<Connection>> {
        // Boxed: a connection moves in and out of the pool on every call, a pointer's copy.
        let mut c = Box::new(Connection::connect(&self.address, opts)?);
        let m = &self.metrics.counted;
        m.connects.fetch_add(1, Ordering::Relaxed);
        c.track_close(self.closes_counter());
        Ok(c)
    }

    fn closes_counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.metrics.closes_handle()
    }

    /// The metrics, with the pool's idle connections counted now.
    pub fn metrics_snapshot(&self) -> crate::metrics::MetricsSnapshot {
        let mut s = self.metrics.snapshot();
        s.idle = self.idle.lock().len() as u64;
        s
    }

    /// Return a connection that owes no reply. (No process check here: a connection is checked
    /// in by the thread that checked it out, which a forked child does not have; `checkout`
    /// checks every connection it hands out.)
    #[inline(always)]
    pub fn checkin(&self, mut conn: Box<Connection>) {
        if !conn.is_idle_clean() {
            return;
        }
        conn.shrink();
        let mut idle = self.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Close every idle connection (sending `quit`).
    pub fn disconnect_idle(&self) {
        let conns: Vec<Box<Connection>> = std::mem::take(&mut *self.idle.lock());
        for c in conns {
            c.quit();
        }
    }

    /// Close idle connections without a word (their options are stale).
    pub fn drop_idle(&self) {
        self.idle.lock().clear();
    }
}
