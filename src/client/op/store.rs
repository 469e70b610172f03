//! Storage commands (set, add, replace, append, prepend, cas), pipelined: quiet meta writes
//! where the server has them and more than one item is stored with replies, classic lines
//! otherwise (binary: quiet opcodes), every batch closed so that no stray reply can be read
//! later. With `noreply` the server answers nothing per key and one `version` round trip closes
//! the batch; a lone `noreply` item takes the shorter path of `drive::noreply`. A key stored in
//! an ambiguous quiet range is read back: stored if the server has exactly what was sent.
//!
//! Uses the plan and `LineSink`; `protocol` encoders.

use super::lone::{line_answer, lone_per_key, Forgets, Lone};
use super::{read_back, write_closing, writes_stream, Args, Operation, REQUEST_BYTES};
use crate::behaviors::Jitter;
use crate::client::batch::ServerBatch;
use crate::client::plan::{close_batches, plan, Plan, WriteMode, WriteModes};
use crate::client::replicas;
use crate::client::results::StoreStatus;
use crate::client::sink::{unexpected, LineMap, LineSink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::protocol::{binary, meta, text, Reply, ReplyKind, StoreCmd, StoreItem};

/// Values at least this large go in a quiet meta segment of their own (see `StoreEncoder`).
const QUIET_ALONE: usize = 8 * 1024;

/// Values at least this large are sent from the caller's bytes, not copied into the request
/// buffer (`StoreEncoder::borrows`): copying a 100 KB value took a tenth of a set's time in
/// fastmc's process.
const BORROWED: usize = 32 * 1024;

/// A storage command; `noreply` as the caller asked (the behavior adds to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store {
    pub cmd: StoreCmd,
    pub noreply: bool,
}

/// A storage reply line as a `StoreStatus`.
#[derive(Clone, Copy)]
pub(in crate::client) struct StoreReply;

impl LineMap<StoreStatus> for StoreReply {
    fn map(&mut self, r: Reply<'_>) -> Result<StoreStatus> {
        match r {
            Reply::Stored => Ok(StoreStatus::Stored),
            Reply::NotStored => Ok(StoreStatus::NotStored),
            Reply::Exists => Ok(StoreStatus::Exists),
            Reply::NotFound => Ok(StoreStatus::NotFound),
            _ => Err(unexpected()),
        }
    }
}

impl Operation for Store {
    type Sink<W: WireKeys> = LineSink<StoreStatus, StoreReply>;
    type Output = Vec<Result<StoreStatus>>;

    fn family(&self) -> Family {
        Family::Store
    }
    fn keys_apart(&self) -> bool {
        true
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
        plan_store(snap, self.cmd, args.items, noreply)
    }

    fn sink<W: WireKeys>(&self, _: &Snapshot, _: W, args: Args<'_, '_>) -> Self::Sink<W> {
        LineSink::new(args.items.len(), StoreReply, Some(StoreStatus::Stored))
    }

    /// A key stored in an ambiguous range (see `Sink::ambiguous`) is read back: stored if the
    /// server has exactly what was sent.
    fn settle<W: WireKeys>(
        &self,
        client: &Client,
        _snap: &Snapshot,
        mut sink: Self::Sink<W>,
        args: Args<'_, '_>,
    ) -> Self::Output {
        let items = args.items;
        let ambiguous = std::mem::take(&mut sink.ambiguous);
        for (i, found) in read_back(client, ambiguous, |i| items[i as usize].key) {
            let it = &items[i as usize];
            if found.is_some_and(|(flags, data)| flags == it.flags && data == it.data) {
                sink.out.set(i, Ok(StoreStatus::Stored));
            }
        }
        sink.out.finish()
    }

    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        client.call_forgetting(self, args)
    }
}

impl Forgets for Store {
    type Ok = StoreStatus;
    const OK: StoreStatus = StoreStatus::Stored;

    fn lone_noreply<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.items {
            [it] if self.noreply || snap.behaviors.noreply => Some(it.key),
            _ => None,
        }
    }
}

/// A lone item that waits for its reply, with a value small enough to copy (a larger one is
/// sent from the caller's bytes by the general path), and no replica to write.
impl Lone for Store {
    const KIND: ReplyKind = ReplyKind::Storage;

    fn lone_key<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.items {
            [it] if !(self.noreply || snap.behaviors.noreply)
                && it.data.len() < QUIET_ALONE
                && replicas::count(snap) == 0 =>
            {
                Some(it.key)
            }
            _ => None,
        }
    }
    fn request_size(&self, args: Args<'_, '_>) -> usize {
        args.items.iter().map(|it| it.data.len()).sum::<usize>() + REQUEST_BYTES
    }
    fn encode_lone(
        &self,
        snap: &Snapshot,
        args: Args<'_, '_>,
        buf: &mut Vec<u8>,
        w: &[u8],
        noreply: bool,
    ) {
        if let [it] = args.items {
            let it = jittered(snap.behaviors.jitter, it, w);
            text::encode_store(buf, self.cmd, w, &it, noreply);
        }
    }
    fn answer(&self, buf: &[u8], _: &[u8], _: usize) -> Option<(Self::One, usize)> {
        line_answer(ReplyKind::Storage, StoreReply, buf)
    }
    lone_per_key!(StoreStatus);
}

/// A store item as it goes out to wire key `w`: its expiry jittered (`Jitter`). Every store
/// encoder takes its items through this, the `noreply` one included.
fn jittered<'k>(jitter: Jitter, it: &StoreItem<'k>, w: &[u8]) -> StoreItem<'k> {
    StoreItem {
        exptime: jitter.apply(it.exptime, w),
        ..*it
    }
}

/// How one `store_multi` encodes each item, per server.
struct StoreEncoder<'a, 'k> {
    cmd: StoreCmd,
    items: &'a [StoreItem<'k>],
    jitter: Jitter,
    binary: bool,
    tls: bool,
    noreply: bool,
    modes: &'a WriteModes,
}

impl<'k> StoreEncoder<'_, 'k> {
    /// Item `i` as it goes out to wire key `w` (`jittered`).
    fn item(&self, i: u32, w: &[u8]) -> StoreItem<'k> {
        jittered(self.jitter, &self.items[i as usize], w)
    }

    /// Append item `i` (wire key `w`) to `batch`; `Err` for a value too big to send.
    fn encode(&self, batch: &mut ServerBatch<'k>, i: u32, w: &[u8]) -> Result<()> {
        let it = &self.item(i, w);
        if self.binary {
            // Quiet opcodes: only failures answer, then the closing NOOP.
            if !binary::body_fits(w, it.data.len()) {
                return Err(Error::TooBig);
            }
            let opaque = batch.next_opaque();
            binary::encode_store(&mut batch.wbuf, self.cmd, w, it, true, opaque);
            batch.keys.push(i);
        } else if self.modes.mode(batch.server) == WriteMode::Quiet {
            // A large value may be refused (`SERVER_ERROR object too large`), and error lines
            // carry no token: it gets a segment of its own, so the error is its own.
            let alone = it.data.len() >= QUIET_ALONE;
            if alone {
                batch.close_quiet(ReplyKind::MetaStore);
            }
            let pos = batch.push_quiet(i);
            if self.borrows(it) {
                meta::encode_store_quiet_head(&mut batch.wbuf, self.cmd, w, it, pos);
                Self::borrow_value(batch, it.data);
            } else {
                meta::encode_store_quiet(&mut batch.wbuf, self.cmd, w, it, pos);
            }
            self.end_record(batch);
            if alone {
                batch.close_quiet(ReplyKind::MetaStore);
            }
            return Ok(());
        } else {
            if self.borrows(it) {
                text::encode_store_head(&mut batch.wbuf, self.cmd, w, it, self.noreply);
                Self::borrow_value(batch, it.data);
            } else {
                text::encode_store(&mut batch.wbuf, self.cmd, w, it, self.noreply);
            }
            if self.noreply {
                batch.keys.push(i);
            } else {
                batch.push_req(ReplyKind::Storage, i);
            }
        }
        self.end_record(batch);
        Ok(())
    }

    /// Whether `it`'s value goes out from the caller's bytes rather than a copy
    /// (`ServerBatch::ext`): a large one, on a plain socket (TLS seals records of its own).
    fn borrows(&self, it: &StoreItem<'_>) -> bool {
        it.data.len() >= BORROWED && !self.tls
    }

    /// A value's data block from its own bytes, then its `\r\n`.
    fn borrow_value(batch: &mut ServerBatch<'k>, data: &'k [u8]) {
        batch.ext.push((batch.wbuf.len(), data));
        batch.wbuf.extend_from_slice(b"\r\n");
    }

    /// TLS: a storage request ends a TLS record (see `ServerBatch::record_ends`).
    fn end_record(&self, batch: &mut ServerBatch<'_>) {
        if self.tls {
            batch.record_ends.push(batch.wbuf.len());
        }
    }
}

/// A `store_multi`'s batches (quiet meta writes where the server has them and more than one
/// item is stored with replies), closed so that no stray reply can be read later.
fn plan_store<'k>(
    snap: &Snapshot,
    cmd: StoreCmd,
    items: &[StoreItem<'k>],
    noreply: bool,
) -> Plan<'k> {
    let bin = snap.behaviors.binary;
    let quiet = !bin && !noreply && items.len() > 1 && meta::has_quiet_store(cmd);
    let modes = WriteModes::new(&snap.topo.servers, quiet);
    let encoder = StoreEncoder {
        cmd,
        items,
        jitter: snap.behaviors.jitter,
        binary: bin,
        tls: snap.opts.security.tls.is_some(),
        noreply,
        modes: &modes,
    };
    let mut too_big = Vec::new();
    // libmemcached replicates `set` only (`replicas.rs`).
    let replicated = cmd == StoreCmd::Set && replicas::count(snap) > 0;
    let mut masters = Vec::new();
    // No room for values ahead: each encoder reserves exactly what its request takes, and a
    // guess from the average value would reserve twice a single value (or, for a value too
    // big to send, far more than is ever written).
    let mut p = plan(
        snap,
        snap.topo.servers.len(),
        items,
        false,
        0,
        |b, i, w| match encoder.encode(b, i, w) {
            Err(e) => too_big.push((i, e)),
            Ok(()) if replicated => masters.push((i, b.server)),
            Ok(()) => {}
        },
    );
    p.rejected.append(&mut too_big);
    let wire = |i: u32| {
        items
            .get(i as usize)
            .and_then(|it| snap.wire_key(it.key, false).ok())
    };
    replicas::add_writes(snap, &mut p.batches, &masters, wire, |b, opaque, i, w| {
        if items.get(i as usize).is_some() {
            let it = &encoder.item(i, w);
            binary::encode_store(&mut b.wbuf, cmd, w, it, true, opaque);
            encoder.end_record(b);
        }
    });
    close_batches(
        &mut p.batches,
        write_closing(bin, &modes, noreply, ReplyKind::Storage),
    );
    Plan {
        wire_keys: Default::default(),
        batches: p.batches,
        rejected: p.rejected,
    }
}
