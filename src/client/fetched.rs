//! What a fetch returns (`Fetched`): one outcome per key, the values' bytes together in one
//! buffer (kept for the thread's next fetch, `keys::spare_bytes`), and outcomes copied from one
//! fetch to another (a merged fetch's shares, keys fetched again). Get's sink is finished into
//! it (`op::get::sink`). No I/O.

use smallvec::SmallVec;

use super::keys;
use super::results::Item;
use crate::error::{Error, Result};

/// What a fetch returns: one outcome per key; the values' bytes are kept together in one buffer
/// (one allocation for the batch instead of one per value).
#[derive(Debug, Default)]
pub struct Fetched {
    /// Inline for one key (a single `get` allocates no list).
    pub items: SmallVec<[Result<Option<Item>>; 1]>,
    pub(super) data: Vec<u8>,
    /// Large values that kept the read buffer they arrived in (no copy into `data`), each with
    /// its offset there.
    pub(super) owned: Vec<(Vec<u8>, usize)>,
    /// The thread `data` was taken on.
    pub(super) origin: keys::Origin,
}

/// Its values' buffer is kept for the thread's next fetch (`keys::spare_bytes`), if it is the
/// thread that took it.
impl Drop for Fetched {
    fn drop(&mut self) {
        // (A miss's empty buffer: nothing to keep.)
        if self.data.capacity() > 0 {
            keys::spare_bytes_keep(std::mem::take(&mut self.data), self.origin);
        }
    }
}

impl Fetched {
    /// The outcome of a fetch of one key that missed.
    pub(super) fn miss() -> Fetched {
        let mut f = Fetched::default();
        f.items.push(Ok(None));
        f
    }

    /// The outcome of a fetch of one key that hit, with `flags`, `cas` and `data` (its bytes
    /// copied, room asked for: the server chose their size).
    pub(super) fn hit(flags: u32, cas: Option<u64>, data: &[u8]) -> Result<Fetched> {
        let mut f = Fetched::default();
        (f.data, f.origin) = keys::spare_bytes();
        f.data.try_reserve(data.len())?;
        f.data.extend_from_slice(data);
        f.items.push(Ok(Some(Item::new(flags, cas, 0, data.len()))));
        Ok(f)
    }

    /// The bytes of a value of this batch.
    pub fn bytes(&self, item: &Item) -> &[u8] {
        let (buf, start) = match item.own {
            None => (&self.data, item.start),
            Some(i) => match self.owned.get(i) {
                Some((buf, at)) => (buf, *at),
                None => return &[],
            },
        };
        buf.get(start..start.saturating_add(item.len))
            .unwrap_or_default()
    }

    /// A new `Fetched` with copies of the outcomes at `idx` (a batch's share of a merged fetch).
    pub(crate) fn pick(&self, idx: &[u32]) -> Fetched {
        let mut out = Fetched::default();
        out.items.reserve(idx.len());
        for &i in idx {
            let r = match self.items.get(i as usize) {
                Some(r) => out.copied(self, r),
                None => Err(Error::Protocol("no outcome for this key".into())),
            };
            out.items.push(r);
        }
        out
    }

    /// Key `i`'s outcome replaced by `r`, an outcome of `from` (a fetch made again for some of
    /// this one's keys: a read-back, a replica's answer).
    pub(super) fn take(&mut self, i: u32, from: &Fetched, r: &Result<Option<Item>>) {
        let r = self.copied(from, r);
        if let Some(slot) = self.items.get_mut(i as usize) {
            *slot = r;
        }
    }

    /// `r`, an outcome of `from`, as an outcome of this fetch: a hit's bytes are copied into
    /// this one's buffer (room asked for, not assumed: the server chose the size).
    fn copied(&mut self, from: &Fetched, r: &Result<Option<Item>>) -> Result<Option<Item>> {
        let item = match r {
            Ok(Some(item)) => item,
            other => return other.clone(),
        };
        let bytes = from.bytes(item);
        let start = self.data.len();
        self.data.try_reserve(bytes.len())?;
        self.data.extend_from_slice(bytes);
        Ok(Some(Item::new(item.flags, item.cas, start, bytes.len())))
    }
}
