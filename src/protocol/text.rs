//! The classic text (ASCII) protocol: encoders that append commands to a caller's buffer, and an
//! incremental parser that takes whatever bytes have arrived and returns either one complete reply
//! unit or "need more". Pure: no I/O; depends on `protocol` (its vocabulary), `ascii` (line
//! framing) and `error`. Knows nothing of the meta commands (`protocol::parse_text_reply`
//! picks between the two).
//!
//! Keys must already be validated (`validate_text_key`): the encoders write them verbatim.

use super::ascii::{
    error_line, find_line, garbage, parse_dec_u64, push_exptime, push_u64, MAX_VALUE,
};
use super::{below_0x21, words, Parsed, Reply, ReplyKind, StoreCmd, StoreItem, MAX_KEY_LEN};
use crate::error::{Error, Result};

/// `get k1 k2 ...\r\n` (or `gets`). The caller keeps lines to a sensible length.
pub fn encode_get<'k>(buf: &mut Vec<u8>, with_cas: bool, keys: impl IntoIterator<Item = &'k [u8]>) {
    buf.extend_from_slice(if with_cas { b"gets" } else { b"get" });
    for k in keys {
        buf.push(b' ');
        buf.extend_from_slice(k);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `get <key>\r\n` (or `gets`): `encode_get` of one key, in one step (a lone request's).
pub fn encode_get_one(buf: &mut Vec<u8>, with_cas: bool, key: &[u8]) {
    put(buf, if with_cas { b"gets " } else { b"get " }, key, b"\r\n");
}

/// `gat <exptime> k1 k2 ...\r\n` (or `gats`): get and touch, answered as `get` is.
pub fn encode_gat<'k>(
    buf: &mut Vec<u8>,
    with_cas: bool,
    exptime: u32,
    keys: impl IntoIterator<Item = &'k [u8]>,
) {
    buf.extend_from_slice(if with_cas { b"gats " } else { b"gat " });
    push_exptime(buf, exptime);
    for k in keys {
        buf.push(b' ');
        buf.extend_from_slice(k);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `<cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply]\r\n<data>\r\n`, for `item` under its
/// wire key `key`.
pub fn encode_store(
    buf: &mut Vec<u8>,
    cmd: StoreCmd,
    key: &[u8],
    item: &StoreItem<'_>,
    noreply: bool,
) {
    buf.reserve(key.len() + item.data.len() + 48);
    encode_store_head(buf, cmd, key, item, noreply);
    buf.extend_from_slice(item.data);
    buf.extend_from_slice(b"\r\n");
}

/// `encode_store`'s command line alone: the data block and its `\r\n` are the caller's.
pub fn encode_store_head(
    buf: &mut Vec<u8>,
    cmd: StoreCmd,
    key: &[u8],
    item: &StoreItem<'_>,
    noreply: bool,
) {
    buf.extend_from_slice(cmd.name().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(key);
    buf.push(b' ');
    push_u64(buf, item.flags as u64);
    buf.push(b' ');
    push_u64(buf, item.exptime as u64);
    buf.push(b' ');
    push_u64(buf, item.data.len() as u64);
    if cmd == StoreCmd::Cas {
        buf.push(b' ');
        push_u64(buf, item.cas);
    }
    if noreply {
        buf.extend_from_slice(b" noreply");
    }
    buf.extend_from_slice(b"\r\n");
}

/// `delete <key> [noreply]\r\n`.
#[inline(always)]
pub fn encode_delete(buf: &mut Vec<u8>, key: &[u8], noreply: bool) {
    let tail: &[u8] = if noreply { b" noreply\r\n" } else { b"\r\n" };
    put(buf, b"delete ", key, tail);
}

/// `head`, `key` and `tail` appended in one step: the buffer grown once, the short fixed parts
/// copied in place (three appends were three calls and three copies, on every lone request).
#[inline(always)]
fn put(buf: &mut Vec<u8>, head: &[u8], key: &[u8], tail: &[u8]) {
    let at = buf.len();
    let (h, k) = (head.len(), key.len());
    buf.resize(at + h + k + tail.len(), 0);
    let out = &mut buf[at..];
    out[..h].copy_from_slice(head);
    out[h..h + k].copy_from_slice(key);
    out[h + k..].copy_from_slice(tail);
}

/// `incr|decr <key> <delta> [noreply]\r\n`.
pub fn encode_arith(buf: &mut Vec<u8>, incr: bool, key: &[u8], delta: u64, noreply: bool) {
    buf.extend_from_slice(if incr { b"incr " } else { b"decr " });
    buf.extend_from_slice(key);
    buf.push(b' ');
    push_u64(buf, delta);
    if noreply {
        buf.extend_from_slice(b" noreply");
    }
    buf.extend_from_slice(b"\r\n");
}

/// `touch <key> <exptime> [noreply]\r\n`.
pub fn encode_touch(buf: &mut Vec<u8>, key: &[u8], exptime: u32, noreply: bool) {
    buf.extend_from_slice(b"touch ");
    buf.extend_from_slice(key);
    buf.push(b' ');
    push_exptime(buf, exptime);
    if noreply {
        buf.extend_from_slice(b" noreply");
    }
    buf.extend_from_slice(b"\r\n");
}

/// `flush_all [delay]\r\n` (pylibmc sends `flush_all \r\n` for no delay; so do we).
pub fn encode_flush_all(buf: &mut Vec<u8>, delay: u32) {
    buf.extend_from_slice(b"flush_all ");
    if delay > 0 {
        push_u64(buf, delay as u64);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `stats [args]\r\n`. `args` must not contain CR or LF (the caller checks).
pub fn encode_stats(buf: &mut Vec<u8>, args: &[u8]) {
    buf.extend_from_slice(b"stats ");
    buf.extend_from_slice(args);
    buf.extend_from_slice(b"\r\n");
}

/// `version\r\n`: also the end-of-batch marker after `noreply` commands.
pub fn encode_version(buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"version\r\n");
}

/// `quit\r\n`.
pub fn encode_quit(buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"quit\r\n");
}

/// `VALUE <key> <flags> <bytes> [<cas>]`, with `line` excluding the CRLF.
fn parse_value_header(line: &[u8]) -> Result<(&[u8], u32, usize, Option<u64>)> {
    let rest = &line[6..];
    let sp = memchr::memchr(b' ', rest).ok_or_else(|| garbage(line))?;
    let key = &rest[..sp];
    // Then two or three decimal fields, one space apart, read in one pass.
    let mut nums = [0u64; 3];
    let mut count = 0;
    for field in rest[sp + 1..].split(|&b| b == b' ') {
        match (nums.get_mut(count), parse_dec_u64(field)) {
            (Some(slot), Some(n)) => *slot = n,
            _ => return Err(garbage(line)),
        }
        count += 1;
    }
    let [flags, len, cas] = nums;
    if key.is_empty() || count < 2 || flags > u32::MAX as u64 || len > MAX_VALUE as u64 {
        return Err(garbage(line));
    }
    Ok((key, flags as u32, len as usize, (count == 3).then_some(cas)))
}

/// What the complete `VALUE` line at the start of `buf` announces: `(unit bytes, data bytes)`,
/// the line and the data block with its CRLF. `None` for any other unit (a line needs no more
/// room than `MAX_LINE`), or when the line has not fully arrived or is not the protocol (the
/// parser says so).
pub fn announced(kind: ReplyKind, buf: &[u8]) -> Option<(usize, usize)> {
    if kind != ReplyKind::Retrieval || !buf.starts_with(b"VALUE ") {
        return None;
    }
    let end = find_line(buf).ok()??;
    let (_, _, len, _) = parse_value_header(&buf[..end]).ok()?;
    Some((end + 2 + len + 2, len))
}

/// Parse one reply unit of the given kind from the start of `buf`.
///
/// `Err` means the peer broke the protocol: the connection must be dropped. A well-formed error
/// line is `Ok(Done(Reply::Failed(..)))`.
pub fn parse_reply(kind: ReplyKind, buf: &[u8]) -> Result<Parsed<Reply<'_>>> {
    if kind == ReplyKind::Retrieval {
        if let Some(hit) = parse_plain_value(buf) {
            return Ok(hit);
        }
        // The end of every get reply (all of a miss's).
        if buf.starts_with(b"END\r\n") {
            return Ok(Parsed::Done(Reply::End, 5));
        }
    } else if let Some(status) = common_status(kind, buf) {
        return Ok(status);
    }
    parse_reply_general(kind, buf)
}

/// The reply lines of a write that are whole words (`STORED`, `DELETED`, `NOT_FOUND`, ...) when
/// `buf` starts with one of `kind`'s, compared whole: what `parse_reply_general` would answer,
/// without looking for the end of the line first.
#[inline]
pub fn common_status(kind: ReplyKind, buf: &[u8]) -> Option<Parsed<Reply<'static>>> {
    let line = |l: &'static [u8], r: fn() -> Reply<'static>| {
        buf.starts_with(l).then(|| Parsed::Done(r(), l.len()))
    };
    let not_found = || line(b"NOT_FOUND\r\n", || Reply::NotFound);
    match kind {
        ReplyKind::Storage => line(b"STORED\r\n", || Reply::Stored)
            .or_else(not_found)
            .or_else(|| line(b"NOT_STORED\r\n", || Reply::NotStored))
            .or_else(|| line(b"EXISTS\r\n", || Reply::Exists)),
        ReplyKind::Delete => line(b"DELETED\r\n", || Reply::Deleted).or_else(not_found),
        ReplyKind::Touch => line(b"TOUCHED\r\n", || Reply::Touched).or_else(not_found),
        ReplyKind::Arith => not_found(),
        _ => None,
    }
}

/// The most common unit of all, a hit without CAS (`VALUE <key> <flags> <bytes>\r\n`, its data
/// and CRLF), read in one pass over its line with no search call: most of a `get_multi`'s parse.
/// `None` for anything else, or anything unusual (a CAS, a long field, a line or block not yet
/// whole or not well ended): `parse_reply_general` then says what it is. Where this answers,
/// it answers exactly what `parse_reply_general` would (a test holds them together).
fn parse_plain_value(buf: &[u8]) -> Option<Parsed<Reply<'_>>> {
    let rest = buf.strip_prefix(b"VALUE ")?;
    // Every byte of a key fastmc sends is above 0x20, so the key ends at the first byte that
    // is not; that byte must be the space.
    let key_len = first_control_or_space(&rest[..rest.len().min(MAX_KEY_LEN + 1)])?;
    if key_len == 0 || rest[key_len] != b' ' {
        return None;
    }
    let (flags, after) = plain_dec(rest, key_len + 1, b' ')?;
    let (len, after) = plain_dec(rest, after, b'\r')?;
    if rest.get(after) != Some(&b'\n') || flags > u64::from(u32::MAX) || len > MAX_VALUE as u64 {
        return None;
    }
    let start = 6 + after + 1;
    let len = len as usize;
    let total = start + len + 2;
    if buf.len() < total {
        return Some(Parsed::NeedMore);
    }
    if &buf[start + len..total] != b"\r\n" {
        return None;
    }
    let reply = Reply::Value {
        key: &rest[..key_len],
        flags: flags as u32,
        cas: None,
        data: &buf[start..start + len],
    };
    Some(Parsed::Done(reply, total))
}

/// The index of the first byte of `s` at or below 0x20 (a space, a control character), eight
/// bytes at a time (`words`, `below_0x21`), or byte by byte in a short `s`.
fn first_control_or_space(s: &[u8]) -> Option<usize> {
    if s.len() < 8 {
        return s.iter().position(|&b| b <= b' ');
    }
    words(s).find_map(|(at, w)| {
        let below = below_0x21(w);
        (below != 0).then(|| at + (below.trailing_zeros() / 8) as usize)
    })
}

/// A decimal field of 1 to 10 digits at `buf[at..]` ended by `stop`: its value and the index
/// after `stop`.
fn plain_dec(buf: &[u8], at: usize, stop: u8) -> Option<(u64, usize)> {
    let field = buf.get(at..)?;
    let mut n = 0u64;
    for (i, &b) in field.iter().take(11).enumerate() {
        let d = b.wrapping_sub(b'0');
        if d >= 10 {
            return (b == stop && i > 0).then_some((n, at + i + 1));
        }
        n = n * 10 + u64::from(d);
    }
    None
}

/// `parse_reply` for every unit: one line found first, then read by kind.
fn parse_reply_general(kind: ReplyKind, buf: &[u8]) -> Result<Parsed<Reply<'_>>> {
    let Some(end) = find_line(buf)? else {
        return Ok(Parsed::NeedMore);
    };
    let line = &buf[..end];
    let used = end + 2;
    // A hit first: it is most of a get reply, and no error line starts with "VALUE ".
    let is_value = kind == ReplyKind::Retrieval && line.starts_with(b"VALUE ");
    if !is_value {
        if let Some(e) = error_line(line) {
            return Ok(Parsed::Done(Reply::Failed(e), used));
        }
    }
    let reply = match kind {
        ReplyKind::Retrieval => {
            if line == b"END" {
                Reply::End
            } else if is_value {
                let (key, flags, len, cas) = parse_value_header(line)?;
                let total = used + len + 2;
                if buf.len() < total {
                    return Ok(Parsed::NeedMore);
                }
                if &buf[used + len..total] != b"\r\n" {
                    return Err(Error::Protocol("value block not terminated by CRLF".into()));
                }
                let data = &buf[used..used + len];
                return Ok(Parsed::Done(
                    Reply::Value {
                        key,
                        flags,
                        cas,
                        data,
                    },
                    total,
                ));
            } else {
                return Err(garbage(line));
            }
        }
        ReplyKind::Storage => match line {
            b"STORED" => Reply::Stored,
            b"NOT_STORED" => Reply::NotStored,
            b"EXISTS" => Reply::Exists,
            b"NOT_FOUND" => Reply::NotFound,
            _ => return Err(garbage(line)),
        },
        ReplyKind::Delete => match line {
            b"DELETED" => Reply::Deleted,
            b"NOT_FOUND" => Reply::NotFound,
            _ => return Err(garbage(line)),
        },
        ReplyKind::Touch => match line {
            b"TOUCHED" => Reply::Touched,
            b"NOT_FOUND" => Reply::NotFound,
            _ => return Err(garbage(line)),
        },
        ReplyKind::Arith => {
            if line == b"NOT_FOUND" {
                Reply::NotFound
            } else {
                // memcached pads decr results with trailing spaces in some versions.
                let trimmed = line
                    .iter()
                    .rposition(|&b| b != b' ')
                    .map_or(&line[..0], |p| &line[..=p]);
                match parse_dec_u64(trimmed) {
                    Some(n) => Reply::Number(n),
                    None => return Err(garbage(line)),
                }
            }
        }
        ReplyKind::Ok => match line {
            b"OK" => Reply::Ok,
            _ => return Err(garbage(line)),
        },
        ReplyKind::Stats => {
            if line == b"END" {
                Reply::End
            } else if let Some(rest) = line.strip_prefix(b"STAT ") {
                let sp = memchr::memchr(b' ', rest).ok_or_else(|| garbage(line))?;
                Reply::Stat {
                    name: &rest[..sp],
                    value: &rest[sp + 1..],
                }
            } else {
                return Err(garbage(line));
            }
        }
        ReplyKind::Version => match line.strip_prefix(b"VERSION ") {
            Some(v) => Reply::Version(v),
            None => return Err(garbage(line)),
        },
        ReplyKind::MetaStore
        | ReplyKind::MetaDelete
        | ReplyKind::MetaProbe
        | ReplyKind::MetaCmd => {
            // Meta replies are `meta::parse_reply`'s (see `protocol::parse_text_reply`).
            return Err(Error::Protocol(format!("{kind:?} is not a classic reply")));
        }
    };
    Ok(Parsed::Done(reply, used))
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
