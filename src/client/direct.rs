//! Operations driven by an event loop instead of a blocking wait (the asyncio client's lone
//! requests). `Client::begin` plans like the blocking operation, checks out idle pooled
//! connections (it never connects) and writes what the sockets take without waiting; the loop
//! hands `Begun::advance` what its selector reports for each connection, and `Client::end`
//! finishes the batches once every one is done. Whatever would make the blocking driver wait (a
//! connection to open again, a stall to check, a timeout to apply, a read-back to settle a
//! quiet write) is left to `Client::complete`, called on another thread, which drives the same
//! batches with the blocking driver. The exchange is the blocking client's either way, and so is
//! every rule about timeouts, failures and stream safety.
//!
//! Uses `ops` (plans, sinks, settling), `driver` (health, checkout, serve, finish) and
//! `inflight`. Never waits.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};

use super::check;
use super::inflight::InFlight;
use super::ops::{
    arith_value, deleted, fetch_arena, plan_arith, plan_delete, plan_fetch, plan_store, plan_touch,
    store_status, touched,
};
use super::plan::Plan;
use super::sink::{GetSink, LineSink, Sink};
use super::snapshot::Snapshot;
use super::Keys;
use super::{Client, Fetched, Outcome, StoreStatus};
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::protocol::{Reply, StoreCmd, StoreItem};

/// An operation the event loop may drive: those that wait for their replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectOp {
    Fetch { cas: bool },
    Store { cmd: StoreCmd },
    Delete,
    Arith { incr: bool, delta: u64 },
    Touch { exptime: u32 },
}

type LineMap<T> = fn(Reply<'_>) -> Result<T>;

enum OpSink {
    Get(GetSink<Keys>),
    Store(LineSink<StoreStatus, LineMap<StoreStatus>>),
    Found(LineSink<bool, LineMap<bool>>),
    Numbers(LineSink<Option<u64>, LineMap<Option<u64>>>),
}

impl OpSink {
    fn as_dyn(&mut self) -> &mut dyn Sink {
        match self {
            OpSink::Get(s) => s,
            OpSink::Store(s) => s,
            OpSink::Found(s) => s,
            OpSink::Numbers(s) => s,
        }
    }

    /// Whether settling needs a read-back (a quiet segment failed without naming its key).
    fn ambiguous(&self) -> bool {
        match self {
            OpSink::Store(s) => !s.ambiguous.is_empty(),
            OpSink::Found(s) => !s.ambiguous.is_empty(),
            OpSink::Get(_) | OpSink::Numbers(_) => false,
        }
    }
}

/// What the loop should do next with a `Begun`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Wait for the connections to be ready again.
    Wait,
    /// Every batch is done: `Client::end`.
    Ready,
    /// Something needs the blocking driver: `Client::complete`, on another thread.
    HandOff,
}

/// An operation begun on the loop's thread: its batches in flight on their connections.
pub struct Begun {
    op: DirectOp,
    snap: Arc<Snapshot>,
    flights: Vec<InFlight>,
    sink: OpSink,
    /// Errors met on the loop's thread, left for `complete` to handle as the driver would (a
    /// stale pooled connection may be replaced and the batch replayed).
    deferred: Vec<(usize, Error)>,
}

impl Begun {
    /// The connections to watch, with whether each also waits to write.
    pub fn interest(&self) -> impl Iterator<Item = (BorrowedFd<'_>, bool)> + '_ {
        self.flights
            .iter()
            .filter(|a| !a.done())
            .map(|a| (a.conn.fd(), a.writing()))
    }

    /// The connection whose descriptor is `fd`, done or not.
    pub fn connection(&self, fd: RawFd) -> Option<BorrowedFd<'_>> {
        self.flights
            .iter()
            .map(|a| a.conn.fd())
            .find(|f| f.as_raw_fd() == fd)
    }

    /// `interest` as `poll` takes it.
    pub fn poll_fds(&self) -> Vec<PollFd<'_>> {
        self.flights
            .iter()
            .filter(|a| !a.done())
            .map(InFlight::poll_fd)
            .collect()
    }

    /// Serve the connection on `fd` as the selector reported it (`events`, as `poll` reports
    /// them: an error or a hang-up counts as broken); `None` if no batch waits on `fd`.
    pub fn advance(&mut self, fd: RawFd, events: PollFlags) -> Option<Step> {
        let i = self
            .flights
            .iter()
            .position(|a| !a.done() && a.conn.fd().as_raw_fd() == fd)?;
        let a = &mut self.flights[i];
        match Client::serve(a, events, self.sink.as_dyn()) {
            Ok(true) => a.last_progress = Instant::now(),
            Ok(false) => {}
            Err(e) => self.deferred.push((i, e)),
        }
        Some(self.step())
    }

    pub fn step(&self) -> Step {
        if !self.deferred.is_empty() {
            Step::HandOff
        } else if self.flights.iter().all(InFlight::done) {
            Step::Ready
        } else {
            Step::Wait
        }
    }

    /// When the loop must hand the operation off if it is not done by then: at the first
    /// point where the blocking driver would check a stall or time a batch out.
    pub fn hand_off_at(&self) -> Option<Instant> {
        let checks = self.snap.policy.check_stalls;
        self.flights
            .iter()
            .filter(|a| !a.done())
            .map(|a| {
                let limit = Client::limit(&self.snap, a);
                let wait = if checks {
                    check::check_after(limit)
                } else {
                    limit
                };
                a.last_progress + wait
            })
            .min()
    }
}

impl Client {
    /// Begin `op` on `keys` (`items` for a store) without waiting; `None` when it cannot be
    /// (TLS, or a server without an idle pooled connection): nothing was sent, and the caller
    /// runs the blocking operation instead.
    pub fn begin(&self, op: DirectOp, keys: &[&[u8]], items: &[StoreItem<'_>]) -> Option<Begun> {
        let snap = self.snapshot();
        if snap.opts.security.tls.is_some() {
            return None;
        }
        // The `noreply` behavior makes every write `noreply`: the workers send those.
        let write = !matches!(op, DirectOp::Fetch { .. } | DirectOp::Arith { .. });
        if write && snap.behaviors.noreply {
            return None;
        }
        let (plan, mut sink, family, replay_safe): (Plan<'_>, OpSink, Family, bool) = match op {
            DirectOp::Fetch { cas } => {
                let p = plan_fetch(&snap, keys, cas, None);
                let wire = Keys::of(&p.wire_keys);
                let sink = GetSink::new(wire, fetch_arena(keys.len()));
                (p, OpSink::Get(sink), Family::Get, true)
            }
            DirectOp::Store { cmd } => {
                let p = plan_store(&snap, cmd, items, false);
                let map: LineMap<StoreStatus> = store_status;
                let sink = LineSink::new(items.len(), map, Some(StoreStatus::Stored));
                (p, OpSink::Store(sink), Family::Store, false)
            }
            DirectOp::Delete => {
                let p = plan_delete(&snap, keys, false);
                let map: LineMap<bool> = deleted;
                let sink = LineSink::new(keys.len(), map, Some(true));
                (p, OpSink::Found(sink), Family::Delete, false)
            }
            DirectOp::Arith { incr, delta } => {
                let p = plan_arith(&snap, incr, keys, delta);
                let map: LineMap<Option<u64>> = arith_value;
                let sink = LineSink::new(keys.len(), map, None);
                (p, OpSink::Numbers(sink), Family::Arith, false)
            }
            DirectOp::Touch { exptime } => {
                let p = plan_touch(&snap, keys, exptime, false);
                let map: LineMap<bool> = touched;
                let sink = LineSink::new(keys.len(), map, Some(true));
                (p, OpSink::Found(sink), Family::Touch, false)
            }
        };
        // Every connection first: should one server have none idle, the others' go back
        // untouched and the blocking operation runs instead.
        let now = Instant::now();
        let mut taken = Vec::with_capacity(plan.batches.len());
        let mut down = Vec::new();
        for batch in plan.batches {
            let Some(server) = snap.topo.servers.get(batch.server) else {
                down.push((batch, Error::NoServers));
                continue;
            };
            // Counted once the call is begun here: if it goes to the blocking driver
            // instead, that skip is counted there.
            if let Err(e) = server.check_health(now) {
                down.push((batch, e));
                continue;
            }
            match server.checkout_idle(Self::probe_for(&batch, replay_safe, now)) {
                Some(conn) => taken.push((batch, conn)),
                None => {
                    for (b, conn) in taken {
                        if let Some(s) = snap.topo.servers.get(b.server) {
                            s.checkin(conn);
                        }
                    }
                    return None;
                }
            }
        }
        for (i, e) in plan.rejected {
            sink.as_dyn().reject(i, e);
        }
        for (batch, e) in down {
            if let Some(server) = snap.topo.servers.get(batch.server) {
                Self::count_skip(server, &e);
            }
            sink.as_dyn().fail(&batch.keys, &e);
        }
        let mut flights: Vec<InFlight> = taken
            .into_iter()
            .map(|(mut batch, conn)| {
                batch.family = family;
                Self::launch(&snap, batch, conn, true, replay_safe, now)
            })
            .collect();
        let mut deferred = Vec::new();
        for (i, a) in flights.iter_mut().enumerate() {
            if let Err(e) = a
                .write_some()
                .and_then(|_| a.parse_available(sink.as_dyn()))
            {
                deferred.push((i, e));
            }
        }
        Some(Begun {
            op,
            snap,
            flights,
            sink,
            deferred,
        })
    }

    /// The outcome of an operation whose batches are all done, without waiting; `Err` gives it
    /// back when settling it needs I/O (a meta probe after the batch, or a read-back): then
    /// `complete` it on another thread.
    pub fn end(&self, mut b: Begun) -> std::result::Result<Outcome, Box<Begun>> {
        if b.step() != Step::Ready || b.flights.iter().any(|a| a.batch.probe_after) {
            return Err(Box::new(b));
        }
        for a in std::mem::take(&mut b.flights) {
            self.finish(&b.snap, a, b.sink.as_dyn());
        }
        if b.sink.ambiguous() {
            return Err(Box::new(b));
        }
        Ok(self.conclude(b, &[], &[]))
    }

    /// Drive what is left of `b` with the blocking driver and settle it: the blocking
    /// operation's outcome, as if it had run from the start on this thread. `keys` and `items`
    /// are the operation's, for a read-back.
    pub fn complete(&self, mut b: Begun, keys: &[&[u8]], items: &[StoreItem<'_>]) -> Outcome {
        for (i, e) in std::mem::take(&mut b.deferred) {
            let a = &mut b.flights[i];
            if !self.retry_fresh(&b.snap, a, &e) {
                a.failed = Some(e);
            }
        }
        self.drive_many(&b.snap, &mut b.flights, b.sink.as_dyn());
        for a in std::mem::take(&mut b.flights) {
            self.finish(&b.snap, a, b.sink.as_dyn());
        }
        self.conclude(b, keys, items)
    }

    /// The outcome from a finished operation's sink (a read-back only if it is ambiguous).
    fn conclude(&self, b: Begun, keys: &[&[u8]], items: &[StoreItem<'_>]) -> Outcome {
        match (b.sink, b.op) {
            (OpSink::Get(s), _) => Outcome::Fetched(Fetched {
                items: s.out.finish(),
                data: s.data,
            }),
            (OpSink::Store(s), _) => Outcome::Stored(self.settle_stores(s, items)),
            (OpSink::Found(s), DirectOp::Delete) => Outcome::Found(self.settle_deletes(s, keys)),
            (OpSink::Found(s), _) => Outcome::Found(s.out.finish()),
            (OpSink::Numbers(s), _) => Outcome::Numbers(s.out.finish()),
        }
    }
}
