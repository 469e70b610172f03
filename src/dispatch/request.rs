//! What the dispatcher carries: requests with owned keys and values (`Keys`, `Items`), and their
//! outcomes: the core client's `Outcome`, the same whether a worker or the loop's thread ran
//! the request. No threads, no I/O. Uses `client` and `protocol` (`StoreCmd`, `StoreItem`).

use crate::client::{Client, StoreItem};
pub use crate::client::{Keys, Outcome};
use crate::protocol::StoreCmd;

/// Storage items with their values in one buffer.
#[derive(Clone, Debug, Default)]
pub struct Items {
    keys: Keys,
    data: Vec<u8>,
    /// flags, exptime, cas and where the value ends in `data`.
    meta: Vec<(u32, u32, u64, usize)>,
}

impl Items {
    /// Room for `n` items whose keys take `key_bytes` and values `bytes` in all.
    pub fn with_capacity(n: usize, key_bytes: usize, bytes: usize) -> Items {
        Items {
            keys: Keys::with_capacity(n, key_bytes),
            data: Vec::with_capacity(bytes),
            meta: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, item: &StoreItem<'_>) {
        self.keys.push(item.key);
        self.data.extend_from_slice(item.data);
        self.meta
            .push((item.flags, item.exptime, item.cas, self.data.len()));
    }

    pub fn len(&self) -> usize {
        self.meta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    pub fn get(&self, i: usize) -> StoreItem<'_> {
        let start = if i == 0 { 0 } else { self.meta[i - 1].3 };
        let (flags, exptime, cas, end) = self.meta[i];
        StoreItem {
            key: self.keys.get(i),
            flags,
            exptime,
            data: &self.data[start..end],
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
