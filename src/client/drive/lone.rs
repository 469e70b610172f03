//! A lone request of one key that waits for its reply (a loop of `get`, `set`, `delete`,
//! `incr`): the steps of the blocking driver for a batch of one, without a plan, a sink or an
//! in-flight record. The request is encoded into its connection's buffer and sent whole on a
//! pooled connection, and its reply is read whole from the first `recv` by the family's own
//! reader (`op::Lone::answer`): one `send`, one `recv` and little else. Anything else goes on
//! as the general path's batch of one, from where it stands (`Client::ask_rest`): a send the
//! socket did not take whole, a reply that needs another read or that the family leaves to its
//! sink (an error line, anything unexpected), a timeout, a failure. The reader only ever
//! judges a reply it fully understands; whatever it leaves is still unread, so the sink sees
//! every byte the general path would.
//!
//! A family takes this path by implementing `op::Lone`: get, store, delete, incr/decr and
//! touch do; nothing here names a family. Uses the shared `steps` (checkout with health, the
//! server's record, `finish`) and the blocking driver for what is left.

use std::borrow::Cow;
use std::sync::Arc;

use crate::client::batch::ServerBatch;
use crate::client::inflight::InFlight;
use crate::client::op::lone::Lone;
use crate::client::op::Args;
use crate::client::sink::Sink;
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::clock::Tick;
use crate::connection::Connection;
use crate::error::Error;
use crate::server::Peek;

/// A lone request sent whole: where it stands when its reply is read.
struct Asked<'w> {
    s: usize,
    wire: Cow<'w, [u8]>,
    conn: Box<Connection>,
    reused: bool,
    wbuf: Vec<u8>,
    started: Tick,
    read_before: u64,
}

/// Where the general path takes a lone request up (`Client::ask_rest`).
enum Then {
    /// Write what is left and read on, as `drive_one` does.
    Drive,
    /// The blocking read gave up (its wait ran out, or a signal came): the poll loop decides.
    Poll,
    /// The exchange failed (a fresh connection may still replay it).
    Failed(Error),
}

/// What a lone call came to: its one key's outcome from the short exchange, or the call's
/// outcome from the general path that took it over.
enum Answer<O: Lone> {
    One(O::One),
    Whole(O::Output),
}

impl Client {
    /// The blocking call of a family that is `Lone`: the short exchange when it applies, the
    /// general path (`perform`) otherwise.
    pub(in crate::client) fn call_lone<O: Lone>(&self, op: &O, args: Args<'_, '_>) -> O::Output {
        let snap = self.snapshot();
        self.ask_or_perform(&snap, op, args)
    }

    /// `call_lone` on `snap`.
    pub(in crate::client) fn ask_or_perform<O: Lone>(
        &self,
        snap: &Arc<Snapshot>,
        op: &O,
        args: Args<'_, '_>,
    ) -> O::Output {
        match self.lone_ask(snap, op, args) {
            Some(Answer::One(one)) => O::output(one),
            Some(Answer::Whole(out)) => out,
            None => self.perform(snap, op, args),
        }
    }

    /// `call_lone_one` on `snap`.
    pub(in crate::client) fn ask_or_perform_one<O: Lone>(
        &self,
        snap: &Arc<Snapshot>,
        op: &O,
        args: Args<'_, '_>,
    ) -> Option<O::One> {
        match self.lone_ask(snap, op, args) {
            Some(Answer::One(one)) => Some(one),
            Some(Answer::Whole(out)) => O::first(out),
            None => O::first(self.perform(snap, op, args)),
        }
    }

    /// The short exchange, if the call is a lone request it can carry.
    fn lone_ask<O: Lone>(&self, snap: &Snapshot, op: &O, args: Args<'_, '_>) -> Option<Answer<O>> {
        let key = op.lone_key(snap, args)?;
        self.ask(snap, op, key, args)
    }

    /// One key's request and its reply, as described at the top: `None` when the case is not
    /// this simple (binary, TLS, an invalid key, a connection that owes a sync), before
    /// anything was sent; the general path then takes the call.
    fn ask<O: Lone>(
        &self,
        snap: &Snapshot,
        op: &O,
        key: &[u8],
        args: Args<'_, '_>,
    ) -> Option<Answer<O>> {
        if snap.behaviors.binary || snap.opts.security.tls.is_some() {
            return None;
        }
        let wire = snap.wire_key(key, op.verifies_keys(snap)).ok()?;
        let s = match snap.topo.servers.len() {
            1 => 0,
            _ => snap.route(key, &wire),
        };
        let server = snap.topo.servers.get(s)?;
        let mut now = Tick::now();
        let peek = if op.replay_safe() {
            Peek::Never
        } else {
            Peek::UnlessAnswered(now)
        };
        let (mut conn, reused) = match self.checkout_for(snap, s, peek) {
            Ok(c) => c,
            Err(e) => return Some(Answer::Whole(self.ask_failed(snap, op, &wire, args, &e))),
        };
        if !reused {
            // Connecting may have taken a while: the exchange starts now.
            now = Tick::now();
        }
        if conn.unsynced() > 0 {
            // It owes a sync first: the general path's batch sends one.
            server.checkin(conn);
            return None;
        }
        let mut wbuf = conn.take_request_buf(wire.len() + op.request_size(args));
        op.encode_lone(snap, args, &mut wbuf, &wire, false);
        conn.begin_request();
        let hot = snap.behaviors.hot;
        if hot.on() && hot.sampled() {
            hot.count(&server.metrics.hot, key);
        }
        let read_before = conn.read_total();
        let sent = conn.send_nonblocking(&wbuf);
        let mut asked = Asked {
            s,
            wire,
            conn,
            reused,
            wbuf,
            started: now,
            read_before,
        };
        let (written, then) = match sent {
            Ok(n) if n == asked.wbuf.len() => match Self::read_answer(snap, op, &mut asked) {
                Ok(one) => {
                    self.answered(snap, op, asked, &one);
                    return Some(Answer::One(one));
                }
                Err(then) => (n, then),
            },
            Ok(n) => (n, Then::Drive),
            Err(e) => (0, Then::Failed(e)),
        };
        Some(Answer::Whole(
            self.ask_rest(snap, op, args, asked, written, then),
        ))
    }

    /// The outcome of a request sent whole, from one blocking read, if the family's reader
    /// takes the reply (see the top); otherwise where the general path goes on.
    fn read_answer<O: Lone>(
        snap: &Snapshot,
        op: &O,
        a: &mut Asked<'_>,
    ) -> std::result::Result<O::One, Then> {
        match a.conn.recv_blocking() {
            Ok(0) | Err(Error::Timeout) => Err(Then::Poll),
            Ok(_) => {
                let unread = a.conn.unread();
                match op.answer(unread, &a.wire, snap.behaviors.max_value_size) {
                    // Only a reply that is all of what arrived: a byte more was never asked
                    // for, and the general path's sink says so.
                    Some((out, used)) if used == unread.len() => {
                        a.conn.consume(used);
                        Ok(out)
                    }
                    _ => Err(Then::Drive),
                }
            }
            Err(e) => Err(Then::Failed(e)),
        }
    }

    /// A reply read whole: the accounting `finish` does for a clean batch, and the connection
    /// back to the pool.
    fn answered<O: Lone>(&self, snap: &Snapshot, op: &O, a: Asked<'_>, one: &O::One) {
        let Asked {
            s,
            mut conn,
            wbuf,
            started,
            read_before,
            ..
        } = a;
        let Some(server) = snap.topo.servers.get(s) else {
            return;
        };
        let m = &server.metrics;
        let read = conn.read_total().saturating_sub(read_before);
        let now = Tick::now();
        m.batch(
            op.family(),
            1,
            Some(now.nanos_since(started)),
            wbuf.len(),
            read,
        );
        O::tally_lone(one, m);
        conn.answered(Some(now));
        self.answered_again(server);
        conn.keep_request_buf(wbuf);
        server.checkin(conn);
    }

    /// The general path's batch of one from where the lone exchange stands: `sent` bytes of
    /// the request written, whatever arrived still unread on the connection.
    fn ask_rest<O: Lone>(
        &self,
        snap: &Snapshot,
        op: &O,
        args: Args<'_, '_>,
        asked: Asked<'_>,
        sent: usize,
        then: Then,
    ) -> O::Output {
        let Asked {
            s,
            wire,
            conn,
            reused,
            wbuf,
            started,
            read_before,
        } = asked;
        let mut batch = ServerBatch::new(s);
        batch.wbuf = wbuf;
        batch.family = op.family();
        batch.push_req(O::KIND, 0);
        let mut a = InFlight::new(
            batch,
            conn,
            false,
            reused,
            op.replay_safe(),
            started.instant(),
        );
        a.wpos = sent;
        a.read_before = read_before;
        a.replies.max_value = snap.behaviors.max_value_size;
        let wires = [wire];
        let mut sink = op.sink(snap, &wires[..], args);
        match then {
            Then::Drive => self.drive_one(snap, &mut a, &mut sink),
            Then::Poll => self.drive_many(snap, std::slice::from_mut(&mut a), &mut sink),
            Then::Failed(e) => {
                if self.retry_fresh(snap, &mut a, &e) {
                    self.drive_one(snap, &mut a, &mut sink);
                } else {
                    a.failed = Some(e);
                }
            }
        }
        self.finish(snap, a, &mut sink);
        op.settle(self, snap, sink, args)
    }

    /// The outcome of a lone call whose server could not be had (in its retry window, or the
    /// connect failed: already counted against it), settled as the general path settles it.
    fn ask_failed<O: Lone>(
        &self,
        snap: &Snapshot,
        op: &O,
        wire: &[u8],
        args: Args<'_, '_>,
        e: &Error,
    ) -> O::Output {
        let wires = [Cow::Borrowed(wire)];
        let mut sink = op.sink(snap, &wires[..], args);
        sink.fail(&[0], e);
        op.settle(self, snap, sink, args)
    }
}
