//! An operation is one type. Each family has a file of its own: `get` (get, gets, gat), `store`,
//! `delete`, `arith`, `touch`, `meta` (a meta command answered in full) and `admin` (flush_all,
//! stats). Each implements `Operation`: how it plans its keys into server batches, the sink its
//! replies go to, the metrics family it counts in, whether it may be replayed, and how its
//! outcome settles (a read-back after an ambiguous quiet write). Every driver drives that one
//! type: the blocking call (`Operation::call`, `Client::perform`), the event loop's selector
//! (`Client::begin`, in `drive::selector`) and the worker pool (`dispatch`, which carries an
//! `Op` and merges requests of equal `Op`s into one call).
//!
//! `Op` and `Outcome` are the enums of them, one variant per file, made by the `operations!`
//! table at the end of this file (and nothing else matches on an operation's kind). The
//! blocking methods of `Client` (`client::calls`) are one line each.
//!
//! Uses the plan, the sinks and the drivers. No I/O of its own.

pub mod admin;
pub mod arith;
pub mod delete;
pub mod get;
pub mod lone;
pub mod meta;
pub mod store;
pub mod touch;

use super::keys::Keys;
use super::plan::{Closing, Plan, WriteModes};
use super::replicas;
use super::sink::{Sink, WireKeys};
use super::snapshot::Snapshot;
use super::{Client, Fetched, MetaOutcome, Stats, StoreStatus};
use crate::connection::connect::Address;
use crate::error::Result;
use crate::metrics::Family;
use crate::protocol::{ReplyKind, StoreItem};

/// About how many bytes a delete, incr/decr or touch request takes besides its key (the binary
/// header is 24 bytes, `incr <key> <20 digits> noreply\r\n` 36, `touch <key> <10 digits>
/// noreply\r\n` 26); also what the `noreply` driver counts for one.
pub(in crate::client) const REQUEST_BYTES: usize = 40;

/// What an operation is applied to: the keys it names, or the items a store sends (a store's
/// keys are its items'). Whole-client commands take neither.
#[derive(Clone, Copy, Default)]
pub struct Args<'a, 'k> {
    pub keys: &'a [&'k [u8]],
    pub items: &'a [StoreItem<'k>],
}

impl<'a, 'k> Args<'a, 'k> {
    pub fn keys(keys: &'a [&'k [u8]]) -> Self {
        Args { keys, items: &[] }
    }

    pub fn items(items: &'a [StoreItem<'k>]) -> Self {
        Args { keys: &[], items }
    }

    /// How many keys it names (a store's: its items').
    pub fn count(&self) -> usize {
        self.keys.len().max(self.items.len())
    }

    /// Key `i` (a store's: its item's key).
    pub fn key(&self, i: usize) -> Option<&'k [u8]> {
        match self.keys.get(i) {
            Some(&k) => Some(k),
            None => self.items.get(i).map(|it| it.key),
        }
    }

    /// The keys (or items) `at..end` alone.
    pub fn piece(&self, at: usize, end: usize) -> Self {
        Args {
            keys: self.keys.get(at..end).unwrap_or(&[]),
            items: self.items.get(at..end).unwrap_or(&[]),
        }
    }
}

/// One operation family: its parameters (the type itself: `get::Get { cas, touch }`, ...) and
/// everything the drivers ask of it.
pub(super) trait Operation: Clone {
    /// Where its replies go; `W` holds the wire keys a fetch matches hits against (borrowed
    /// from the plan by the blocking call, owned by an operation the loop drives).
    type Sink<W: WireKeys>: Sink;
    /// What the blocking method returns.
    type Output: Share;

    /// The metrics family its batches count in.
    fn family(&self) -> Family;
    /// It only reads: a stale pooled connection that failed before any reply byte may replay
    /// it on a new one (a write is replayed only if nothing was sent).
    fn replay_safe(&self) -> bool {
        false
    }
    /// How it is ordered against other requests of its keys (the asyncio client's per-key
    /// order): a write unless it says otherwise.
    fn access(&self) -> Access {
        Access::Write
    }
    /// Requests of equal parameters may run as one call (the worker pool's batches).
    fn merges(&self) -> bool {
        true
    }
    /// Two requests of one key must not share a call (a store's read-back compares what the
    /// server holds with what was sent, once per key).
    fn keys_apart(&self) -> bool {
        false
    }
    /// The blocking call may plan and send it in pieces, each on its way while the next is
    /// encoded (`Client::perform_streamed`). Only for an operation whose sink ignores the
    /// wire keys and whose batches may be appended to (text protocol, no replica writes).
    fn streams(&self, _snap: &Snapshot) -> bool {
        false
    }
    /// An event loop's thread may drive it (`Client::begin`): it waits for its replies, and
    /// settles without I/O of its own (a read-back is left to the blocking driver).
    fn on_loop(&self, _snap: &Snapshot) -> bool {
        false
    }

    /// Its keys validated, routed and encoded into server batches.
    fn plan<'k>(&self, snap: &Snapshot, args: Args<'_, 'k>) -> Plan<'k>;
    /// The sink for its replies.
    fn sink<W: WireKeys>(&self, snap: &Snapshot, wire: W, args: Args<'_, '_>) -> Self::Sink<W>;
    /// Whether settling needs I/O (`settle` then runs on the blocking driver's thread, never on
    /// an event loop's): a read-back after an ambiguous reply.
    fn settles_with_io<W: WireKeys>(&self, _snap: &Snapshot, sink: &Self::Sink<W>) -> bool {
        sink.needs_read_back()
    }
    /// The outcome, once every batch is finished (a read-back if a quiet write was ambiguous).
    fn settle<W: WireKeys>(
        &self,
        client: &Client,
        snap: &Snapshot,
        sink: Self::Sink<W>,
        args: Args<'_, '_>,
    ) -> Self::Output;

    /// The blocking call (a family may try a shorter path first: a lone `noreply` write).
    fn call(&self, client: &Client, args: Args<'_, '_>) -> Self::Output {
        client.perform(&client.snapshot(), self, args)
    }
    /// Several requests' arguments run as one call (`lens`: how many keys each gave, in
    /// order); each request's share of the outcome.
    fn call_merged(
        &self,
        client: &Client,
        args: Args<'_, '_>,
        lens: &[usize],
    ) -> Vec<Self::Output> {
        self.call(client, args).share(lens)
    }
}

/// Something a driver does with an operation of any family (`Op::visit`): its generic code,
/// given the family's type and how that family's `Pending` is made.
pub(in crate::client) trait Visit {
    type Out;
    fn visit<O: Operation>(self, op: &O, pending: fn(O, O::Sink<Keys>) -> Pending) -> Self::Out;
}

/// An outcome split into consecutive shares (a merged call's, one per request).
pub(super) trait Share: Sized {
    fn share(self, lens: &[usize]) -> Vec<Self>;
}

impl<T> Share for Vec<T> {
    fn share(self, lens: &[usize]) -> Vec<Self> {
        let mut it = self.into_iter();
        lens.iter()
            .map(|&n| it.by_ref().take(n).collect())
            .collect()
    }
}

impl Share for Fetched {
    fn share(self, lens: &[usize]) -> Vec<Self> {
        let mut at = 0u32;
        lens.iter()
            .map(|&n| {
                let idx: Vec<u32> = (at..at + n as u32).collect();
                at += n as u32;
                self.pick(&idx)
            })
            .collect()
    }
}

/// Read back the keys of ambiguous ranges (see `Sink::ambiguous`): for each, whether the
/// server has it now, with its flags and bytes. A key whose read fails is left out (it
/// keeps its error).
fn read_back<'k>(client: &Client, mut idx: Vec<u32>, key: impl Fn(u32) -> &'k [u8]) -> ReadBack {
    if idx.is_empty() {
        return Vec::new();
    }
    idx.sort_unstable();
    idx.dedup();
    let keys: Vec<&[u8]> = idx.iter().map(|&i| key(i)).collect();
    let got = client.get_multi(&keys, false);
    idx.iter()
        .zip(&got.items)
        .filter_map(|(&i, r)| match r {
            Ok(Some(item)) => Some((i, Some((item.flags, got.bytes(item).to_vec())))),
            Ok(None) => Some((i, None)),
            Err(_) => None,
        })
        .collect()
}

/// What a read-back found for a key: its flags and bytes, or `None` when it is not there.
type ReadBack = Vec<(u32, Option<(u32, Vec<u8>)>)>;

/// Whether a store or delete may be planned in pieces (`Operation::streams`): text protocol
/// (binary opaques count from each piece's start) and no replica writes.
fn writes_stream(snap: &Snapshot) -> bool {
    !snap.behaviors.binary && replicas::count(snap) == 0
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

/// How a request is ordered against the other requests of its keys (`py::aio::order`): what
/// it may change, and so what it must not overtake or be overtaken by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// It reads (get, gets, a lease read, stats): it waits for an earlier write of its keys,
    /// and a later write waits for it; reads of one key run side by side.
    Read,
    /// It changes what its keys hold (a store, a delete, incr/decr, a meta delete): it waits
    /// for every earlier request of its keys, and every later one waits for it.
    Write,
    /// It changes its keys the same way as any request of the same tag (what it sets: the
    /// expiry of a touch or a gat). It waits for an earlier write of its keys and
    /// for an earlier such request of another tag, and a later write waits for it; those of
    /// one tag run side by side with each other and with reads (two that set one expiry leave
    /// the key the same whichever reaches the server first).
    Repeatable(u64),
}

impl Access {
    /// A touch's or a gat's: the expiry `exptime` set.
    pub fn expiry(exptime: u32) -> Access {
        Access::Repeatable(u64::from(exptime))
    }

    /// Whether a request of this access and one of `other`, sharing a key, must not pass each
    /// other.
    pub fn conflicts(self, other: Access) -> bool {
        match (self, other) {
            (Access::Write, _) | (_, Access::Write) => true,
            (Access::Repeatable(a), Access::Repeatable(b)) => a != b,
            _ => false,
        }
    }
}

/// An operation of the table below, typed: what its request's outcome holds. A request made
/// of a `K` ends with `K`'s variant of `Outcome`, so `outcome` finds it there (`None` only for
/// an outcome of another operation, which no request of a `K` produces).
pub trait Kind: Into<Op> {
    type Output;
    fn outcome(o: Outcome) -> Option<Self::Output>;
    /// Run it on the blocking client, its outcome typed (what `Op::call` wraps in `Outcome`).
    fn run(&self, client: &Client, args: Args<'_, '_>) -> Self::Output;
}

/// The enums of the operations, from one table: `Op` (an operation and its parameters),
/// `Outcome` (its blocking method's result) and `Pending` (an operation begun on the loop's
/// thread, with its sink), and the one delegation of each to the family's `Operation`.
macro_rules! operations {
    ($($name:ident($ty:ty) -> $out:ty,)*) => {
        /// An operation with its parameters, as the worker pool and the loop's thread carry it
        /// (its keys travel beside it: `dispatch::request::Request`).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Op {
            $($name($ty),)*
        }

        /// What an operation returned: the blocking client's result for the same call (the
        /// asyncio client's requests end with one, whether the workers or the loop's thread
        /// ran them).
        #[derive(Debug)]
        pub enum Outcome {
            $($name($out),)*
        }

        $(impl From<$ty> for Op {
            fn from(op: $ty) -> Op {
                Op::$name(op)
            }
        })*

        $(impl Kind for $ty {
            type Output = $out;
            fn outcome(o: Outcome) -> Option<$out> {
                match o {
                    Outcome::$name(v) => Some(v),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }

            #[inline(always)]
            fn run(&self, client: &Client, args: Args<'_, '_>) -> $out {
                Operation::call(self, client, args)
            }
        })*

        /// An operation begun on the loop's thread and the sink its replies go to.
        pub(in crate::client) enum Pending {
            $($name($ty, <$ty as Operation>::Sink<Keys>),)*
        }

        impl Op {
            /// How it is ordered against other requests of its keys (see `Access`).
            pub fn access(&self) -> Access {
                match self { $(Op::$name(o) => o.access(),)* }
            }

            /// What requests that may share one call have equal (`None`: it runs alone).
            pub fn merge_key(&self) -> Option<&Op> {
                let merges = match self { $(Op::$name(o) => o.merges(),)* };
                merges.then_some(self)
            }

            /// See `Operation::keys_apart`.
            pub fn keys_apart(&self) -> bool {
                match self { $(Op::$name(o) => o.keys_apart(),)* }
            }

            /// Run it on the blocking client.
            pub fn call(&self, client: &Client, args: Args<'_, '_>) -> Outcome {
                match self { $(Op::$name(o) => Outcome::$name(o.call(client, args)),)* }
            }

            /// Run several requests of this operation as one blocking call (`args`: theirs,
            /// concatenated; `lens`: how many each gave); each one's outcome, in order.
            pub fn call_merged(
                &self,
                client: &Client,
                args: Args<'_, '_>,
                lens: &[usize],
            ) -> Vec<Outcome> {
                match self {
                    $(Op::$name(o) => o
                        .call_merged(client, args, lens)
                        .into_iter()
                        .map(Outcome::$name)
                        .collect(),)*
                }
            }

            /// Hand the operation, whatever its family, to `v` (with how its `Pending` is made).
            pub(in crate::client) fn visit<V: Visit>(&self, v: V) -> V::Out {
                match self { $(Op::$name(o) => v.visit(o, Pending::$name),)* }
            }
        }

        impl Pending {
            pub(in crate::client) fn sink(&mut self) -> &mut dyn Sink {
                match self { $(Pending::$name(_, s) => s,)* }
            }

            /// See `Operation::settles_with_io`.
            pub(in crate::client) fn settles_with_io(&self, snap: &Snapshot) -> bool {
                match self { $(Pending::$name(o, s) => o.settles_with_io::<Keys>(snap, s),)* }
            }

            pub(in crate::client) fn settle(
                self,
                client: &Client,
                snap: &Snapshot,
                args: Args<'_, '_>,
            ) -> Outcome {
                match self {
                    $(Pending::$name(o, s) => Outcome::$name(o.settle::<Keys>(client, snap, s, args)),)*
                }
            }
        }
    };
}

operations! {
    Get(get::Get) -> Fetched,
    Store(store::Store) -> Vec<Result<StoreStatus>>,
    Delete(delete::Delete) -> Vec<Result<bool>>,
    Arith(arith::Arith) -> Vec<Result<Option<u64>>>,
    Touch(touch::Touch) -> Vec<Result<bool>>,
    Meta(meta::Meta) -> Vec<Result<MetaOutcome>>,
    Flush(admin::Flush) -> Vec<Result<()>>,
    Stats(admin::Stats) -> Vec<(Address, Result<Stats>)>,
}

#[cfg(test)]
mod tests {
    use super::admin::{Flush, Stats};
    use super::get::Get;
    use super::meta::{Meta, MetaVerb};
    use super::{Access, Op, Share};

    #[test]
    fn a_merged_outcome_is_shared_in_order() {
        let v: Vec<u32> = (0..6).collect();
        assert_eq!(
            v.share(&[2, 0, 3, 1]),
            [vec![0, 1], vec![], vec![2, 3, 4], vec![5]]
        );
    }

    #[test]
    fn what_an_op_says_of_itself() {
        let get = Op::from(Get {
            cas: false,
            touch: None,
        });
        let gat = Op::from(Get {
            cas: false,
            touch: Some(1),
        });
        let mg = Op::from(Meta {
            verb: MetaVerb::Get,
            flags: Box::default(),
        });
        let md = Op::from(Meta {
            verb: MetaVerb::Delete,
            flags: Box::default(),
        });
        assert_eq!(get.access(), Access::Read);
        assert_eq!(gat.access(), Access::expiry(1));
        assert_eq!(
            Op::from(super::touch::Touch {
                exptime: 1,
                noreply: false
            })
            .access(),
            gat.access()
        );
        assert_eq!(mg.access(), Access::Read);
        assert_eq!(md.access(), Access::Write);
        let gat2 = Op::from(Get {
            cas: false,
            touch: Some(2),
        });
        assert!(gat.access().conflicts(gat2.access()) && !gat.access().conflicts(gat.access()));
        assert!(md.access().conflicts(get.access()) && !get.access().conflicts(mg.access()));
        assert_eq!(get.merge_key(), Some(&get));
        assert_eq!(gat.merge_key(), None);
        assert_eq!(Op::from(Flush { delay: 0 }).merge_key(), None);
        let stats = Op::from(Stats {
            args: Box::default(),
        });
        assert!(stats.merge_key().is_none() && stats.access() == Access::Read);
    }
}
