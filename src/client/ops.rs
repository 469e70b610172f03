//! The operations: each plans its keys into server batches (encoding its requests), picks the
//! sink that turns replies into its outcomes, and executes. Writes whose quiet meta segment
//! reported an error without saying for which key read those keys back to settle them.
//!
//! Uses the plan, the sinks and the driver (`execute`); `protocol` encoders. No I/O of its own.

use std::sync::Arc;

use super::driver::Quick;
use super::plan::{
    close_batches, plan, plan_checked, Closing, KeyCheck, Plan, ServerBatch, WriteMode, WriteModes,
};
use super::sink::{unexpected, GetSink, LineSink, Sink, StatsSink};
use super::snapshot::Snapshot;
use super::{Client, Fetched, Stats, StoreStatus};
use crate::connection::Address;
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::protocol::{binary, meta, text, Reply, ReplyKind, StoreCmd, StoreItem};

/// About how many bytes a delete, incr/decr or touch request takes besides its key (the binary
/// header is 24 bytes, `incr <key> <20 digits> noreply\r\n` 36).
const REQUEST_BYTES: usize = 40;

/// Most bytes reserved up front for the values of one `get_multi`.
const ARENA_START: usize = 256 * 1024;

/// Values at least this large go in a quiet meta segment of their own (see `StoreEncoder`).
const QUIET_ALONE: usize = 8 * 1024;

/// What a read-back found for a key: its flags and bytes, or `None` when it is not there.
type ReadBack = Vec<(u32, Option<(u32, Vec<u8>)>)>;

/// How one `store_multi` encodes each item, per server.
struct StoreEncoder<'a> {
    cmd: StoreCmd,
    items: &'a [StoreItem<'a>],
    binary: bool,
    tls: bool,
    noreply: bool,
    modes: &'a WriteModes,
}

impl StoreEncoder<'_> {
    /// Append item `i` (wire key `w`) to `batch`; `Err` for a value too big to send.
    fn encode(&self, batch: &mut ServerBatch, i: u32, w: &[u8]) -> Result<()> {
        let it = &self.items[i as usize];
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
            meta::encode_store_quiet(&mut batch.wbuf, self.cmd, w, it, pos);
            self.end_record(batch);
            if alone {
                batch.close_quiet(ReplyKind::MetaStore);
            }
            return Ok(());
        } else {
            text::encode_store(&mut batch.wbuf, self.cmd, w, it, self.noreply);
            if self.noreply {
                batch.keys.push(i);
            } else {
                batch.push_req(ReplyKind::Storage, i);
            }
        }
        self.end_record(batch);
        Ok(())
    }

    /// TLS: a storage request ends a TLS record (see `ServerBatch::record_ends`).
    fn end_record(&self, batch: &mut ServerBatch) {
        if self.tls {
            batch.record_ends.push(batch.wbuf.len());
        }
    }
}

impl Client {
    /// Send the planned batches and collect the outcomes in `sink`, keys failed up front
    /// (`rejected`) included.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn execute<S: Sink>(
        &self,
        snap: &Snapshot,
        family: Family,
        mut batches: Vec<ServerBatch>,
        rejected: Vec<(u32, Error)>,
        mut sink: S,
        replay_safe: bool,
    ) -> S {
        for b in &mut batches {
            b.family = family;
        }
        for (i, e) in rejected {
            sink.reject(i, e);
        }
        self.run(snap, batches, &mut sink, replay_safe);
        sink
    }

    /// Read back the keys of ambiguous ranges (see `Sink::ambiguous`): for each, whether the
    /// server has it now, with its flags and bytes. A key whose read fails is left out (it
    /// keeps its error).
    fn read_back<'k>(&self, mut idx: Vec<u32>, key: impl Fn(u32) -> &'k [u8]) -> ReadBack {
        if idx.is_empty() {
            return Vec::new();
        }
        idx.sort_unstable();
        idx.dedup();
        let keys: Vec<&[u8]> = idx.iter().map(|&i| key(i)).collect();
        let got = self.get_multi(&keys, false);
        idx.iter()
            .zip(&got.items)
            .filter_map(|(&i, r)| match r {
                Ok(Some(item)) => Some((i, Some((item.flags, got.bytes(item).to_vec())))),
                Ok(None) => Some((i, None)),
                Err(_) => None,
            })
            .collect()
    }

    /// Fetch keys (`gets` when `with_cas`). Duplicates should be removed by the caller.
    pub fn get_multi(&self, keys: &[&[u8]], with_cas: bool) -> Fetched {
        self.fetch(keys, with_cas, None)
    }

    /// Fetch keys and set the expiry of those found to `exptime`, in the same round trip
    /// (`gat`/`gats`, binary GATKQ). A server without the command (it answers `ERROR`) fails
    /// its keys with `NotSupported`.
    pub fn gat_multi(&self, keys: &[&[u8]], exptime: u32) -> Fetched {
        let mut f = self.fetch(keys, false, Some(exptime));
        for r in &mut f.items {
            if matches!(r, Err(Error::UnknownCommand)) {
                *r = Err(Error::NotSupported("the server has no gat command".into()));
            }
        }
        f
    }

    /// `get_multi`, touching each hit when `touch` is given.
    fn fetch(&self, keys: &[&[u8]], with_cas: bool, touch: Option<u32>) -> Fetched {
        let snap = self.snapshot();
        let p = plan_fetch(&snap, keys, with_cas, touch);
        let sink = GetSink::new(&p.wire_keys[..], fetch_arena(keys.len()));
        let sink = self.execute(&snap, Family::Get, p.batches, p.rejected, sink, true);
        Fetched {
            items: sink.out.finish(),
            data: sink.data,
        }
    }

    /// A `noreply` `store_multi` of one item as far as it goes without blocking (see
    /// `forget_start`): sent on an idle connection.
    pub fn store_now(&self, cmd: StoreCmd, item: &StoreItem<'_>) -> Quick<StoreStatus> {
        match self.snapshot_in_place() {
            Some(snap) => self.forget_store(&snap, cmd, item, false),
            None => Quick::Blocking,
        }
    }

    /// A `noreply` store of one item by `forget_start`, when it applies.
    fn forget_store(
        &self,
        snap: &Arc<Snapshot>,
        cmd: StoreCmd,
        it: &StoreItem<'_>,
        may_connect: bool,
    ) -> Quick<StoreStatus> {
        let verify = snap.behaviors.verify_keys;
        let (size, ok) = (it.data.len() + REQUEST_BYTES, StoreStatus::Stored);
        let encode = |buf: &mut Vec<u8>, w: &[u8]| text::encode_store(buf, cmd, w, it, true);
        let f = Family::Store;
        self.forget_start(snap, f, it.key, verify, size, ok, encode, may_connect)
    }

    /// Storage commands, pipelined. With `noreply` the server answers nothing per key and one
    /// `version` round trip closes the batch, so no stray reply can ever be read later.
    pub fn store_multi(
        &self,
        cmd: StoreCmd,
        items: &[StoreItem<'_>],
        noreply: bool,
    ) -> Vec<Result<StoreStatus>> {
        let snap = self.snapshot();
        let noreply = noreply || snap.behaviors.noreply;
        if let ([it], true) = (items, noreply) {
            if let Some(r) = self.forget_end(self.forget_store(&snap, cmd, it, true)) {
                return vec![r];
            }
        }
        let p = plan_store(&snap, cmd, items, noreply);
        let sink = LineSink::new(items.len(), store_status, Some(StoreStatus::Stored));
        let sink = self.execute(&snap, Family::Store, p.batches, p.rejected, sink, false);
        self.settle_stores(sink, items)
    }

    /// A `store_multi`'s outcomes, once a key stored in an ambiguous range (see
    /// `Sink::ambiguous`) is read back: stored if the server has exactly what was sent.
    pub(super) fn settle_stores<F>(
        &self,
        mut sink: LineSink<StoreStatus, F>,
        items: &[StoreItem<'_>],
    ) -> Vec<Result<StoreStatus>>
    where
        F: FnMut(Reply<'_>) -> Result<StoreStatus>,
    {
        let found = self.read_back(std::mem::take(&mut sink.ambiguous), |i| {
            items[i as usize].key
        });
        for (i, found) in found {
            let it = &items[i as usize];
            if found.is_some_and(|(flags, data)| flags == it.flags && data == it.data) {
                sink.out.set(i, Ok(StoreStatus::Stored));
            }
        }
        sink.out.finish()
    }

    /// One delete: `delete_multi` of one key, without its vector on the `noreply` short path.
    pub fn delete_one(&self, key: &[u8], noreply: bool) -> Option<Result<bool>> {
        let snap = self.snapshot();
        if noreply || snap.behaviors.noreply {
            if let Some(r) = self.forget_end(self.forget_delete(&snap, key, true)) {
                return Some(r);
            }
        }
        drop(snap);
        self.delete_multi(&[key], noreply).pop()
    }

    /// A `noreply` `delete_one` as far as it goes without blocking (see `forget_start`): sent
    /// on an idle connection.
    pub fn delete_now(&self, key: &[u8]) -> Quick<bool> {
        match self.snapshot_in_place() {
            Some(snap) => self.forget_delete(&snap, key, false),
            None => Quick::Blocking,
        }
    }

    /// A `noreply` delete of one key by `forget_start`, when it applies.
    fn forget_delete(&self, snap: &Arc<Snapshot>, key: &[u8], may_connect: bool) -> Quick<bool> {
        let verify = snap.behaviors.verify_keys;
        let encode = |buf: &mut Vec<u8>, w: &[u8]| text::encode_delete(buf, w, true);
        let (f, n) = (Family::Delete, REQUEST_BYTES);
        self.forget_start(snap, f, key, verify, n, true, encode, may_connect)
    }

    /// Deletes, pipelined: `true` if deleted, `false` if not found.
    pub fn delete_multi(&self, keys: &[&[u8]], noreply: bool) -> Vec<Result<bool>> {
        let snap = self.snapshot();
        let noreply = noreply || snap.behaviors.noreply;
        if let ([k], true) = (keys, noreply) {
            if let Some(r) = self.forget_end(self.forget_delete(&snap, k, true)) {
                return vec![r];
            }
        }
        let p = plan_delete(&snap, keys, noreply);
        let sink = LineSink::new(keys.len(), deleted, Some(true));
        let sink = self.execute(&snap, Family::Delete, p.batches, p.rejected, sink, false);
        self.settle_deletes(sink, keys)
    }

    /// A `delete_multi`'s outcomes, once a key deleted in an ambiguous range is read back: gone
    /// means deleted.
    pub(super) fn settle_deletes<F>(
        &self,
        mut sink: LineSink<bool, F>,
        keys: &[&[u8]],
    ) -> Vec<Result<bool>>
    where
        F: FnMut(Reply<'_>) -> Result<bool>,
    {
        let found = self.read_back(std::mem::take(&mut sink.ambiguous), |i| keys[i as usize]);
        for (i, found) in found {
            if found.is_none() {
                sink.out.set(i, Ok(true));
            }
        }
        sink.out.finish()
    }

    /// `incr`/`decr`, pipelined: the new value, or `None` if the key does not exist.
    pub fn arith_multi(&self, incr: bool, keys: &[&[u8]], delta: u64) -> Vec<Result<Option<u64>>> {
        let snap = self.snapshot();
        let p = plan_arith(&snap, incr, keys, delta);
        let sink = LineSink::new(keys.len(), arith_value, None);
        let sink = self.execute(&snap, Family::Arith, p.batches, p.rejected, sink, false);
        sink.out.finish()
    }

    /// `touch`, pipelined: `true` if touched, `false` if not found.
    pub fn touch_multi(&self, keys: &[&[u8]], exptime: u32, noreply: bool) -> Vec<Result<bool>> {
        let snap = self.snapshot();
        let bin = snap.behaviors.binary;
        // The binary protocol has no quiet touch: every touch answers.
        let noreply = (noreply || snap.behaviors.noreply) && !bin;
        if let ([k], true) = (keys, noreply) {
            let encode = |buf: &mut Vec<u8>, w: &[u8]| text::encode_touch(buf, w, exptime, true);
            // (libmemcached's touch does not apply verify_keys, as below.)
            let f = Family::Touch;
            let q = self.forget_start(&snap, f, k, false, REQUEST_BYTES, true, encode, true);
            if let Some(r) = self.forget_end(q) {
                return vec![r];
            }
        }
        let p = plan_touch(&snap, keys, exptime, noreply);
        let sink = LineSink::new(keys.len(), touched, Some(true));
        let sink = self.execute(&snap, Family::Touch, p.batches, p.rejected, sink, false);
        sink.out.finish()
    }

    /// `flush_all` on every server; one outcome per server.
    pub fn flush_all(&self, delay: u32) -> Vec<Result<()>> {
        let snap = self.snapshot();
        let batches = per_server(&snap, ReplyKind::Ok, |buf| {
            if snap.behaviors.binary {
                binary::encode_flush(buf, delay);
            } else {
                text::encode_flush_all(buf, delay);
            }
        });
        let sink = LineSink::new(snap.topo.servers.len(), flushed, None);
        let sink = self.execute(&snap, Family::Admin, batches, Vec::new(), sink, false);
        sink.out.finish()
    }

    /// `stats [args]` on every server; one outcome per server, in server order, with the
    /// server's address (from the same server list the request went to).
    pub fn stats(&self, args: &[u8]) -> Vec<(Address, Result<Stats>)> {
        let snap = self.snapshot();
        let n = snap.topo.servers.len();
        let addrs = snap.topo.addresses();
        if args.iter().any(|&b| b == b'\r' || b == b'\n') {
            return addrs
                .into_iter()
                .map(|a| {
                    (
                        a,
                        Err(Error::BadKey("stats arguments contain a line break".into())),
                    )
                })
                .collect();
        }
        let batches = per_server(&snap, ReplyKind::Stats, |buf| {
            if snap.behaviors.binary {
                binary::encode_stats(buf, args);
            } else {
                text::encode_stats(buf, args);
            }
        });
        let sink = self.execute(
            &snap,
            Family::Admin,
            batches,
            Vec::new(),
            StatsSink::new(n),
            true,
        );
        addrs.into_iter().zip(sink.finish()).collect()
    }
}

/// Room for small values of every key of a fetch: the arena rarely has to grow.
pub(super) fn fetch_arena(keys: usize) -> usize {
    (keys * 64).min(ARENA_START)
}

/// A fetch's batches: `get`/`gets` lines (`gat`/`gats` with `touch`) per server, and the wire
/// keys its sink matches hits against.
pub(super) fn plan_fetch<'k>(
    snap: &Snapshot,
    keys: &[&'k [u8]],
    with_cas: bool,
    touch: Option<u32>,
) -> Plan<'k> {
    let with_cas = with_cas || snap.behaviors.cas;
    let n = snap.topo.servers.len();
    let mut p = plan(snap, n, keys, true, 0, |b, i, _| b.keys.push(i));
    for batch in &mut p.batches {
        batch.encode_gets(&p.wire_keys, with_cas, snap.behaviors.binary, touch);
    }
    p
}

/// A `store_multi`'s batches (quiet meta writes where the server has them and more than one
/// item is stored with replies), closed so that no stray reply can be read later.
pub(super) fn plan_store<'k>(
    snap: &Snapshot,
    cmd: StoreCmd,
    items: &[StoreItem<'k>],
    noreply: bool,
) -> Plan<'k> {
    let keys: Vec<&[u8]> = items.iter().map(|it| it.key).collect();
    let bin = snap.behaviors.binary;
    let quiet = !bin && !noreply && keys.len() > 1 && meta::has_quiet_store(cmd);
    let modes = WriteModes::new(&snap.topo.servers, quiet);
    let encoder = StoreEncoder {
        cmd,
        items,
        binary: bin,
        tls: snap.opts.security.tls.is_some(),
        noreply,
        modes: &modes,
    };
    let mut too_big = Vec::new();
    // No room for values ahead: each encoder reserves exactly what its request takes, and a
    // guess from the average value would reserve twice a single value (or, for a value too
    // big to send, far more than is ever written).
    let mut p = plan(snap, snap.topo.servers.len(), &keys, false, 0, |b, i, w| {
        if let Err(e) = encoder.encode(b, i, w) {
            too_big.push((i, e));
        }
    });
    p.rejected.append(&mut too_big);
    close_batches(
        &mut p.batches,
        write_closing(bin, &modes, noreply, ReplyKind::Storage),
    );
    Plan {
        wire_keys: Vec::new(),
        batches: p.batches,
        rejected: p.rejected,
    }
}

/// A `delete_multi`'s batches, closed like `plan_store`'s.
pub(super) fn plan_delete<'k>(snap: &Snapshot, keys: &[&'k [u8]], noreply: bool) -> Plan<'k> {
    let bin = snap.behaviors.binary;
    let modes = WriteModes::new(&snap.topo.servers, !bin && !noreply && keys.len() > 1);
    let n = snap.topo.servers.len();
    let mut p = plan(snap, n, keys, false, REQUEST_BYTES, |b, i, w| {
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
    let closing = write_closing(bin, &modes, noreply, ReplyKind::Delete);
    close_batches(&mut p.batches, closing);
    p
}

/// `incr`/`decr` batches: one request and one reply per key.
pub(super) fn plan_arith<'k>(
    snap: &Snapshot,
    incr: bool,
    keys: &[&'k [u8]],
    delta: u64,
) -> Plan<'k> {
    let bin = snap.behaviors.binary;
    let n = snap.topo.servers.len();
    plan(snap, n, keys, false, REQUEST_BYTES, |b, i, w| {
        if bin {
            let opaque = b.next_opaque();
            binary::encode_arith(&mut b.wbuf, incr, w, delta, opaque);
        } else {
            text::encode_arith(&mut b.wbuf, incr, w, delta, false);
        }
        b.push_req(ReplyKind::Arith, i);
    })
}

/// `touch` batches (`noreply` as the caller settled it: never in binary).
pub(super) fn plan_touch<'k>(
    snap: &Snapshot,
    keys: &[&'k [u8]],
    exptime: u32,
    noreply: bool,
) -> Plan<'k> {
    let bin = snap.behaviors.binary;
    let n = snap.topo.servers.len();
    // libmemcached's touch does not apply verify_keys (pylibmc sends such a key).
    let check = KeyCheck::Protocol;
    let mut p = plan_checked(snap, n, keys, check, false, REQUEST_BYTES, |b, i, w| {
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

/// One batch per server with one request `encode` writes (its outcome is the server's).
fn per_server(snap: &Snapshot, kind: ReplyKind, encode: impl Fn(&mut Vec<u8>)) -> Vec<ServerBatch> {
    (0..snap.topo.servers.len())
        .map(|s| {
            let mut batch = ServerBatch::new(s);
            encode(&mut batch.wbuf);
            batch.push_req(kind, s as u32);
            batch
        })
        .collect()
}

/// How the batches of a store or delete are closed: `kind` is the classic reply kind.
fn write_closing(binary: bool, modes: &WriteModes, noreply: bool, kind: ReplyKind) -> Closing<'_> {
    if binary {
        return Closing::Binary { kind, noreply };
    }
    let quiet_kind = if kind == ReplyKind::Delete {
        ReplyKind::MetaDelete
    } else {
        ReplyKind::MetaStore
    };
    Closing::Text {
        modes,
        noreply,
        quiet_kind,
    }
}

pub(super) fn store_status(r: Reply<'_>) -> Result<StoreStatus> {
    match r {
        Reply::Stored => Ok(StoreStatus::Stored),
        Reply::NotStored => Ok(StoreStatus::NotStored),
        Reply::Exists => Ok(StoreStatus::Exists),
        Reply::NotFound => Ok(StoreStatus::NotFound),
        _ => Err(unexpected()),
    }
}

pub(super) fn deleted(r: Reply<'_>) -> Result<bool> {
    match r {
        Reply::Deleted => Ok(true),
        Reply::NotFound => Ok(false),
        _ => Err(unexpected()),
    }
}

pub(super) fn touched(r: Reply<'_>) -> Result<bool> {
    match r {
        Reply::Touched => Ok(true),
        Reply::NotFound => Ok(false),
        _ => Err(unexpected()),
    }
}

pub(super) fn arith_value(r: Reply<'_>) -> Result<Option<u64>> {
    match r {
        Reply::Number(n) => Ok(Some(n)),
        Reply::NotFound => Ok(None),
        _ => Err(unexpected()),
    }
}

fn flushed(r: Reply<'_>) -> Result<()> {
    match r {
        Reply::Ok => Ok(()),
        _ => Err(unexpected()),
    }
}
