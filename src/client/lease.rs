//! Single meta commands answered in full, for leases, early recache and invalidation (`mg`
//! with `N`/`R`, `md` with `I`/`C`): each key's command goes to its server and its whole answer
//! comes back as a `MetaOutcome`. Whether a server speaks the meta protocol is learned first
//! (`probe`), so a server without it fails its keys with `NotSupported` and never sees a meta
//! command; binary connections cannot carry one at all.
//!
//! Uses the plan, `LineSink`, `execute` and `probe`; `protocol::meta` encoders. No I/O of its
//! own besides the probe's.

use std::time::Instant;

use super::plan::plan;
use super::sink::{unexpected, LineSink};
use super::snapshot::Snapshot;
use super::{Client, MetaOutcome};
use crate::error::{Error, Result};
use crate::metrics::Family;
use crate::protocol::{meta, Reply, ReplyKind};
use crate::server::{MetaSupport, Probe};

/// About how many bytes a meta command takes besides its key and flags.
const REQUEST_BYTES: usize = 8;

impl Client {
    /// Send `<verb> <key> <flags>` (`mg` or `md`, no data block, no `q`) for each key and return
    /// each whole answer. `NotSupported` for a key whose server does not speak the meta
    /// protocol, and for every key when the client speaks the binary protocol.
    pub fn meta_command(
        &self,
        verb: &[u8],
        keys: &[&[u8]],
        flags: &[u8],
    ) -> Vec<Result<MetaOutcome>> {
        let snap = self.snapshot();
        if snap.behaviors.binary {
            return keys.iter().map(|_| Err(no_meta())).collect();
        }
        self.learn_meta_support(&snap);
        let per_key = REQUEST_BYTES + flags.len();
        let mut unsupported = Vec::new();
        let mut p = plan(
            &snap,
            snap.topo.servers.len(),
            keys,
            false,
            per_key,
            |b, i, w| {
                let no = snap
                    .topo
                    .servers
                    .get(b.server)
                    .map_or(true, |s| s.meta_support() == MetaSupport::No);
                if no {
                    unsupported.push((i, no_meta()));
                } else {
                    meta::encode_command(&mut b.wbuf, verb, w, flags);
                    b.push_req(ReplyKind::MetaCmd, i);
                }
            },
        );
        p.rejected.append(&mut unsupported);
        let sink = LineSink::new(keys.len(), meta_outcome, None);
        // A read (`mg`) may be replayed on a fresh connection; `md` may not.
        let replay_safe = verb == b"mg";
        let family = if replay_safe {
            Family::Get
        } else {
            Family::Delete
        };
        let sink = self.execute(&snap, family, p.batches, p.rejected, sink, replay_safe);
        sink.out
            .finish()
            .into_iter()
            .map(|r| match r {
                // A server that answers ERROR to a meta command does not speak it.
                Err(Error::UnknownCommand) => Err(no_meta()),
                r => r,
            })
            .collect()
    }

    /// Whether each server speaks the meta protocol, for the servers not yet known: asked on a
    /// connection of its own (see `probe`). A server that cannot be reached stays unknown; its
    /// keys fail as any request to it would.
    fn learn_meta_support(&self, snap: &Snapshot) {
        for s in &snap.topo.servers {
            if s.meta_support() != MetaSupport::Unknown || s.check_health(Instant::now()).is_err() {
                continue;
            }
            if let Ok((conn, _)) = s.checkout(&snap.opts, Probe::UnlessAnswered(Instant::now())) {
                if let Some(conn) = self.probe_meta(s, conn) {
                    s.checkin(conn);
                }
            }
        }
    }
}

/// The error of a meta command that cannot be sent.
fn no_meta() -> Error {
    Error::NotSupported("the server does not speak the meta protocol".into())
}

fn meta_outcome(r: Reply<'_>) -> Result<MetaOutcome> {
    match r {
        Reply::MetaResult { code, flags, data } => Ok(MetaOutcome {
            code,
            flags: flags.to_vec(),
            data: data.map(owned).transpose()?,
        }),
        _ => Err(unexpected()),
    }
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
        let out = meta_outcome(r).unwrap();
        assert_eq!(out.code, *b"VA");
        assert_eq!(out.data.as_deref(), Some(&b"ab"[..]));
        assert_eq!((out.number(b'f'), out.number(b'c')), (Some(16), Some(9)));
        assert_eq!((out.flag(b'W'), out.flag(b'Z')), (Some(&b""[..]), None));
        assert_eq!(out.number(b'W'), None);
        assert!(meta_outcome(Reply::Stored).is_err());
        assert!(matches!(no_meta(), Error::NotSupported(_)));
    }
}
