//! What the dispatcher carries: requests with owned keys and values (`Keys`, `Items`), and their
//! outcomes: the core client's `Outcome`, the same whether a worker or the loop's thread ran
//! the request. No threads, no I/O. Uses `client` and `protocol` (`StoreCmd`, `StoreItem`).

use crate::client::{Client, StoreItem};
pub use crate::client::{Keys, Outcome};
use crate::protocol::StoreCmd;

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

use crate::client::{spare_keep, spare_take, Reusable, Spares};

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

/// One operation, as the blocking client's methods take it.
#[derive(Clone, Debug)]
pub enum Request {
    Get {
        keys: Keys,
        cas: bool,
    },
    Store {
        cmd: StoreCmd,
        items: Items,
        noreply: bool,
    },
    Delete {
        keys: Keys,
        noreply: bool,
    },
    Arith {
        incr: bool,
        keys: Keys,
        delta: u64,
    },
    Touch {
        keys: Keys,
        exptime: u32,
        noreply: bool,
    },
    Flush {
        delay: u32,
    },
    Stats {
        args: Vec<u8>,
    },
    /// A meta command (`mg`, `md`) with the same flags for every key.
    Meta {
        verb: Vec<u8>,
        keys: Keys,
        flags: Vec<u8>,
    },
    /// get-and-touch.
    Gat {
        keys: Keys,
        exptime: u32,
    },
}

impl Request {
    /// The keys it names (none for the whole-client commands).
    pub fn keys(&self) -> Option<&Keys> {
        match self {
            Request::Get { keys, .. }
            | Request::Delete { keys, .. }
            | Request::Arith { keys, .. }
            | Request::Touch { keys, .. }
            | Request::Meta { keys, .. }
            | Request::Gat { keys, .. } => Some(keys),
            Request::Store { items, .. } => Some(items.keys()),
            Request::Flush { .. } | Request::Stats { .. } => None,
        }
    }

    /// Run it on the blocking client (the worker's thread).
    pub(super) fn execute(&self, client: &Client) -> Outcome {
        match self {
            Request::Get { keys, cas } => Outcome::Fetched(client.get_multi(&keys.refs(), *cas)),
            Request::Store {
                cmd,
                items,
                noreply,
            } => Outcome::Stored(client.store_multi(*cmd, &items.all(), *noreply)),
            Request::Delete { keys, noreply } => {
                Outcome::Found(client.delete_multi(&keys.refs(), *noreply))
            }
            Request::Arith { incr, keys, delta } => {
                Outcome::Numbers(client.arith_multi(*incr, &keys.refs(), *delta))
            }
            Request::Touch {
                keys,
                exptime,
                noreply,
            } => Outcome::Found(client.touch_multi(&keys.refs(), *exptime, *noreply)),
            Request::Flush { delay } => Outcome::Flushed(client.flush_all(*delay)),
            Request::Stats { args } => Outcome::Stats(client.stats(args)),
            Request::Meta { verb, keys, flags } => {
                Outcome::Meta(client.meta_command(verb, &keys.refs(), flags))
            }
            Request::Gat { keys, exptime } => {
                Outcome::Fetched(client.gat_multi(&keys.refs(), *exptime))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Items;
    use crate::client::StoreItem;

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
