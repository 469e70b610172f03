//! The classic text (ASCII) protocol: encoders that append commands to a caller's buffer, and an
//! incremental parser that takes whatever bytes have arrived and returns either one complete reply
//! unit or "need more". Pure: no I/O; depends on `protocol` (its vocabulary), `ascii` (line
//! framing) and `error`. Knows nothing of the meta commands (`protocol::parse_text_reply`
//! dispatches between the two).
//!
//! Keys must already be validated (`validate_text_key`): the encoders write them verbatim.

use super::ascii::{
    error_line, find_line, garbage, parse_dec_u64, push_exptime, push_u64, MAX_VALUE,
};
use super::{Parsed, Reply, ReplyKind, StoreCmd, StoreItem};
use crate::error::{Error, Result};

pub use super::ascii::MAX_LINE;

/// `get k1 k2 ...\r\n` (or `gets`). The caller keeps lines to a sensible length.
pub fn encode_get<'k>(buf: &mut Vec<u8>, with_cas: bool, keys: impl IntoIterator<Item = &'k [u8]>) {
    buf.extend_from_slice(if with_cas { b"gets" } else { b"get" });
    for k in keys {
        buf.push(b' ');
        buf.extend_from_slice(k);
    }
    buf.extend_from_slice(b"\r\n");
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
    buf.extend_from_slice(item.data);
    buf.extend_from_slice(b"\r\n");
}

/// `delete <key> [noreply]\r\n`.
pub fn encode_delete(buf: &mut Vec<u8>, key: &[u8], noreply: bool) {
    buf.extend_from_slice(b"delete ");
    buf.extend_from_slice(key);
    if noreply {
        buf.extend_from_slice(b" noreply");
    }
    buf.extend_from_slice(b"\r\n");
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
mod tests {
    use super::*;
    use crate::protocol::test_item as item;

    /// An owned copy of a reply, to compare results of different splits.
    fn owned(r: &Reply<'_>) -> String {
        format!("{r:?}")
    }

    /// Parse a whole stream of units of one kind, feeding it as if it arrived in pieces cut at
    /// `cuts`; returns the units and whether the parser ever asked for more at the true end.
    fn parse_all(kind: ReplyKind, input: &[u8], cut: usize) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut avail = cut.min(input.len());
        let mut pos = 0;
        loop {
            match parse_reply(kind, &input[pos..avail])? {
                Parsed::Done(r, n) => {
                    assert!(n > 0 && pos + n <= avail, "consumed past the input");
                    out.push(owned(&r));
                    pos += n;
                    if pos == input.len() {
                        return Ok(out);
                    }
                }
                Parsed::NeedMore => {
                    if avail == input.len() {
                        panic!("parser wants more at the end of a complete input");
                    }
                    avail = input.len();
                }
            }
        }
    }

    fn check_every_split(kind: ReplyKind, input: &[u8], expect: &[&str]) {
        for cut in 0..=input.len() {
            let got = parse_all(kind, input, cut).expect("valid input");
            assert_eq!(got, expect, "split at {cut}");
        }
        // every strict prefix that does not end on a unit boundary must be NeedMore
        for cut in 0..input.len() {
            let r = parse_reply(kind, &input[..cut]).expect("prefix of valid input");
            if let Parsed::Done(_, n) = r {
                assert!(n <= cut);
            }
        }
    }

    #[test]
    fn retrieval_values_and_end_at_every_split() {
        let input = b"VALUE a 0 5\r\nhello\r\nVALUE bb 16 0 77\r\n\r\nVALUE c 4294967295 2\r\n\r\n\r\nEND\r\n";
        check_every_split(
            ReplyKind::Retrieval,
            input,
            &[
                "Value { key: [97], flags: 0, cas: None, data: [104, 101, 108, 108, 111] }",
                "Value { key: [98, 98], flags: 16, cas: Some(77), data: [] }",
                "Value { key: [99], flags: 4294967295, cas: None, data: [13, 10] }",
                "End",
            ],
        );
    }

    #[test]
    fn storage_delete_touch_arith_at_every_split() {
        check_every_split(
            ReplyKind::Storage,
            b"STORED\r\nNOT_STORED\r\nEXISTS\r\nNOT_FOUND\r\nSERVER_ERROR object too large for cache\r\n",
            &["Stored", "NotStored", "Exists", "NotFound", "Failed(TooBig)"],
        );
        check_every_split(
            ReplyKind::Delete,
            b"DELETED\r\nNOT_FOUND\r\n",
            &["Deleted", "NotFound"],
        );
        check_every_split(
            ReplyKind::Touch,
            b"TOUCHED\r\nNOT_FOUND\r\n",
            &["Touched", "NotFound"],
        );
        check_every_split(
            ReplyKind::Arith,
            b"42\r\n18446744073709551615\r\n0   \r\nNOT_FOUND\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            &[
                "Number(42)",
                "Number(18446744073709551615)",
                "Number(0)",
                "NotFound",
                "Failed(ClientError(\"cannot increment or decrement non-numeric value\"))",
            ],
        );
    }

    #[test]
    fn stats_version_ok_at_every_split() {
        check_every_split(
            ReplyKind::Stats,
            b"STAT pid 12\r\nSTAT version 1.6.18\r\nSTAT empty \r\nEND\r\n",
            &[
                "Stat { name: [112, 105, 100], value: [49, 50] }",
                "Stat { name: [118, 101, 114, 115, 105, 111, 110], value: [49, 46, 54, 46, 49, 56] }",
                "Stat { name: [101, 109, 112, 116, 121], value: [] }",
                "End",
            ],
        );
        check_every_split(
            ReplyKind::Version,
            b"VERSION 1.6.18\r\n",
            &["Version([49, 46, 54, 46, 49, 56])"],
        );
        check_every_split(
            ReplyKind::Ok,
            b"OK\r\nERROR\r\n",
            &["Ok", "Failed(UnknownCommand)"],
        );
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let bad: &[(ReplyKind, &[u8])] = &[
            (ReplyKind::Retrieval, b"STORED\r\n"),
            (ReplyKind::Retrieval, b"VALUE k x 1\r\na\r\n"),
            (ReplyKind::Retrieval, b"VALUE k 1\r\n"),
            (ReplyKind::Retrieval, b"VALUE k 0 1 2 3\r\na\r\n"),
            (ReplyKind::Retrieval, b"VALUE k 4294967296 1\r\na\r\n"),
            (ReplyKind::Retrieval, b"VALUE k 0 1\r\nab\r\n"),
            (
                ReplyKind::Retrieval,
                b"VALUE k 0 99999999999999999999999\r\n",
            ),
            (ReplyKind::Storage, b"DELETED\r\n"),
            (ReplyKind::Arith, b"-1\r\n"),
            (ReplyKind::Arith, b"18446744073709551616\r\n"),
            (ReplyKind::Stats, b"STAT nospace\r\n"),
            (ReplyKind::Storage, b"STORED\n"),
            (ReplyKind::Version, b"VERSION\r\n"),
        ];
        for (kind, input) in bad {
            assert!(
                matches!(parse_reply(*kind, input), Err(Error::Protocol(_))),
                "{kind:?} {:?}",
                String::from_utf8_lossy(input)
            );
        }
        let long = vec![b'x'; MAX_LINE + 1];
        assert!(parse_reply(ReplyKind::Storage, &long).is_err());
        assert_eq!(
            parse_reply(ReplyKind::Storage, &long[..100]).unwrap(),
            Parsed::NeedMore
        );
    }

    #[test]
    fn no_panic_on_any_short_input() {
        // every 1- and 2-byte input, for every kind
        let kinds = ReplyKind::ALL;
        for k in kinds {
            for a in 0..=255u8 {
                let _ = parse_reply(k, &[a]);
                for b in [b'\r', b'\n', b' ', b'0', b'V', 0xff] {
                    let _ = parse_reply(k, &[a, b]);
                    let _ = parse_reply(k, &[b"VALUE " as &[u8], &[a, b], b"\r\n"].concat());
                }
            }
        }
    }

    #[test]
    fn touch_and_gat_send_the_time_memcached_reads() {
        let mut b = Vec::new();
        encode_touch(&mut b, b"k", u32::MAX, false);
        encode_touch(&mut b, b"k", 1 << 31, true);
        encode_touch(&mut b, b"k", (1 << 31) - 1, false);
        encode_gat(&mut b, false, u32::MAX - 4, [&b"k"[..]]);
        let expect = "touch k -1\r\ntouch k -2147483648 noreply\r\ntouch k 2147483647\r\n\
                      gat -5 k\r\n";
        assert_eq!(String::from_utf8_lossy(&b), expect);
    }

    #[test]
    fn encoders_write_pylibmc_wire_format() {
        let mut b = Vec::new();
        encode_store(
            &mut b,
            StoreCmd::Set,
            b"w1",
            &item(16, 0, b"hello", 0),
            false,
        );
        encode_store(
            &mut b,
            StoreCmd::Set,
            b"w3",
            &item(16, u32::MAX, b"x", 0),
            false,
        );
        encode_store(
            &mut b,
            StoreCmd::Cas,
            b"c1",
            &item(16, 0, b"v2", 2847),
            false,
        );
        encode_store(&mut b, StoreCmd::Set, b"nr", &item(4, 0, b"1", 0), true);
        encode_delete(&mut b, b"nr", true);
        encode_delete(&mut b, b"w3", false);
        encode_touch(&mut b, b"w1", 50, false);
        encode_arith(&mut b, true, b"w2", 5, false);
        encode_arith(&mut b, false, b"w2", 1, false);
        encode_flush_all(&mut b, 0);
        encode_flush_all(&mut b, 5);
        encode_stats(&mut b, b"");
        encode_get(&mut b, false, [&b"w1"[..], b"w2", b"missing"]);
        encode_get(&mut b, true, [&b"c1"[..]]);
        encode_gat(&mut b, false, 60, [&b"w1"[..], b"w2"]);
        encode_gat(&mut b, true, 0, [&b"c1"[..]]);
        encode_version(&mut b);
        encode_quit(&mut b);
        let expect: &[u8] = b"set w1 16 0 5\r\nhello\r\n\
set w3 16 4294967295 1\r\nx\r\n\
cas c1 16 0 2 2847\r\nv2\r\n\
set nr 4 0 1 noreply\r\n1\r\ndelete nr noreply\r\n\
delete w3\r\ntouch w1 50\r\nincr w2 5\r\ndecr w2 1\r\n\
flush_all \r\nflush_all 5\r\nstats \r\nget w1 w2 missing\r\ngets c1\r\ngat 60 w1 w2\r\ngats 0 c1\r\nversion\r\nquit\r\n";
        assert_eq!(String::from_utf8_lossy(&b), String::from_utf8_lossy(expect));
    }

    #[test]
    fn a_value_line_announces_its_unit_and_nothing_else_does() {
        let r = ReplyKind::Retrieval;
        assert_eq!(
            announced(r, b"VALUE k 5 300 9\r\nxy"),
            Some((17 + 300 + 2, 300))
        );
        assert_eq!(announced(r, b"VALUE k 5 300"), None); // the line is not complete
        assert_eq!(announced(r, b"END\r\n"), None);
        assert_eq!(announced(r, b"VALUE k x 300\r\n"), None); // garbage: the parser says so
        assert_eq!(announced(ReplyKind::Stats, b"VALUE k 5 300\r\n"), None);
    }
}
