//! A meta command answered in full, for leases, early recache and invalidation (`mg` with
//! `N`/`R`, `md` with `I`/`C`): each key's command goes to its server and its whole answer comes
//! back as a `MetaOutcome`. Whether a server speaks the meta protocol is learned first
//! (`probe`), so a server without it fails its keys with `NotSupported` and never sees a meta
//! command; binary connections cannot carry one at all.
//!
//! Uses the plan, `LineSink` and `probe`; `protocol::meta` encoders. No I/O of its own besides
//! the probe's.

use crate::clock::Tick;

use super::{Access, Args, Operation};
use crate::client::plan::{plan, Plan};
use crate::client::probe::probe_meta;
use crate::client::results::MetaOutcome;
use crate::client::sink::{unexpected, LineMap, LineSink, WireKeys};
use crate::client::snapshot::Snapshot;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::protocol::{meta, Reply, ReplyKind};
use crate::server::{MetaSupport, Peek};

/// About how many bytes a meta command takes besides its key and flags.
const COMMAND_BYTES: usize = 8;

/// The meta commands sent whole, and what each is, as data: a new verb is a variant and a row
/// of `MetaVerb::row`, and the compiler asks for the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaVerb {
    /// `mg`: a lease read.
    Get,
    /// `md`: a lease release or an invalidation.
    Delete,
    /// `me`: what the server knows of an item (`Client.debug`), for operators.
    Debug,
}

/// What a meta verb is: its two letters, the family its requests are counted in, whether a
/// stalled one may be sent again on a fresh connection, and whether it changes an item.
struct VerbRow {
    wire: [u8; 2],
    family: Family,
    replay_safe: bool,
    writes: bool,
}

impl MetaVerb {
    /// Every verb (the fake's test asks each of it: `client/fake_tests.rs`).
    pub const ALL: [MetaVerb; 3] = [MetaVerb::Get, MetaVerb::Delete, MetaVerb::Debug];

    const fn row(self) -> VerbRow {
        match self {
            // A lease read reads: what a miss leaves, a placeholder that hands the lease to one
            // caller, is the same whichever of several lease reads reaches the server first.
            MetaVerb::Get => VerbRow {
                wire: *b"mg",
                family: Family::Get,
                replay_safe: true,
                writes: false,
            },
            MetaVerb::Delete => VerbRow {
                wire: *b"md",
                family: Family::Delete,
                replay_safe: false,
                writes: true,
            },
            MetaVerb::Debug => VerbRow {
                wire: *b"me",
                family: Family::Admin,
                replay_safe: true,
                writes: false,
            },
        }
    }
}

/// `<verb> <key> <flags>` for each key (no data block, no `q`), the same flags for every key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub verb: MetaVerb,
    /// (Boxed: an `Op` stays small, and so does every request that carries one.)
    pub flags: Box<[u8]>,
}

/// A meta command's whole answer.
#[derive(Clone, Copy)]
pub(in crate::client) struct MetaReply;

impl LineMap<MetaOutcome> for MetaReply {
    fn map(&mut self, r: Reply<'_>) -> Result<MetaOutcome> {
        match r {
            Reply::MetaResult { code, flags, data } => Ok(MetaOutcome {
                code,
                flags: flags.to_vec(),
                data: data.map(owned).transpose()?,
            }),
            _ => Err(unexpected()),
        }
    }
}

impl Operation for Meta {
    type Sink<W: WireKeys> = LineSink<MetaOutcome, MetaReply>;
    type Output = Vec<Result<MetaOutcome>>;

    fn family(&self) -> Family {
        self.verb.row().family
    }
    fn replay_safe(&self) -> bool {
        self.verb.row().replay_safe
    }
    fn access(&self) -> Access {
        if self.verb.row().writes {
            Access::Write
        } else {
            Access::Read
        }
    }

    fn plan<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Plan<'k> {
        let per_key = COMMAND_BYTES + self.flags.len();
        let mut unsupported = Vec::new();
        let n = snap.topo.servers.len();
        let mut p = plan(snap, n, args.keys, false, per_key, |b, i, w| {
            let no = snap
                .topo
                .servers
                .get(b.server)
                .map_or(true, |s| s.meta_support() == MetaSupport::No);
            if no {
                unsupported.push((i, no_meta()));
            } else {
                meta::encode_command(&mut b.wbuf, &self.verb.row().wire, w, &self.flags);
                b.push_req(ReplyKind::MetaCmd, i);
            }
        });
        p.rejected.append(&mut unsupported);
        p
    }

    fn sink<W: WireKeys>(&self, _: &Snapshot, _: W, args: Args<'_, '_>) -> Self::Sink<W> {
        LineSink::new(args.keys.len(), MetaReply, None)
    }

    /// A server that answers ERROR to a meta command does not speak it.
    fn settle<W: WireKeys>(
        &self,
        _: &Client,
        _: &Snapshot,
        sink: Self::Sink<W>,
        _: Args<'_, '_>,
    ) -> Self::Output {
        sink.out
            .finish()
            .into_iter()
            .map(|r| match r {
                Err(Error::UnknownCommand) => Err(no_meta()),
                r => r,
            })
            .collect()
    }

    /// `NotSupported` for a key whose server does not speak the meta protocol, and for every
    /// key when the client speaks the binary protocol.
    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        let snap = client.snapshot();
        if snap.behaviors.binary {
            return args.keys.iter().map(|_| Err(no_meta())).collect();
        }
        learn_meta_support(&snap);
        client.perform(&snap, self, args)
    }
}

/// Whether each server speaks the meta protocol, for the servers not yet known: asked on a
/// connection of its own (see `probe`). A server that cannot be reached stays unknown; its keys
/// fail as any request to it would.
pub(in crate::client) fn learn_meta_support(snap: &Snapshot) {
    for s in &snap.topo.servers {
        if s.meta_support() != MetaSupport::Unknown || s.check_health().is_err() {
            continue;
        }
        if let Ok((conn, _)) = s.checkout(&snap.opts, Peek::UnlessAnswered(Tick::now())) {
            if let Some(conn) = probe_meta(s, conn) {
                s.checkin(conn);
            }
        }
    }
}

/// The error of a meta command that cannot be sent.
fn no_meta() -> Error {
    Error::NotSupported("the server does not speak the meta protocol".into())
}

/// A copy of a value the server sent: its size is the server's, so room is asked for.
fn owned(data: &[u8]) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(data.len())?;
    v.extend_from_slice(data);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_keep_code_flags_and_value() {
        let r = Reply::MetaResult {
            code: *b"VA",
            flags: b"f16 c9 W",
            data: Some(b"ab"),
        };
        let out = MetaReply.map(r).unwrap();
        assert_eq!(out.code, *b"VA");
        assert_eq!(out.data.as_deref(), Some(&b"ab"[..]));
        assert_eq!((out.number(b'f'), out.number(b'c')), (Some(16), Some(9)));
        assert_eq!((out.flag(b'W'), out.flag(b'Z')), (Some(&b""[..]), None));
        assert_eq!(out.number(b'W'), None);
        assert!(MetaReply.map(Reply::Stored).is_err());
        assert!(matches!(no_meta(), Error::NotSupported(_)));
    }

    #[test]
    fn a_read_is_replayed_and_counted_as_a_get() {
        let mg = Meta {
            verb: MetaVerb::Get,
            flags: Box::default(),
        };
        let md = Meta {
            verb: MetaVerb::Delete,
            ..mg.clone()
        };
        assert!(mg.replay_safe() && !md.replay_safe());
        assert_eq!((mg.family(), md.family()), (Family::Get, Family::Delete));
    }
}
