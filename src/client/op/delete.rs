//! Deletes, pipelined: `true` if deleted, `false` if not found. Batches are quiet meta deletes
//! where the server has them and more than one key waits for its reply, closed like a store's; a
//! lone `noreply` delete takes the shorter path of `drive::noreply`. A key deleted in an
//! ambiguous quiet range is read back: gone means deleted.
//!
//! Uses the plan and `LineSink`; `protocol` encoders.

use super::lone::{line_answer, lone_per_key, Forgets, Lone};
use super::{read_back, write_closing, writes_stream, Args, Operation, REQUEST_BYTES};
use crate::client::plan::{close_batches, plan, Plan, WriteMode, WriteModes};
use crate::client::replicas;
use crate::client::sink::{unexpected, LineMap, LineSink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::Result;
use crate::metrics::Family;
use crate::protocol::{binary, meta, text, Reply, ReplyKind};

/// A delete; `noreply` as the caller asked (the behavior adds to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delete {
    pub noreply: bool,
}

/// A delete's reply line: found or not.
#[derive(Clone, Copy)]
pub(in crate::client) struct Deleted;

impl LineMap<bool> for Deleted {
    fn map(&mut self, r: Reply<'_>) -> Result<bool> {
        match r {
            Reply::Deleted => Ok(true),
            Reply::NotFound => Ok(false),
            _ => Err(unexpected()),
        }
    }
}

impl Operation for Delete {
    type Sink<W: WireKeys> = LineSink<bool, Deleted>;
    type Output = Vec<Result<bool>>;

    fn family(&self) -> Family {
        Family::Delete
    }
    fn streams(&self, snap: &Snapshot) -> bool {
        writes_stream(snap)
    }
    /// A `noreply` write goes to the workers, which send it without a round trip.
    fn on_loop(&self, snap: &Snapshot) -> bool {
        !self.noreply && !snap.behaviors.noreply
    }

    fn plan<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Plan<'k> {
        let noreply = self.noreply || snap.behaviors.noreply;
        let keys = args.keys;
        let bin = snap.behaviors.binary;
        let modes = WriteModes::new(&snap.topo.servers, !bin && !noreply && keys.len() > 1);
        let n = snap.topo.servers.len();
        let replicated = replicas::count(snap) > 0;
        let mut masters = Vec::new();
        let mut p = plan(snap, n, keys, false, REQUEST_BYTES, |b, i, w| {
            if replicated {
                masters.push((i, b.server));
            }
            if bin {
                let opaque = b.next_opaque();
                binary::encode_delete(&mut b.wbuf, w, true, opaque);
                b.keys.push(i);
            } else if modes.mode(b.server) == WriteMode::Quiet {
                let pos = b.push_quiet(i);
                meta::encode_delete_quiet(&mut b.wbuf, w, pos);
            } else {
                text::encode_delete(&mut b.wbuf, w, noreply);
                if noreply {
                    b.keys.push(i);
                } else {
                    b.push_req(ReplyKind::Delete, i);
                }
            }
        });
        let wire = |i: u32| {
            keys.get(i as usize)
                .and_then(|k| snap.wire_key(k, false).ok())
        };
        replicas::add_writes(snap, &mut p.batches, &masters, wire, |b, opaque, _, w| {
            binary::encode_delete(&mut b.wbuf, w, true, opaque);
        });
        let closing = write_closing(bin, &modes, noreply, ReplyKind::Delete);
        close_batches(&mut p.batches, closing);
        p
    }

    fn sink<W: WireKeys>(&self, _: &Snapshot, _: W, args: Args<'_, '_>) -> Self::Sink<W> {
        LineSink::new(args.keys.len(), Deleted, Some(true))
    }

    /// A key deleted in an ambiguous range is read back: gone means deleted.
    fn settle<W: WireKeys>(
        &self,
        client: &Client,
        _snap: &Snapshot,
        mut sink: Self::Sink<W>,
        args: Args<'_, '_>,
    ) -> Self::Output {
        let keys = args.keys;
        let ambiguous = std::mem::take(&mut sink.ambiguous);
        for (i, found) in read_back(client, ambiguous, |i| keys[i as usize]) {
            if found.is_none() {
                sink.out.set(i, Ok(true));
            }
        }
        sink.out.finish()
    }

    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        client.call_forgetting(self, args)
    }
}

impl Forgets for Delete {
    type Ok = bool;
    const OK: bool = true;

    fn lone_noreply<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.keys {
            [k] if self.noreply || snap.behaviors.noreply => Some(k),
            _ => None,
        }
    }
}

/// A lone delete that waits for its reply, with no replica to delete from.
impl Lone for Delete {
    const KIND: ReplyKind = ReplyKind::Delete;

    fn lone_key<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.keys {
            [k] if !(self.noreply || snap.behaviors.noreply) && replicas::count(snap) == 0 => {
                Some(k)
            }
            _ => None,
        }
    }
    #[inline(always)]
    fn encode_lone(&self, _: &Snapshot, _: Args<'_, '_>, buf: &mut Vec<u8>, w: &[u8], nr: bool) {
        text::encode_delete(buf, w, nr);
    }
    fn answer(&self, buf: &[u8], _: &[u8], _: usize) -> Option<(Self::One, usize)> {
        line_answer(ReplyKind::Delete, Deleted, buf)
    }
    lone_per_key!(bool);
}
