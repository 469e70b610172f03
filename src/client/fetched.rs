//! What a fetch returns (`Fetched`): one outcome per key, the values' bytes together in one
//! buffer (kept for the thread's next fetch, `keys::spare_bytes`), and how a fetch's sink is
//! finished into it. No I/O.

use super::keys;
use super::results::Item;
use crate::error::{Error, Result};

/// What a fetch returns: one outcome per key; the values' bytes are kept together in one buffer
/// (one allocation for the batch instead of one per value).
#[derive(Debug, Default)]
pub struct Fetched {
    pub items: Vec<Result<Option<Item>>>,
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
        keys::spare_bytes_keep(std::mem::take(&mut self.data), self.origin);
    }
}

impl Fetched {
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
                Some(Ok(Some(item))) => {
                    let start = out.data.len();
                    let bytes = self.bytes(item);
                    // (a copy of what the server sent: asked for, not assumed)
                    match out.data.try_reserve(bytes.len()) {
                        Ok(()) => {
                            out.data.extend_from_slice(bytes);
                            Ok(Some(Item::new(item.flags, item.cas, start, item.len)))
                        }
                        Err(e) => Err(e.into()),
                    }
                }
                Some(Ok(None)) => Ok(None),
                Some(Err(e)) => Err(e.clone()),
                None => Err(Error::Protocol("no outcome for this key".into())),
            };
            out.items.push(r);
        }
        out
    }
}
