//! Whole-client commands: `flush_all` and `stats` on every server, one request and one outcome
//! per server, in server order.
//!
//! Owns the `stats` sink (many lines per server). Uses `ServerBatch` and `LineSink`; `protocol`
//! encoders. No socket.

use super::{Access, Args, Operation};
use crate::client::batch::ServerBatch;
use crate::client::plan::Plan;
use crate::client::results::Stats as ServerStats;
use crate::client::sink::{unexpected, LineMap, LineSink, Sink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::connection::connect::Address;
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::protocol::{binary, text, Reply, ReplyKind};

/// The most `STAT` lines one server's `stats` reply may have (memcached's largest groups,
/// `items` and `slabs`, have about 1,500 with every slab class in use).
pub(crate) const MAX_STAT_LINES: usize = 16_384;
/// The most bytes of names and values one server's `stats` reply may have.
pub(crate) const MAX_STAT_BYTES: usize = 4 << 20;

/// `stats` replies: many lines per server; one outcome per server.
pub(in crate::client) struct StatsSink {
    out: Vec<Option<Result<ServerStats>>>,
    acc: ServerStats,
    /// Bytes of names and values in `acc`.
    acc_bytes: usize,
}

impl StatsSink {
    pub fn new(servers: usize) -> StatsSink {
        StatsSink {
            out: (0..servers).map(|_| None).collect(),
            acc: Vec::new(),
            acc_bytes: 0,
        }
    }

    pub fn finish(self) -> Vec<Result<ServerStats>> {
        self.out
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(Error::Protocol("no reply".into()))))
            .collect()
    }
}

impl Sink for StatsSink {
    fn reply(&mut self, _: ReplyKind, keys: &[u32], _: &mut usize, r: Reply<'_>) -> Result<bool> {
        let Some(&k) = keys.first() else {
            return Ok(true);
        };
        match r {
            Reply::Stat { name, value } => {
                self.acc_bytes += name.len() + value.len();
                if self.acc.len() >= MAX_STAT_LINES || self.acc_bytes > MAX_STAT_BYTES {
                    return Err(Error::Protocol("too many STAT lines".into()));
                }
                self.acc.push((name.to_vec(), value.to_vec()));
                Ok(false)
            }
            Reply::End => {
                if let Some(slot) = self.out.get_mut(k as usize) {
                    *slot = Some(Ok(std::mem::take(&mut self.acc)));
                }
                self.acc_bytes = 0;
                Ok(true)
            }
            Reply::Failed(e) if self.acc.is_empty() => Err(e),
            // The binary protocol's answer to a stats group the server does not have: a
            // failure of this request, not of the server.
            Reply::NotFound if self.acc.is_empty() => {
                Err(Error::UnknownStatus("no such stats group".into()))
            }
            _ => Err(unexpected()),
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        for &k in keys {
            if let Some(s @ None) = self.out.get_mut(k as usize) {
                *s = Some(Err(e.clone()));
            }
        }
        self.acc.clear();
        self.acc_bytes = 0;
    }
    fn assume_ok(&mut self, _: &[u32]) {}
    fn reject(&mut self, key: u32, e: Error) {
        if let Some(s) = self.out.get_mut(key as usize) {
            *s = Some(Err(e));
        }
    }
}

/// `flush_all` after `delay` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flush {
    pub delay: u32,
}

/// `stats [args]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    pub args: Box<[u8]>,
}

/// A `flush_all` reply line.
#[derive(Clone, Copy)]
pub(in crate::client) struct Flushed;

impl LineMap<()> for Flushed {
    fn map(&mut self, r: Reply<'_>) -> Result<()> {
        match r {
            Reply::Ok => Ok(()),
            _ => Err(unexpected()),
        }
    }
}

/// One batch per server with one request `encode` writes (its outcome is the server's).
fn per_server<'k>(snap: &Snapshot, kind: ReplyKind, encode: impl Fn(&mut Vec<u8>)) -> Plan<'k> {
    let batches = (0..snap.topo.servers.len())
        .map(|s| {
            let mut batch = ServerBatch::new(s);
            encode(&mut batch.wbuf);
            batch.push_req(kind, s as u32);
            batch
        })
        .collect();
    Plan {
        wire_keys: Default::default(),
        batches,
        rejected: Vec::new(),
    }
}

impl Operation for Flush {
    type Sink<W: WireKeys> = LineSink<(), Flushed>;
    type Output = Vec<Result<()>>;

    fn family(&self) -> Family {
        Family::Admin
    }
    fn merges(&self) -> bool {
        false
    }

    fn plan<'k>(&self, snap: &Snapshot, _: Args<'_, 'k>) -> Plan<'k> {
        per_server(snap, ReplyKind::Ok, |buf| {
            if snap.behaviors.binary {
                binary::encode_flush(buf, self.delay);
            } else {
                text::encode_flush_all(buf, self.delay);
            }
        })
    }

    fn sink<W: WireKeys>(&self, snap: &Snapshot, _: W, _: Args<'_, '_>) -> Self::Sink<W> {
        LineSink::new(snap.topo.servers.len(), Flushed, None)
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
}

impl Operation for Stats {
    type Sink<W: WireKeys> = StatsSink;
    /// With each server's address (from the same server list the request went to).
    type Output = Vec<(Address, Result<ServerStats>)>;

    fn family(&self) -> Family {
        Family::Admin
    }
    fn replay_safe(&self) -> bool {
        true
    }
    fn access(&self) -> Access {
        Access::Read
    }
    fn merges(&self) -> bool {
        false
    }

    fn plan<'k>(&self, snap: &Snapshot, _: Args<'_, 'k>) -> Plan<'k> {
        per_server(snap, ReplyKind::Stats, |buf| {
            if snap.behaviors.binary {
                binary::encode_stats(buf, &self.args);
            } else {
                text::encode_stats(buf, &self.args);
            }
        })
    }

    fn sink<W: WireKeys>(&self, snap: &Snapshot, _: W, _: Args<'_, '_>) -> StatsSink {
        StatsSink::new(snap.topo.servers.len())
    }

    fn settle<W: WireKeys>(
        &self,
        _: &Client,
        snap: &Snapshot,
        sink: StatsSink,
        _: Args<'_, '_>,
    ) -> Self::Output {
        snap.topo
            .addresses()
            .into_iter()
            .zip(sink.finish())
            .collect()
    }

    /// Arguments with a line break are refused for every server, unsent.
    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        let snap = client.snapshot();
        if self.args.iter().any(|&b| b == b'\r' || b == b'\n') {
            let e = || Error::BadKey("stats arguments contain a line break".into());
            return snap
                .topo
                .addresses()
                .into_iter()
                .map(|a| (a, Err(e())))
                .collect();
        }
        client.perform(&snap, self, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::sink::Sink;
    use crate::error::Error;

    #[test]
    fn stats_collects_lines_per_server() {
        let mut sink = StatsSink::new(2);
        let stat = Reply::Stat {
            name: b"pid",
            value: b"1",
        };
        assert!(!sink.reply(ReplyKind::Stats, &[1], &mut 0, stat).unwrap());
        assert!(sink
            .reply(ReplyKind::Stats, &[1], &mut 0, Reply::End)
            .unwrap());
        sink.fail(&[0], &Error::Timeout);
        let out = sink.finish();
        assert_eq!(out[0], Err(Error::Timeout));
        assert_eq!(out[1], Ok(vec![(b"pid".to_vec(), b"1".to_vec())]));
    }

    #[test]
    fn an_unknown_stats_group_fails_the_request_not_the_stream() {
        let mut sink = StatsSink::new(1);
        let r = sink.reply(ReplyKind::Stats, &[0], &mut 0, Reply::NotFound);
        assert!(matches!(&r, Err(e) if e.is_resumable()), "{r:?}");
    }

    #[test]
    fn a_stats_reply_has_a_bounded_number_of_lines() {
        let mut sink = StatsSink::new(1);
        let stat = || Reply::Stat {
            name: b"pid",
            value: b"1",
        };
        for _ in 0..MAX_STAT_LINES {
            assert!(!sink.reply(ReplyKind::Stats, &[0], &mut 0, stat()).unwrap());
        }
        let r = sink.reply(ReplyKind::Stats, &[0], &mut 0, stat());
        assert!(matches!(r, Err(Error::Protocol(_))), "{r:?}");
        // And of bytes: a few long lines are refused as well.
        let mut sink = StatsSink::new(1);
        let long = vec![b'x'; 8000];
        let mut refused = false;
        for _ in 0..MAX_STAT_BYTES / 8000 + 1 {
            let line = Reply::Stat {
                name: b"n",
                value: &long,
            };
            refused |= sink.reply(ReplyKind::Stats, &[0], &mut 0, line).is_err();
        }
        assert!(refused);
    }
}
