//! A lone `noreply` write (a loop of `set(..., noreply=True)`): the steps of the blocking
//! driver for a batch of one, up to its first `send`, without a plan, a sink or an in-flight
//! record, so that the call is one `send` and little else. What the socket does not take whole
//! is finished by the blocking driver. A family takes this path by implementing
//! `op::Forgets` (its key, what it reports; its text request is its `op::Lone` one, unanswered):
//! store, delete and touch do; nothing here names a family.
//!
//! Uses the shared `steps` and the blocking driver (`drive_one`) for what is left.

use std::sync::Arc;

use super::MAX_UNSYNCED;
use crate::clock::Tick;

use crate::client::batch::ServerBatch;
use crate::client::inflight::InFlight;
use crate::client::op::lone::Forgets;
use crate::client::op::Args;
use crate::client::sink::{unexpected, LineSink, Tally};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::Result;
use crate::protocol::Reply;
use crate::server::Peek;

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
    a: InFlight<'static>,
    ok: T,
}

impl Client {
    /// The blocking call of a family that `Forgets`: a lone `noreply` write by `forget_start`
    /// when it applies, else a lone request that waits for its reply (`drive::lone`), else the
    /// general path (`perform`).
    pub(in crate::client) fn call_forgetting<O: Forgets>(
        &self,
        op: &O,
        args: Args<'_, '_>,
    ) -> O::Output {
        let snap = self.snapshot();
        if let Some(r) = self.forget_call(&snap, op, args) {
            return vec![r];
        }
        self.ask_or_perform(&snap, op, args)
    }

    /// `call_forgetting` of a single key: its outcome alone.
    pub(in crate::client) fn call_forgetting_one<O: Forgets>(
        &self,
        op: &O,
        args: Args<'_, '_>,
    ) -> Option<Result<O::Ok>> {
        let snap = self.snapshot();
        if let Some(r) = self.forget_call(&snap, op, args) {
            return Some(r);
        }
        self.ask_or_perform_one(&snap, op, args)
    }

    /// The outcome of `op` on `args` as a lone `noreply` write (this may block: connecting,
    /// the rest of a partial send); `None` when that does not apply.
    pub(in crate::client) fn forget_call<O: Forgets>(
        &self,
        snap: &Arc<Snapshot>,
        op: &O,
        args: Args<'_, '_>,
    ) -> Option<Result<O::Ok>> {
        let key = op.lone_noreply(snap, args)?;
        self.forget_end(self.forget_start(snap, op, key, args, true))
    }

    /// A lone `noreply` write of `op` as far as it goes without blocking (see `forget_start`):
    /// sent on an idle connection.
    pub(in crate::client) fn forget_now<O: Forgets>(
        &self,
        op: &O,
        args: Args<'_, '_>,
    ) -> Quick<O::Ok> {
        let Some(snap) = self.snapshot_in_place() else {
            return Quick::Blocking;
        };
        match op.lone_noreply(&snap, args) {
            Some(key) => self.forget_start(&snap, op, key, args, false),
            None => Quick::Blocking,
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
    /// that the call is one `send` and little else. `key` is `args`' one key; the request is
    /// `op`'s (`Forgets`), and so is the outcome it reports once sent (`Forgets::OK`).
    /// `Quick::Blocking` when the case is not this simple (binary, TLS, an invalid key, a
    /// connection that owes a sync, or, with `may_connect` false, no idle connection): nothing
    /// was sent, and the caller takes the general path. A send that the socket does not take
    /// whole, or that fails, is `Quick::Rest`, which `forget_end` goes on with as the general
    /// path's batch would. With `may_connect` false it never blocks, so that the binding may
    /// call it without releasing the interpreter, and release it only for what is left.
    pub(in crate::client) fn forget_start<O: Forgets>(
        &self,
        snap: &Arc<Snapshot>,
        op: &O,
        key: &[u8],
        args: Args<'_, '_>,
        may_connect: bool,
    ) -> Quick<O::Ok> {
        if snap.behaviors.binary || snap.opts.security.tls.is_some() {
            return Quick::Blocking;
        }
        let Ok(wire) = snap.wire_key(key, op.verifies_keys(snap)) else {
            return Quick::Blocking;
        };
        let s = snap.route(key, &wire);
        let Some(server) = snap.topo.servers.get(s) else {
            return Quick::Blocking;
        };
        let mut now = Tick::now();
        let peek = Peek::BeforeNoreply(now);
        let checked_out = if may_connect {
            self.checkout_for(snap, s, peek).map(Some)
        } else {
            Self::healthy(server).map(|()| server.checkout_idle(peek).map(|c| (c, true)))
        };
        let (mut conn, reused) = match checked_out {
            Ok(Some(c)) => c,
            Ok(None) => return Quick::Blocking,
            Err(e) => return Quick::Done(Err(e)),
        };
        if !reused {
            // Connecting may have taken a while.
            now = Tick::now();
        }
        if conn.unsynced() >= MAX_UNSYNCED {
            server.checkin(conn);
            return Quick::Blocking;
        }
        // The buffer of the connection's previous lone request: no allocation per call.
        let mut wbuf = conn.take_request_buf(wire.len() + op.request_size(args));
        op.encode_lone(snap, args, &mut wbuf, &wire, true);
        conn.begin_request();
        // Sent from here on (the rest, if any, by `forget_rest`): counted once.
        let hot = snap.behaviors.hot;
        if hot.on() && hot.sampled() {
            hot.count(&server.metrics.hot, key);
        }
        let sent = conn.send_noreply(&wbuf).unwrap_or(0);
        if sent == wbuf.len() {
            server.metrics.batch(op.family(), 1, None, sent, 0);
            O::OK.tally(&server.metrics);
            conn.sent_noreply(1, now);
            self.answered_again(server);
            conn.keep_request_buf(wbuf);
            server.checkin(conn);
            return Quick::Done(Ok(O::OK));
        }
        // The rest of the write (or its failure, which the general path retries on a new
        // connection when nothing was sent) as a batch of one.
        let mut batch = ServerBatch::new(s);
        batch.wbuf = wbuf;
        batch.keys.push(0);
        batch.family = op.family();
        batch.close_noreply();
        let mut a = InFlight::new(batch, conn, false, reused, false, now.instant());
        a.wpos = sent;
        Quick::Rest(Box::new(Unfinished {
            snap: Arc::clone(snap),
            a,
            ok: O::OK,
        }))
    }

    /// What `forget_start` left: the rest of a write the socket did not take whole (this may
    /// wait for the socket, or reconnect).
    fn forget_rest<T: Clone + Tally>(&self, u: Unfinished<T>) -> Option<Result<T>> {
        let Unfinished { snap, mut a, ok } = u;
        let mut sink = LineSink::new(1, |_: Reply<'_>| Err(unexpected()), Some(ok));
        self.drive_one(&snap, &mut a, &mut sink);
        self.finish(&snap, a, &mut sink);
        sink.out.finish().pop()
    }
}
