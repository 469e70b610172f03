//! A lone request of one key, as a family says it (`Lone`): its key, its text request, how its
//! one reply reads, what it counts; and what a lone `noreply` write reports (`Forgets`). The
//! drivers of these requests are `drive::lone` and `drive::noreply`; nothing here does I/O.

use super::{Args, Operation, REQUEST_BYTES};
use crate::client::sink::Tally;
use crate::client::snapshot::Snapshot;
use crate::error::Result;
use crate::metrics::ServerMetrics;
use crate::protocol::ReplyKind;

/// A family whose lone request of one key skips the plan (`drive::lone`): its text request
/// encoded whole into the connection's buffer and sent on a pooled connection, and its one reply
/// read by the family itself (`answer`) when it is whole after one read. What the short path
/// does not take, the family's sink reads as the general path's would. Get, store, delete,
/// incr/decr and touch; their `call` is `Client::call_lone` (or `call_forgetting`). The driver
/// knows nothing of a family but this.
pub(in crate::client) trait Lone: Operation {
    /// The kind of its one reply (what the general path's batch expects when it goes on).
    const KIND: ReplyKind;
    /// The outcome of its one key (a single-key method returns it, without a list around it).
    type One;
    /// The one key of `args` when the call is a lone request that waits for its reply and the
    /// short path can carry it; `None` otherwise.
    fn lone_key<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]>;
    /// Whether its key is checked as `verify_keys` says (libmemcached's touch never does).
    fn verifies_keys(&self, snap: &Snapshot) -> bool {
        snap.behaviors.verify_keys
    }
    /// About how many bytes its request takes besides the key.
    fn request_size(&self, _args: Args<'_, '_>) -> usize {
        REQUEST_BYTES
    }
    /// Its text request for `args` (one key) to wire key `w`, appended to `buf`; with
    /// `noreply`, the request the server does not answer (`Forgets`).
    fn encode_lone(
        &self,
        snap: &Snapshot,
        args: Args<'_, '_>,
        buf: &mut Vec<u8>,
        w: &[u8],
        noreply: bool,
    );
    /// The outcome of the one reply at the start of `buf`, and the bytes it takes, when that
    /// reply is whole and plain (a value for `wire` within `max_value`, a status line); `None`
    /// for anything else (more to read, an error line), which its sink then reads.
    fn answer(&self, buf: &[u8], wire: &[u8], max_value: usize) -> Option<(Self::One, usize)>;
    /// Count the outcome in the server's metrics (as the sink's `tally` would).
    fn tally_lone(one: &Self::One, m: &ServerMetrics);
    /// The call's outcome, of its one key's.
    fn output(one: Self::One) -> Self::Output;
    /// The one key's outcome, of the call's.
    fn first(out: Self::Output) -> Option<Self::One>;
}

/// A family whose lone `noreply` write of one key is one `send` and little else
/// (`drive::noreply`): its `Lone` request, unanswered. Store, delete and touch; their `call` is
/// `Client::call_forgetting`.
pub(in crate::client) trait Forgets:
    Lone<Output = Vec<Result<Self::Ok>>, One = Result<Self::Ok>>
{
    /// What the write reports (and counts in the metrics) once sent.
    type Ok: Clone + Tally;
    /// What it reports.
    const OK: Self::Ok;
    /// The one key of `args` when the call is a lone `noreply` write; `None` otherwise.
    fn lone_noreply<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Option<&'k [u8]>;
}

/// The outcome of one reply line read by a `LineMap` (a store's, a delete's, incr's, touch's):
/// the line alone, whole and of the family's kind; `None` for an error line or anything the
/// map refuses (the general path's sink then reads it).
pub(super) fn line_answer<T, M: crate::client::sink::LineMap<T>>(
    kind: crate::protocol::ReplyKind,
    mut map: M,
    buf: &[u8],
) -> Option<(Result<T>, usize)> {
    use crate::protocol::{parse_text_reply, text, Parsed, Reply};
    // The usual word (`STORED`, `DELETED`, `NOT_FOUND`...) before the parser's dispatch.
    if let Some(Parsed::Done(r, used)) = text::common_status(kind, buf) {
        return map.map(r).ok().map(|v| (Ok(v), used));
    }
    match parse_text_reply(kind, buf) {
        Ok(Parsed::Done(Reply::Failed(_), _)) => None,
        Ok(Parsed::Done(r, used)) => map.map(r).ok().map(|v| (Ok(v), used)),
        _ => None,
    }
}

/// `Lone`'s `type One`, `tally_lone`, `output` and `first` for a family whose outcome is one
/// `Result<$t>` per key, each counting for itself.
macro_rules! lone_per_key {
    ($t:ty) => {
        type One = $crate::error::Result<$t>;
        fn tally_lone(one: &Self::One, m: &$crate::metrics::ServerMetrics) {
            if let Ok(v) = one {
                $crate::client::sink::Tally::tally(v, m);
            }
        }
        fn output(one: Self::One) -> Self::Output {
            vec![one]
        }
        fn first(mut out: Self::Output) -> Option<Self::One> {
            out.pop()
        }
    };
}
pub(super) use lone_per_key;
