//! Operations driven by an event loop's selector instead of a blocking wait (the asyncio
//! client's lone requests). `Client::begin` plans the operation as the blocking call does, checks
//! out idle pooled connections (it never connects) and writes what the sockets take without
//! waiting; the loop hands `Begun::advance` what its selector reports for each connection, and
//! `Client::end` finishes the batches once every one is done. Whatever would make the blocking
//! driver wait (a connection to open again, a stall to check, a timeout to apply, a read-back to
//! settle a quiet write) is left to `Client::complete`, called on another thread, which drives
//! the same batches with the blocking driver. The exchange is the blocking client's either way,
//! and so is every rule about timeouts, failures and stream safety.
//!
//! Uses `op` (the operation's plan, sink and settling), the shared `steps` and `inflight`.
//! Never waits.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};

use super::steps::count_hot;
use crate::client::inflight::InFlight;
use crate::client::keys::Keys;
use crate::client::op::{Args, Op, Operation, Outcome, Pending, Visit};
use crate::client::snapshot::Snapshot;
use crate::client::stall;
use crate::client::Client;
use crate::error::Error;

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
    snap: Arc<Snapshot>,
    flights: Vec<InFlight<'static>>,
    /// The operation and the sink its replies go to.
    pending: Pending,
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
        match Client::serve(a, events, self.pending.sink()) {
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
                    stall::check_after(limit)
                } else {
                    limit
                };
                a.last_progress + wait
            })
            .min()
    }
}

/// `Client::begin` for the family of the operation visited.
struct BeginOn<'c, 'a, 'k> {
    client: &'c Client,
    args: Args<'a, 'k>,
}

impl Visit for BeginOn<'_, '_, '_> {
    type Out = Option<Begun>;
    fn visit<O: Operation>(self, op: &O, pending: fn(O, O::Sink<Keys>) -> Pending) -> Self::Out {
        let args = self.args;
        self.client
            .begin_with(op, args, |sink| pending(op.clone(), sink))
    }
}

impl Client {
    /// Begin `op` on `args` without waiting; `None` when it cannot be (an operation the loop
    /// does not drive, TLS, or a server without an idle pooled connection): nothing was sent,
    /// and the caller runs the blocking operation instead.
    pub fn begin(&self, op: &Op, args: Args<'_, '_>) -> Option<Begun> {
        op.visit(BeginOn { client: self, args })
    }

    /// `begin` for one operation family; `pending` pairs the operation with its sink.
    pub(in crate::client) fn begin_with<O: Operation>(
        &self,
        op: &O,
        args: Args<'_, '_>,
        pending: impl FnOnce(O::Sink<Keys>) -> Pending,
    ) -> Option<Begun> {
        let snap = self.snapshot();
        if snap.opts.security.tls.is_some() || !op.on_loop(&snap) {
            return None;
        }
        let plan = op.plan(&snap, args);
        let replay_safe = op.replay_safe();
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
            if let Err(e) = server.check_health() {
                down.push((batch, e));
                continue;
            }
            match server.checkout_idle(Self::peek_for(&batch, replay_safe)) {
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
        let down_batches = down.iter().map(|(b, _)| b);
        count_hot(
            &snap,
            taken.iter().map(|(b, _)| b).chain(down_batches),
            args,
        );
        // (Only a fetch matches hits against its wire keys; the others keep none.)
        let wire = if plan.wire_keys.is_empty() {
            Keys::default()
        } else {
            Keys::of(&plan.wire_keys)
        };
        let mut pending = pending(op.sink(&snap, wire, args));
        let sink = pending.sink();
        for (i, e) in plan.rejected {
            sink.reject(i, e);
        }
        for (batch, e) in down {
            if let Some(server) = snap.topo.servers.get(batch.server) {
                Self::count_skip(server, &e);
            }
            sink.fail(&batch.keys, &e);
        }
        let family = op.family();
        let mut flights: Vec<InFlight> = taken
            .into_iter()
            .map(|(batch, conn)| {
                // The operation outlives the caller's arguments here: values are copied in.
                let mut batch = batch.into_owned();
                batch.family = family;
                Self::launch(&snap, batch, conn, true, replay_safe, now)
            })
            .collect();
        let mut deferred = Vec::new();
        for (i, a) in flights.iter_mut().enumerate() {
            if let Err(e) = a.write_some().and_then(|_| a.parse_available(sink)) {
                deferred.push((i, e));
            }
        }
        Some(Begun {
            snap,
            flights,
            pending,
            deferred,
        })
    }

    /// The outcome of an operation whose batches are all done, without waiting; `Err` gives it
    /// back when settling it needs I/O (a meta probe after the batch, a read-back, reads from
    /// replicas): then `complete` it on another thread.
    pub fn end(&self, mut b: Begun) -> std::result::Result<Outcome, Box<Begun>> {
        if b.step() != Step::Ready || b.flights.iter().any(|a| a.batch.probe_after) {
            return Err(Box::new(b));
        }
        for a in std::mem::take(&mut b.flights) {
            self.finish(&b.snap, a, b.pending.sink());
        }
        if b.pending.settles_with_io(&b.snap) {
            return Err(Box::new(b));
        }
        Ok(b.pending.settle(self, &b.snap, Args::default()))
    }

    /// Drive what is left of `b` with the blocking driver and settle it: the blocking
    /// operation's outcome, as if it had run from the start on this thread. `args` are the
    /// operation's, for a read-back.
    pub fn complete(&self, mut b: Begun, args: Args<'_, '_>) -> Outcome {
        for (i, e) in std::mem::take(&mut b.deferred) {
            let a = &mut b.flights[i];
            if !self.retry_fresh(&b.snap, a, &e) {
                a.failed = Some(e);
            }
        }
        self.drive_many(&b.snap, &mut b.flights, b.pending.sink());
        for a in std::mem::take(&mut b.flights) {
            self.finish(&b.snap, a, b.pending.sink());
        }
        b.pending.settle(self, &b.snap, args)
    }
}
