//! `touch`, pipelined: `true` if touched, `false` if not found. The binary protocol has no quiet
//! touch (every touch answers); a lone `noreply` touch takes the shorter path of
//! `drive::noreply`. Keys are checked by the protocol's rules only: libmemcached's touch does
//! not apply `verify_keys` (pylibmc sends such a key).
//!
//! Uses the plan and `LineSink`; `protocol` encoders.

use super::lone::{line_answer, lone_per_key, Forgets, Lone};
use super::{Access, Args, Operation, REQUEST_BYTES};
use crate::client::plan::{plan_checked, KeyCheck, Plan};
use crate::client::sink::{unexpected, LineMap, LineSink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::Result;
use crate::metrics::Family;
use crate::protocol::{binary, text, Reply, ReplyKind};

/// A touch to `exptime`; `noreply` as the caller asked (the behavior adds to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch {
    pub exptime: u32,
    pub noreply: bool,
}

/// A touch's reply line: found or not.
#[derive(Clone, Copy)]
pub(in crate::client) struct Touched;

impl LineMap<bool> for Touched {
    fn map(&mut self, r: Reply<'_>) -> Result<bool> {
        match r {
            Reply::Touched => Ok(true),
            Reply::NotFound => Ok(false),
            _ => Err(unexpected()),
        }
    }
}

impl Touch {
    /// `noreply` as it applies: never in binary.
    fn noreply(&self, snap: &Snapshot) -> bool {
        (self.noreply || snap.behaviors.noreply) && !snap.behaviors.binary
    }
}

impl Operation for Touch {
    type Sink<W: WireKeys> = LineSink<bool, Touched>;
    type Output = Vec<Result<bool>>;

    fn family(&self) -> Family {
        Family::Touch
    }
    /// It sets an expiry, as a gat to the same one does.
    fn access(&self) -> Access {
        Access::expiry(self.exptime)
    }
    /// A `noreply` write goes to the workers, which send it without a round trip.
    fn on_loop(&self, snap: &Snapshot) -> bool {
        !self.noreply && !snap.behaviors.noreply
    }

    fn plan<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Plan<'k> {
        let (exptime, noreply) = (self.exptime, self.noreply(snap));
        let bin = snap.behaviors.binary;
        let n = snap.topo.servers.len();
        let check = KeyCheck::Protocol;
        let keys = args.keys;
        let jitter = snap.behaviors.jitter;
        let mut p = plan_checked(snap, n, keys, check, false, REQUEST_BYTES, |b, i, w| {
            let exptime = jitter.apply(exptime, w);
            if bin {
                let opaque = b.next_opaque();
                binary::encode_touch(&mut b.wbuf, w, exptime, opaque);
            } else {
                text::encode_touch(&mut b.wbuf, w, exptime, noreply);
            }
            if noreply {
                b.keys.push(i);
            } else {
                b.push_req(ReplyKind::Touch, i);
            }
        });
        if noreply {
            for batch in &mut p.batches {
                batch.close_noreply();
            }
        }
        p
    }

    fn sink<W: WireKeys>(&self, _: &Snapshot, _: W, args: Args<'_, '_>) -> Self::Sink<W> {
        LineSink::new(args.keys.len(), Touched, Some(true))
    }

    fn settle<W: WireKeys>(
        &self,
        _: &Client,
        _: &Snapshot,
        sink: Self::Sink<W>,
        _: Args<'_, '_>,
    ) -> Self::Output {
        sink.out.finish()
    }

    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        client.call_forgetting(self, args)
    }
}

impl Forgets for Touch {
    type Ok = bool;
    const OK: bool = true;

    fn lone_noreply<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.keys {
            [k] if self.noreply(snap) => Some(k),
            _ => None,
        }
    }
}

/// A lone touch that waits for its reply.
impl Lone for Touch {
    const KIND: ReplyKind = ReplyKind::Touch;

    fn lone_key<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.keys {
            [k] if !self.noreply(snap) => Some(k),
            _ => None,
        }
    }
    /// libmemcached's touch does not apply `verify_keys`.
    fn verifies_keys(&self, _: &Snapshot) -> bool {
        false
    }
    fn encode_lone(
        &self,
        snap: &Snapshot,
        _: Args<'_, '_>,
        buf: &mut Vec<u8>,
        w: &[u8],
        noreply: bool,
    ) {
        let exptime = snap.behaviors.jitter.apply(self.exptime, w);
        text::encode_touch(buf, w, exptime, noreply);
    }
    fn answer(&self, buf: &[u8], _: &[u8], _: usize) -> Option<(Self::One, usize)> {
        line_answer(ReplyKind::Touch, Touched, buf)
    }
    lone_per_key!(bool);
}
