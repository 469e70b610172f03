//! The steps every driver shares (the blocking loops, the `noreply` short path and the event
//! loop's selector): which pooled connections are peeked at, checkout with the server's health,
//! a batch launched on its connection, a stale connection replaced, one connection served as
//! its readiness allows, and `finish`: a clean connection back to the pool, a failed one
//! dropped with its keys failed and the server's health noted; and `count_hot`, a plan's keys
//! counted for hot-key telemetry once it is sure to run. Never waits on a socket.
//!
//! Uses `server::Server` (checkout, checkin, health), `connection`, the in-flight batches and
//! the sinks.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::event::PollFlags;

use super::MAX_UNSYNCED;
use crate::client::batch::ServerBatch;
use crate::client::inflight::InFlight;
use crate::client::op::Args;
use crate::client::probe::probe_meta;
use crate::client::sink::Sink;
use crate::client::snapshot::Snapshot;
use crate::client::stall::Check;
use crate::client::{Client, EventKind};
use crate::clock::Tick;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::server::health::FailureContext;
use crate::server::{Peek, Server};

impl Client {
    /// When a pooled connection for `batch` is peeked at before anything is sent (see
    /// `Server::checkout`).
    pub(in crate::client) fn peek_for(batch: &ServerBatch, replay_safe: bool) -> Peek {
        if replay_safe {
            Peek::Never
        } else if batch.forget {
            Peek::BeforeNoreply(Tick::now())
        } else {
            Peek::UnlessAnswered(Tick::now())
        }
    }

    /// `batch` in flight on `conn`, which was checked out for it: a sync goes first if the
    /// connection owes one.
    pub(in crate::client) fn launch<'k>(
        snap: &Snapshot,
        mut batch: ServerBatch<'k>,
        mut conn: Box<Connection>,
        reused: bool,
        replay_safe: bool,
        now: Instant,
    ) -> InFlight<'k> {
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
    /// server). A connection that is not `reused` is new: connecting may have taken a while,
    /// and the caller reads its clock again.
    #[inline(always)]
    pub(in crate::client) fn checkout_for(
        &self,
        snap: &Snapshot,
        s: usize,
        peek: Peek,
    ) -> Result<(Box<Connection>, bool)> {
        let Some(server) = snap.topo.servers.get(s) else {
            return Err(Error::NoServers);
        };
        Self::healthy(server)?;
        match server.checkout(&snap.opts, peek) {
            Ok(c) => Ok(c),
            Err(e) => {
                server.metrics.error(&e);
                self.server_failed(snap, s, &e, FailureContext::default());
                Err(e)
            }
        }
    }

    /// `ServerDown`/`ServerDead` at once (counted) while the server is in its retry window or
    /// ejected.
    pub(in crate::client) fn healthy(server: &Server) -> Result<()> {
        server
            .check_health()
            .inspect_err(|e| Self::count_skip(server, e))
    }

    /// Count a call that skipped `server` (in its retry window or ejected) with `e`.
    pub(in crate::client) fn count_skip(server: &Server, e: &Error) {
        let m = &server.metrics;
        m.counted.down_skips.fetch_add(1, Ordering::Relaxed);
        m.error(e);
    }

    /// A clean exchange with `server`: clear its failure record, and note that it is up again
    /// if it had failed.
    pub(in crate::client) fn answered_again(&self, server: &Server) {
        if server.record_success() {
            self.note_event(EventKind::Up, &server.address, None);
        }
    }

    /// Replace a stale pooled connection that failed before any reply byte with a new one and
    /// start the batch over. Returns false if that is not safe or the reconnect failed: a write
    /// that reached the server may have been applied, so it is replayed only if nothing was sent.
    pub(in crate::client) fn retry_fresh(
        &self,
        snap: &Snapshot,
        a: &mut InFlight,
        e: &Error,
    ) -> bool {
        if !(a.reused
            && !a.conn.received_since_begin()
            && a.replies.req == 0
            && (a.replay_safe || a.sent() == 0)
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

    /// The no-progress timeout that applies to a batch now: the write timeout while it writes.
    pub(in crate::client) fn limit(snap: &Snapshot, a: &InFlight) -> Duration {
        if a.writing() {
            snap.opts.write_timeout
        } else {
            snap.opts.read_timeout
        }
    }

    /// Write and read what `events` allow; true if anything moved.
    pub(in crate::client) fn serve(
        a: &mut InFlight,
        events: PollFlags,
        sink: &mut dyn Sink,
    ) -> Result<bool> {
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
    pub(in crate::client) fn finish(&self, snap: &Snapshot, mut a: InFlight, sink: &mut dyn Sink) {
        let Some(server) = snap.topo.servers.get(a.batch.server) else {
            let e = a.failed.take().unwrap_or(Error::NoServers);
            a.fail_rest(sink, &e);
            return;
        };
        let m = &server.metrics;
        let read = a.conn.read_total().saturating_sub(a.read_before);
        let b = &a.batch;
        let timed = (!b.forget).then(|| crate::clock::nanos(a.started.elapsed()));
        m.batch(b.family, b.keys.len(), timed, a.request_bytes(), read);
        if let Some(e) = &a.failed {
            m.error(e);
        }
        match a.failed.take() {
            None if a.conn.is_idle_clean() => {
                if a.batch.forget {
                    sink.assume_ok(&a.batch.keys);
                    a.conn.sent_noreply(a.batch.keys.len() as u32, Tick::now());
                } else {
                    // The server's answer was read whole by now.
                    a.conn.answered((!a.replies.error_reply).then(Tick::now));
                }
                if matches!(a.check, Check::Replayed(_)) {
                    // A read that stalled was answered on a fresh connection.
                    m.counted.transient.fetch_add(1, Ordering::Relaxed);
                }
                self.answered_again(server);
                let conn = if a.batch.probe_after {
                    probe_meta(server, a.conn)
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
                let ctx = FailureContext {
                    answered_elsewhere: a.check.server_answered(),
                    after_error_reply: a.replies.error_reply,
                    keyless_admin: a.batch.only_flush(),
                };
                self.server_failed(snap, a.batch.server, &e, ctx);
            }
        }
        sink.tally(&a.batch.keys, m);
    }
}

/// Count the keys of `batches`, about to run, in their servers' hot-key summaries where that
/// is on, one key in `hot_keys_sample` (`metrics::hot`). Not in `plan`: a plan begun on an event
/// loop may give way to the blocking driver's, and a key must be counted once.
#[inline(always)]
pub(super) fn count_hot<'b, 'k: 'b>(
    snap: &Snapshot,
    batches: impl IntoIterator<Item = &'b ServerBatch<'k>>,
    args: Args<'_, '_>,
) {
    if snap.behaviors.hot.on() {
        count_sampled(snap, batches, args);
    }
}

/// `count_hot` when it is on: a call none of whose keys is sampled costs one draw (a
/// decrement).
#[inline(never)]
fn count_sampled<'b, 'k: 'b>(
    snap: &Snapshot,
    batches: impl IntoIterator<Item = &'b ServerBatch<'k>>,
    args: Args<'_, '_>,
) {
    let one_in = snap.behaviors.hot.one_in;
    if let Some(first) = crate::random::first_of(one_in, args.count()) {
        count_picks(snap, batches, args, first);
    }
}

/// Count the sampled keys, the first at place `first` in the batches' order (the draws for the
/// places after it are made as the walk reaches them).
#[cold]
fn count_picks<'b, 'k: 'b>(
    snap: &Snapshot,
    batches: impl IntoIterator<Item = &'b ServerBatch<'k>>,
    args: Args<'_, '_>,
    first: usize,
) {
    let hot = snap.behaviors.hot;
    let total = args.count();
    let (mut next, mut place) = (Some(first), 0);
    for b in batches {
        let server = snap.topo.servers.get(b.server);
        for &i in &b.keys {
            if next == Some(place) {
                if let (Some(server), Some(key)) = (server, args.key(i as usize)) {
                    hot.count(&server.metrics.hot, key);
                }
                let after = place + 1;
                next = crate::random::first_of(hot.one_in, total.saturating_sub(after))
                    .map(|skip| after + skip);
            }
            place += 1;
        }
        if next.is_none() {
            return;
        }
    }
}
