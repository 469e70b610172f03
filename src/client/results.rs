//! What the client's calls answer: a server as given (`ServerSpec`), a fetched value (`Item`,
//! its bytes in a `Fetched`), a store's status, a meta command's whole answer, a server's
//! `stats`. Plain data; uses `connection::connect::Address` and `protocol::meta` to read meta
//! flags.

use crate::connection::connect::Address;

/// A server as given by the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    pub address: Address,
    pub weight: u32,
}

/// A fetched value: its flags, its CAS unique, and where its bytes are in `Fetched::data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    pub cas: Option<u64>,
    pub(super) start: usize,
    pub(super) len: usize,
    /// A large value kept in the read buffer it arrived in: which of `Fetched::owned`.
    pub(super) own: Option<usize>,
}

impl Item {
    pub(super) fn new(flags: u32, cas: Option<u64>, start: usize, len: usize) -> Item {
        Item {
            flags,
            cas,
            start,
            len,
            own: None,
        }
    }

    /// A value of `len` bytes in `Fetched::owned[own]`.
    pub(super) fn owned(flags: u32, cas: Option<u64>, own: usize, len: usize) -> Item {
        Item {
            own: Some(own),
            ..Item::new(flags, cas, 0, len)
        }
    }
}

/// The full answer to one meta command (`Client::meta_command`): its code (`VA`, `HD`, `EN`,
/// `NF`, `NS`, `EX`), its flags as the server sent them, and a `VA`'s data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaOutcome {
    pub code: [u8; 2],
    pub flags: Vec<u8>,
    pub data: Option<Vec<u8>>,
}

impl MetaOutcome {
    /// The token of flag `c` (`Some(b"")` for a flag without one), if the server sent it.
    pub fn flag(&self, c: u8) -> Option<&[u8]> {
        crate::protocol::meta::flag(&self.flags, c)
    }

    /// The numeric token of flag `c`, if sent and a number.
    pub fn number(&self, c: u8) -> Option<u64> {
        std::str::from_utf8(self.flag(c)?).ok()?.parse().ok()
    }
}

/// What a storage command answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreStatus {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

/// One server's `stats` reply: (name, value) pairs.
pub type Stats = Vec<(Vec<u8>, Vec<u8>)>;
