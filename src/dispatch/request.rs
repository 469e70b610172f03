//! What the dispatcher carries: a request is an operation (`client::Op`) with owned keys or
//! values (`Keys`, `Items`); its outcome is the core client's `Outcome`, the same whether a
//! worker or the loop's thread ran the request. No threads, no I/O. Uses `client` and
//! `protocol` (`StoreItem`).

use std::sync::Arc;

use crate::client::keys::Keys;
use crate::client::op::{Args, Op, Outcome};
use crate::client::pin;
use crate::client::Client;
use crate::protocol::StoreItem;

/// Storage items with their values in one buffer. When dropped, its buffers are kept for the
/// next `Items` made on the same thread (`SPARE`), as `Keys` keeps its own: a large request's
/// buffers, allocated and freed per call, would otherwise be given back to the system by the
/// allocator and faulted in again page by page (a 10,000-item `set_multi` spent a quarter of
/// its time there).
#[derive(Clone, Debug, Default)]
pub struct Items {
    keys: Keys,
    bufs: Bufs,
}

#[derive(Clone, Debug, Default)]
struct Bufs {
    data: Vec<u8>,
    /// flags, exptime, cas and where the value ends in `data`.
    meta: Vec<(u32, u32, u64, usize)>,
}

use crate::client::keys::spare_keep;

use crate::client::keys::spare_take;

use crate::client::keys::Reusable;

use crate::client::keys::Spares;

thread_local! {
    static SPARE: Spares<Bufs> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Reusable for Bufs {
    fn capacity(&self) -> usize {
        self.data.capacity() + self.meta.capacity() * std::mem::size_of::<(u32, u32, u64, usize)>()
    }

    fn clear(&mut self) {
        self.data.clear();
        self.meta.clear();
    }
}

impl Drop for Items {
    fn drop(&mut self) {
        spare_keep(&SPARE, 1, std::mem::take(&mut self.bufs));
    }
}

impl Items {
    /// Room for `n` items whose keys take `key_bytes` and values `bytes` in all.
    pub fn with_capacity(n: usize, key_bytes: usize, bytes: usize) -> Items {
        let mut bufs: Bufs = spare_take(&SPARE);
        bufs.data.reserve(bytes);
        bufs.meta.reserve(n);
        Items {
            keys: Keys::with_capacity(n, key_bytes),
            bufs,
        }
    }

    /// A copy of `items`, in one buffer.
    pub fn of(items: &[StoreItem<'_>]) -> Items {
        let key_bytes = items.iter().map(|it| it.key.len()).sum();
        let bytes = items.iter().map(|it| it.data.len()).sum();
        let mut out = Items::with_capacity(items.len(), key_bytes, bytes);
        for it in items {
            out.push(it);
        }
        out
    }

    pub fn push(&mut self, item: &StoreItem<'_>) {
        self.keys.push(item.key);
        let b = &mut self.bufs;
        b.data.extend_from_slice(item.data);
        b.meta
            .push((item.flags, item.exptime, item.cas, b.data.len()));
    }

    pub fn len(&self) -> usize {
        self.bufs.meta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bufs.meta.is_empty()
    }

    pub fn get(&self, i: usize) -> StoreItem<'_> {
        let b = &self.bufs;
        let start = if i == 0 { 0 } else { b.meta[i - 1].3 };
        let (flags, exptime, cas, end) = b.meta[i];
        StoreItem {
            key: self.keys.get(i),
            flags,
            exptime,
            data: &b.data[start..end],
            cas,
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Every item, as the blocking client's `store_multi` takes them.
    pub fn all(&self) -> Vec<StoreItem<'_>> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}

/// One operation and what it is applied to.
#[derive(Clone, Debug)]
pub struct Request {
    pub op: Op,
    args: Owned,
    /// The group key its keys are placed by (`server_key=`), pinned on the thread that made it
    /// (`client::pin`), pinned again where it runs.
    pub route: Option<Arc<[u8]>>,
}

/// A request's own copy of its arguments (see `client::Args`).
#[derive(Clone, Debug)]
enum Owned {
    /// A whole-client command.
    None,
    Keys(Keys),
    /// An operation that sends values (a store).
    Items(Items),
}

impl Request {
    /// `op` on `keys`.
    pub fn new(op: impl Into<Op>, keys: Keys) -> Request {
        Request {
            op: op.into(),
            args: Owned::Keys(keys),
            route: pin::current(),
        }
    }

    /// `op` sending `items` (a store).
    pub fn items(op: impl Into<Op>, items: Items) -> Request {
        Request {
            op: op.into(),
            args: Owned::Items(items),
            route: pin::current(),
        }
    }

    /// A whole-client command (flush, stats).
    pub fn whole(op: impl Into<Op>) -> Request {
        Request {
            op: op.into(),
            args: Owned::None,
            route: pin::current(),
        }
    }

    /// The keys it names (none for the whole-client commands).
    pub fn keys(&self) -> Option<&Keys> {
        match &self.args {
            Owned::Keys(keys) => Some(keys),
            Owned::Items(items) => Some(items.keys()),
            Owned::None => None,
        }
    }

    /// Call `f` with the request's arguments as the core takes them.
    pub fn with_args<R>(&self, f: impl FnOnce(Args<'_, '_>) -> R) -> R {
        match &self.args {
            Owned::Keys(keys) => f(Args::keys(&keys.refs())),
            Owned::Items(items) => f(Args::items(&items.all())),
            Owned::None => f(Args::default()),
        }
    }

    /// Run it on the blocking client (the worker's thread).
    pub(super) fn execute(&self, client: &Client) -> Outcome {
        let _pin = pin::pin_if_needed(&self.route);
        self.with_args(|args| self.op.call(client, args))
    }
}

/// Run requests of one operation (equal `Op`s) as one blocking call: their arguments
/// concatenated; each one's outcome, in order.
pub(super) fn execute_merged(client: &Client, reqs: &[Request]) -> Vec<Outcome> {
    let Some(first) = reqs.first() else {
        return Vec::new();
    };
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut items: Vec<StoreItem<'_>> = Vec::new();
    let mut lens = Vec::with_capacity(reqs.len());
    for r in reqs {
        match &r.args {
            Owned::Keys(k) => {
                keys.extend((0..k.len()).map(|i| k.get(i)));
                lens.push(k.len());
            }
            Owned::Items(it) => {
                items.extend((0..it.len()).map(|i| it.get(i)));
                lens.push(it.len());
            }
            Owned::None => lens.push(0),
        }
    }
    let args = Args {
        keys: &keys,
        items: &items,
    };
    first.op.call_merged(client, args, &lens)
}

#[cfg(test)]
mod tests {
    use super::Items;
    use crate::protocol::StoreItem;

    fn item<'a>(key: &'a [u8], data: &'a [u8]) -> StoreItem<'a> {
        StoreItem {
            key,
            flags: 3,
            exptime: 7,
            data,
            cas: 0,
        }
    }

    #[test]
    fn a_dropped_items_buffers_serve_the_next_items_empty() {
        let mut items = Items::with_capacity(2, 4, 8);
        items.push(&item(b"ab", b"value"));
        items.push(&item(b"cd", b"v2"));
        assert_eq!(items.get(1).data, b"v2");
        let at = items.bufs.data.as_ptr();
        drop(items);
        let mut next = Items::with_capacity(1, 1, 1);
        assert!(next.is_empty());
        assert_eq!(next.bufs.data.as_ptr(), at);
        next.push(&item(b"k", b"x"));
        let got = next.get(0);
        assert_eq!(
            (got.key, got.data, got.flags, got.exptime),
            (&b"k"[..], &b"x"[..], 3, 7)
        );
        assert_eq!(next.len(), 1);
    }
}
