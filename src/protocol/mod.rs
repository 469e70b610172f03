//! Protocol-independent pieces: key validation, the request and reply vocabulary shared by the
//! encoders and parsers, and the one place that picks between the two line-based parsers. Pure:
//! depends only on `error`.
//!
//! Layering: `text` and `meta` both use `ascii` (line framing) and never each other; `binary`
//! stands alone.

pub mod ascii;
pub mod binary;
pub mod meta;
pub mod text;

use crate::error::{Error, Result};

/// memcached's key length limit, in bytes, after any prefix.
pub const MAX_KEY_LEN: usize = 250;

/// Whether `validate_text_key` takes `key`, as a bool.
#[inline]
pub fn is_text_key(key: &[u8], ascii_only: bool) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && !has_bad_text_byte(key, ascii_only)
}

/// Check a key (prefix included) before it is written into a text-protocol command line.
///
/// Space, control characters and DEL would split or end the command line, so they are always
/// rejected; `ascii_only` (pylibmc's `verify_keys`) also rejects bytes >= 0x80.
pub fn validate_text_key(key: &[u8], ascii_only: bool) -> Result<()> {
    validate_binary_key(key)?; // the length rules are the same in both protocols
    if !has_bad_text_byte(key, ascii_only) {
        return Ok(());
    }
    let bad = key.iter().position(|&b| is_bad_text_byte(b, ascii_only));
    match bad {
        None => Ok(()),
        Some(i) => Err(Error::BadKey(format!(
            "byte 0x{:02x} at offset {i} is not allowed in a text-protocol key",
            key[i]
        ))),
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// In a word of eight bytes (little-endian), the high bit of each byte below 0x21 (a space or a
/// control character), exactly for the lowest such byte: its `w - 0x21..` borrows into its own
/// high bit while its `!w` high bit is set, and a borrow only passes on upwards, from a byte
/// that is itself below. So `!= 0` says whether any is, `trailing_zeros() / 8` which is first.
fn below_0x21(w: u64) -> u64 {
    w.wrapping_sub(ONES * 0x21) & !w & HIGH
}

/// `s` (eight bytes or more) as little-endian words with their offsets, for the scans above:
/// each whole word, then, when fewer than eight bytes are left over, the last eight, which share
/// bytes with the word before (bytes a scan has already passed, and found good). A shorter `s`
/// is the caller's to read byte by byte.
fn words(s: &[u8]) -> impl Iterator<Item = (usize, u64)> + '_ {
    let last = (s.len() % 8 != 0 && s.len() >= 8).then(|| s.len() - 8);
    (0..s.len() / 8).map(|i| i * 8).chain(last).map(move |at| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        (at, u64::from_le_bytes(w))
    })
}

/// A byte a text-protocol key may not hold (`validate_text_key`).
fn is_bad_text_byte(b: u8, ascii_only: bool) -> bool {
    b <= b' ' || b == 0x7f || (ascii_only && b >= 0x80)
}

/// Whether any byte of `key` is one `is_bad_text_byte` refuses, eight bytes at a time (a key of
/// four to seven bytes as one word of its first and last four): every key
/// of every call passes here, and a byte-by-byte loop cost ~100 instructions for a 10-byte key.
/// Exact, not a filter: `below_0x21`, a DEL (0x7f) as a zero byte of `w ^ 0x7f..` (the same
/// borrow argument), and a byte >= 0x80 by its high bit.
#[inline]
fn has_bad_text_byte(key: &[u8], ascii_only: bool) -> bool {
    let high = if ascii_only { HIGH } else { 0 };
    let word_bad = |w: u64| {
        let below_space = below_0x21(w);
        let x = w ^ (ONES * 0x7f);
        let del = x.wrapping_sub(ONES) & !x & HIGH;
        (below_space | del | (w & high)) != 0
    };
    if key.len() < 8 {
        return has_bad_short(key, ascii_only);
    }
    words(key).any(|(_, w)| word_bad(w))
}

/// `has_bad_text_byte` of a key under eight bytes: four to seven bytes as one word of the
/// first four and the last four (they overlap), fewer byte by byte. A function apart, so that
/// the check of longer keys, inlined into the loop of every plan, stays as small as it was.
#[inline(never)]
fn has_bad_short(key: &[u8], ascii_only: bool) -> bool {
    let n = key.len();
    if n < 4 {
        return key.iter().any(|&b| is_bad_text_byte(b, ascii_only));
    }
    let (mut lo, mut hi) = ([0u8; 4], [0u8; 4]);
    lo.copy_from_slice(&key[..4]);
    hi.copy_from_slice(&key[n - 4..]);
    let w = u64::from(u32::from_le_bytes(lo)) | u64::from(u32::from_le_bytes(hi)) << 32;
    let high = if ascii_only { HIGH } else { 0 };
    let x = w ^ (ONES * 0x7f);
    let del = x.wrapping_sub(ONES) & !x & HIGH;
    (below_0x21(w) | del | (w & high)) != 0
}

/// Check a key (prefix included) for the binary protocol, where keys are length-prefixed and any
/// byte is allowed: only the length matters.
pub fn validate_binary_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::BadKey("empty key".into()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::BadKey(format!(
            "key length {} too long, max is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

/// The storage commands of the classic protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCmd {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

impl StoreCmd {
    /// The classic command's name.
    pub fn name(self) -> &'static str {
        match self {
            StoreCmd::Set => "set",
            StoreCmd::Add => "add",
            StoreCmd::Replace => "replace",
            StoreCmd::Append => "append",
            StoreCmd::Prepend => "prepend",
            StoreCmd::Cas => "cas",
        }
    }
}

/// One storage request: the user's key (the encoders take its wire form separately) and what
/// goes with it. `cas` counts for `StoreCmd::Cas` only.
#[derive(Clone, Copy, Debug)]
pub struct StoreItem<'a> {
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    pub data: &'a [u8],
    pub cas: u64,
}

/// A storage request's fields for the encoders' tests (the key goes to an encoder separately).
#[cfg(test)]
pub(crate) fn test_item(
    flags: u32,
    exptime: u32,
    data: &'static [u8],
    cas: u64,
) -> StoreItem<'static> {
    StoreItem {
        key: b"",
        flags,
        exptime,
        data,
        cas,
    }
}

/// Parse one reply unit of a line-based request: the meta kinds (quiet batches, the probe) are
/// `meta`'s, every other kind the classic `text` parser's.
pub fn parse_text_reply(kind: ReplyKind, buf: &[u8]) -> Result<Parsed<Reply<'_>>> {
    match kind {
        ReplyKind::MetaStore | ReplyKind::MetaDelete | ReplyKind::MetaProbe => {
            meta::parse_reply(kind, buf)
        }
        ReplyKind::MetaCmd => meta::parse_command_reply(buf),
        _ => text::parse_reply(kind, buf),
    }
}

/// The size of the reply unit at the start of `buf`, as its complete header announces a data
/// block: `(unit bytes, data bytes)`, so that a reader makes room for exactly that (and refuses
/// a value over its limit before reading it). `None` when no header announcing data has arrived.
pub fn announced(binary: bool, kind: ReplyKind, buf: &[u8]) -> Option<(usize, usize)> {
    if binary {
        binary::announced(buf)
    } else if kind == ReplyKind::MetaCmd {
        meta::announced(buf)
    } else {
        text::announced(kind, buf)
    }
}

/// Which replies a request may legally receive; anything else is a protocol error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// `VALUE ...` blocks then `END`.
    Retrieval,
    /// `STORED`, `NOT_STORED`, `EXISTS`, `NOT_FOUND`.
    Storage,
    /// `DELETED`, `NOT_FOUND`.
    Delete,
    /// a decimal number or `NOT_FOUND`.
    Arith,
    /// `TOUCHED`, `NOT_FOUND`.
    Touch,
    /// `OK`.
    Ok,
    /// `STAT name value` lines then `END`.
    Stats,
    /// `VERSION x`.
    Version,
    /// A quiet meta storage batch: `NS`/`EX`/`NF O<n>` for the keys that failed, then `MN`.
    MetaStore,
    /// A quiet meta delete batch: `NF O<n>` for the keys not found, then `MN`.
    MetaDelete,
    /// A bare `mn`: `MN` if the server speaks the meta protocol, `ERROR` if not.
    MetaProbe,
    /// One meta command answered in full (`mg`, `md` without `q`): `VA <size> <flags>` and a
    /// data block, or `HD`/`EN`/`NF`/`NS`/`EX` with flags.
    MetaCmd,
}

impl ReplyKind {
    /// Every kind, for tests and fuzzing that must cover them all.
    pub const ALL: [ReplyKind; 12] = [
        ReplyKind::Retrieval,
        ReplyKind::Storage,
        ReplyKind::Delete,
        ReplyKind::Arith,
        ReplyKind::Touch,
        ReplyKind::Ok,
        ReplyKind::Stats,
        ReplyKind::Version,
        ReplyKind::MetaStore,
        ReplyKind::MetaDelete,
        ReplyKind::MetaProbe,
        ReplyKind::MetaCmd,
    ];
}

/// One unit of a reply, borrowing from the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    Value {
        key: &'a [u8],
        flags: u32,
        cas: Option<u64>,
        data: &'a [u8],
    },
    End,
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    Ok,
    Number(u64),
    Stat {
        name: &'a [u8],
        value: &'a [u8],
    },
    Version(&'a [u8]),
    /// A meta reply for the request sent with opaque token `opaque`.
    Meta {
        status: MetaStatus,
        opaque: u32,
    },
    /// `MN`: everything sent before the `mn` has been processed.
    MetaNoop,
    /// The answer to one meta command (`ReplyKind::MetaCmd`): its two-letter code (`VA`, `HD`,
    /// `EN`, `NF`, `NS`, `EX`), its flags as sent back, and the data block of a `VA`.
    MetaResult {
        code: [u8; 2],
        flags: &'a [u8],
        data: Option<&'a [u8]>,
    },
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`: this request failed, the stream is in
    /// sync after it.
    Failed(Error),
}

/// The outcome of feeding bytes to a parser.
/// What the line of a quiet meta write says (`Reply::Meta`): a value of its own rather than a
/// boxed `Reply`, so that a batch's answered keys (every missing key of a `delete_multi`) cost
/// no allocation each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaStatus {
    NotFound,
    Stored,
    NotStored,
    Exists,
    Deleted,
}

impl MetaStatus {
    /// The same outcome as the classic protocol's reply, for the sinks.
    pub fn reply(self) -> Reply<'static> {
        match self {
            MetaStatus::NotFound => Reply::NotFound,
            MetaStatus::Stored => Reply::Stored,
            MetaStatus::NotStored => Reply::NotStored,
            MetaStatus::Exists => Reply::Exists,
            MetaStatus::Deleted => Reply::Deleted,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    /// A complete unit, and how many bytes of the input it took.
    Done(T, usize),
    /// The input ends inside a unit: read more and call again with the longer input.
    NeedMore,
}

#[cfg(test)]
mod key_tests {
    use super::*;

    /// The word-at-a-time check agrees with the byte rule for every byte value, at every offset
    /// of keys long enough to fill whole words and a tail, with and without `ascii_only`.
    #[test]
    fn the_word_check_agrees_with_the_byte_rule() {
        for ascii_only in [false, true] {
            for len in 1..=19 {
                for at in 0..len {
                    for b in 0..=255u8 {
                        let mut key = vec![b'k'; len];
                        key[at] = b;
                        let want = is_bad_text_byte(b, ascii_only);
                        assert_eq!(has_bad_text_byte(&key, ascii_only), want, "{key:?}");
                        let res = validate_text_key(&key, ascii_only);
                        assert_eq!(res.is_err(), want, "{key:?}");
                        assert_eq!(is_text_key(&key, ascii_only), !want, "{key:?}");
                    }
                }
            }
        }
        // The length rules: `is_text_key` refuses exactly what `validate_text_key` does.
        for len in [0, 1, MAX_KEY_LEN, MAX_KEY_LEN + 1] {
            let key = vec![b'k'; len];
            assert_eq!(
                is_text_key(&key, false),
                validate_text_key(&key, false).is_ok()
            );
        }
        assert!(is_text_key(&[b'k'; MAX_KEY_LEN], true) && !is_text_key(b"", true));
        // Two bad bytes: the first one is named.
        let e = validate_text_key(b"abc\x01def\x7fgh", false).unwrap_err();
        assert!(e.to_string().contains("0x01 at offset 3"), "{e}");
    }
}
