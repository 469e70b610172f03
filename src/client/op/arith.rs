//! `incr`/`decr`, pipelined: one request and one reply per key; the new value, or `None` if the
//! key does not exist. With `create`, a missing counter is created at its initial value in the
//! same round trip: by the binary protocol's own initial value, by the meta `ma` command's
//! auto-create (`N`/`J`) on a server that speaks it, and otherwise by the classic `incr`
//! followed, for the keys it missed, by an `add` of the initial value (and, if another client
//! created the key first, the `incr` again).
//!
//! Uses the plan and `LineSink`; `protocol` encoders; the blocking `store_multi`/`arith_multi`
//! for the fallback.

use std::sync::Arc;

use super::lone::{line_answer, lone_per_key, Lone};
use super::meta::learn_meta_support;
use super::{Args, Operation, REQUEST_BYTES};
use crate::client::plan::{plan, Plan};
use crate::client::results::StoreStatus;
use crate::client::sink::{unexpected, LineMap, LineSink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::Result;
use crate::metrics::Family;
use crate::protocol::{binary, meta, text, Reply, ReplyKind, StoreCmd, StoreItem};
use crate::server::MetaSupport;

/// How many times the fallback tries `add` then `incr` for one key before it reports the miss
/// (each round means another client deleted the key between the two).
const FALLBACK_ROUNDS: usize = 3;

/// `incr` (or `decr`) by `delta`, creating a missing counter if `create` says how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arith {
    pub incr: bool,
    pub delta: u64,
    pub create: Option<Create>,
}

/// A missing counter's initial value and expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Create {
    pub initial: u64,
    pub exptime: u32,
}

/// An `incr`/`decr` reply line, or an `ma` answer.
#[derive(Clone, Copy)]
pub(in crate::client) struct ArithReply;

impl LineMap<Option<u64>> for ArithReply {
    fn map(&mut self, r: Reply<'_>) -> Result<Option<u64>> {
        match r {
            Reply::Number(n) => Ok(Some(n)),
            Reply::NotFound => Ok(None),
            Reply::MetaResult {
                code: [b'V', b'A'],
                data: Some(d),
                ..
            } => parse_number(d).map(Some).ok_or_else(unexpected),
            // Not created after all (the server could not store it): the fallback retries.
            Reply::MetaResult {
                code: [b'N', b'F' | b'S'],
                ..
            } => Ok(None),
            _ => Err(unexpected()),
        }
    }
}

fn parse_number(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 20 || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(d).ok()?.parse().ok()
}

impl Operation for Arith {
    type Sink<W: WireKeys> = LineSink<Option<u64>, ArithReply>;
    type Output = Vec<Result<Option<u64>>>;

    fn family(&self) -> Family {
        Family::Arith
    }
    /// Not while a counter is to be created and some server's meta support is unknown: the
    /// blocking call learns it first.
    fn on_loop(&self, snap: &Snapshot) -> bool {
        self.create.is_none()
            || snap.behaviors.binary
            || snap
                .topo
                .servers
                .iter()
                .all(|s| s.meta_support() != MetaSupport::Unknown)
    }

    fn plan<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Plan<'k> {
        let (incr, delta, create) = (self.incr, self.delta, self.create);
        let bin = snap.behaviors.binary;
        let n = snap.topo.servers.len();
        plan(snap, n, args.keys, false, REQUEST_BYTES, |b, i, w| {
            let meta_create = create.filter(|_| {
                !bin && snap
                    .topo
                    .servers
                    .get(b.server)
                    .is_some_and(|s| s.meta_support() == MetaSupport::Yes)
            });
            let expiry = |c: Create| snap.behaviors.jitter.apply(c.exptime, w);
            if bin {
                let opaque = b.next_opaque();
                let c = create.map(|c| (c.initial, expiry(c)));
                binary::encode_arith_create(&mut b.wbuf, incr, w, delta, c, opaque);
                b.push_req(ReplyKind::Arith, i);
            } else if let Some(c) = meta_create {
                meta::encode_arith_create(&mut b.wbuf, incr, w, delta, c.initial, expiry(c));
                b.push_req(ReplyKind::MetaCmd, i);
            } else {
                text::encode_arith(&mut b.wbuf, incr, w, delta, false);
                b.push_req(ReplyKind::Arith, i);
            }
        })
    }

    fn sink<W: WireKeys>(&self, _: &Snapshot, _: W, args: Args<'_, '_>) -> Self::Sink<W> {
        LineSink::new(args.keys.len(), ArithReply, None)
    }

    /// The fallback's `add` needs I/O: a key missed while a counter was to be created.
    fn settles_with_io<W: WireKeys>(&self, snap: &Snapshot, sink: &Self::Sink<W>) -> bool {
        self.create.is_some() && !snap.behaviors.binary && sink.out.any(|r| matches!(r, Ok(None)))
    }

    fn settle<W: WireKeys>(
        &self,
        client: &Client,
        snap: &Snapshot,
        sink: Self::Sink<W>,
        args: Args<'_, '_>,
    ) -> Self::Output {
        let mut out = sink.out.finish();
        if let (Some(c), false) = (self.create, snap.behaviors.binary) {
            for (r, key) in out.iter_mut().zip(args.keys) {
                if matches!(r, Ok(None)) {
                    *r = self.create_by_add(client, key, c);
                }
            }
        }
        out
    }

    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        client.ask_or_perform(&self.snapshot(client), self, args)
    }
}

impl Arith {
    /// `call` of one key: its outcome alone.
    pub(in crate::client) fn call_one(
        &self,
        client: &Client,
        args: Args<'_, '_>,
    ) -> Option<Result<Option<u64>>> {
        client.ask_or_perform_one(&self.snapshot(client), self, args)
    }

    /// The client's snapshot to call on. With `create`, whether each server speaks the meta
    /// protocol is learned first, so the keys of those that do take `ma` (one round trip) and
    /// only the others the fallback.
    fn snapshot(&self, client: &Client) -> Arc<Snapshot> {
        let snap = client.snapshot();
        if self.create.is_some() && !snap.behaviors.binary {
            learn_meta_support(&snap);
        }
        snap
    }
}

/// A lone `incr`/`decr` without `create` (which may take an `add` after it).
impl Lone for Arith {
    const KIND: ReplyKind = ReplyKind::Arith;

    fn lone_key<'k>(&self, _: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]> {
        match args.keys {
            [k] if self.create.is_none() => Some(k),
            _ => None,
        }
    }
    fn encode_lone(&self, _: &Snapshot, _: Args<'_, '_>, buf: &mut Vec<u8>, w: &[u8], nr: bool) {
        text::encode_arith(buf, self.incr, w, self.delta, nr);
    }
    fn answer(&self, buf: &[u8], _: &[u8], _: usize) -> Option<(Self::One, usize)> {
        line_answer(ReplyKind::Arith, ArithReply, buf)
    }
    lone_per_key!(Option<u64>);
}

impl Arith {
    /// The classic fallback for one missed key: `add` the initial value; if another client
    /// added it first, `incr` (or `decr`) it after all.
    fn create_by_add(&self, client: &Client, key: &[u8], c: Create) -> Result<Option<u64>> {
        let digits = c.initial.to_string();
        let plain = Arith {
            create: None,
            ..*self
        };
        for _ in 0..FALLBACK_ROUNDS {
            let item = StoreItem {
                key,
                flags: 0,
                exptime: c.exptime,
                data: digits.as_bytes(),
                cas: 0,
            };
            let added = client.store_multi(StoreCmd::Add, &[item], false).pop();
            match added {
                Some(Ok(StoreStatus::Stored)) => return Ok(Some(c.initial)),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Err(unexpected()),
            }
            match plain.call(client, Args::keys(&[key])).pop() {
                Some(Ok(None)) => continue,
                Some(r) => return r,
                None => return Err(unexpected()),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ma_answer_is_the_new_value_or_a_miss() {
        let va = |d: &'static [u8]| Reply::MetaResult {
            code: *b"VA",
            flags: b"",
            data: Some(d),
        };
        assert_eq!(ArithReply.map(va(b"42")).unwrap(), Some(42));
        assert_eq!(
            ArithReply.map(va(b"18446744073709551615")).unwrap(),
            Some(u64::MAX)
        );
        assert!(ArithReply.map(va(b"18446744073709551616")).is_err());
        assert!(ArithReply.map(va(b"")).is_err());
        assert!(ArithReply.map(va(b"4x")).is_err());
        for code in [*b"NF", *b"NS"] {
            let r = Reply::MetaResult {
                code,
                flags: b"",
                data: None,
            };
            assert_eq!(ArithReply.map(r).unwrap(), None);
        }
        let ex = Reply::MetaResult {
            code: *b"EX",
            flags: b"",
            data: None,
        };
        assert!(ArithReply.map(ex).is_err());
        assert_eq!(ArithReply.map(Reply::Number(7)).unwrap(), Some(7));
        assert_eq!(ArithReply.map(Reply::NotFound).unwrap(), None);
    }
}
