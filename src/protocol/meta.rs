//! The meta protocol (memcached >= 1.6), used only for what it does better than the classic
//! commands: quiet multi-key writes, and single meta commands answered in full (`mg` with
//! leases and recache flags, `md` that invalidates: see `encode_command`). `ms`/`md` with the `q` flag are answered only when they do
//! not succeed, each such reply carrying the request's opaque token (`O<n>`), and a closing `mn`
//! (answered `MN`) says the server has processed everything before it. Pure: no I/O; depends on
//! `protocol` (its vocabulary), `ascii` (line framing) and `error`. Keys must already be validated (`validate_text_key`).
//!
//! Whether a server speaks it is probed with a bare `mn`: a server without the meta protocol
//! answers `ERROR`, and nothing else changes on the connection.

use super::ascii::{
    error_line, find_line, garbage, parse_dec_u64, push_exptime, push_u64, MAX_VALUE,
};
use super::{MetaStatus, Parsed, Reply, ReplyKind, StoreCmd, StoreItem};
use crate::error::{Error, Result};

/// The storage modes that have a meta equivalent with identical semantics.
pub fn has_quiet_store(cmd: StoreCmd) -> bool {
    matches!(cmd, StoreCmd::Set | StoreCmd::Add | StoreCmd::Replace)
}

/// `ms <key> <bytes> [T<exptime>] [F<flags>] [M<mode>] q O<opaque>\r\n<data>\r\n`, without
/// the opaque for a plain set: `item` goes under its wire key `key`. A set is never answered
/// by a status (only `add` and `replace` can be refused, with `NS`), and an error line carries
/// no token anyway, so the token would only cost the server a flag to parse on every key
/// (3-4% of a 10,000-key batch's time on a pinned memcached): a status line without one is
/// a protocol error, and the stream is out of step.
pub fn encode_store_quiet(
    buf: &mut Vec<u8>,
    cmd: StoreCmd,
    key: &[u8],
    item: &StoreItem<'_>,
    opaque: u32,
) {
    buf.reserve(key.len() + item.data.len() + 48);
    encode_store_quiet_head(buf, cmd, key, item, opaque);
    buf.extend_from_slice(item.data);
    buf.extend_from_slice(b"\r\n");
}

/// `encode_store_quiet`'s command line alone: the data block and its `\r\n` are the caller's.
pub fn encode_store_quiet_head(
    buf: &mut Vec<u8>,
    cmd: StoreCmd,
    key: &[u8],
    item: &StoreItem<'_>,
    opaque: u32,
) {
    buf.extend_from_slice(b"ms ");
    buf.extend_from_slice(key);
    buf.push(b' ');
    push_u64(buf, item.data.len() as u64);
    if item.exptime != 0 {
        buf.extend_from_slice(b" T");
        push_exptime(buf, item.exptime);
    }
    if item.flags != 0 {
        buf.extend_from_slice(b" F");
        push_u64(buf, item.flags as u64);
    }
    match cmd {
        StoreCmd::Add => buf.extend_from_slice(b" ME"),
        StoreCmd::Replace => buf.extend_from_slice(b" MR"),
        _ => {}
    }
    if cmd == StoreCmd::Set {
        buf.extend_from_slice(b" q");
    } else {
        buf.extend_from_slice(b" q O");
        push_u64(buf, opaque as u64);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `md <key> q O<opaque>\r\n`.
pub fn encode_delete_quiet(buf: &mut Vec<u8>, key: &[u8], opaque: u32) {
    buf.extend_from_slice(b"md ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" q O");
    push_u64(buf, opaque as u64);
    buf.extend_from_slice(b"\r\n");
}

/// `mn\r\n`: closes a quiet batch, and probes for the meta protocol.
pub fn encode_noop(buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"mn\r\n");
}

/// `<verb> <key> <flags>\r\n`: one meta command without a data block (`mg`, `md`), answered
/// in full (no `q`). `flags` are the command's flag tokens, space-separated, without line
/// breaks (the caller builds them from numbers and fixed letters).
pub fn encode_command(buf: &mut Vec<u8>, verb: &[u8], key: &[u8], flags: &[u8]) {
    buf.reserve(verb.len() + key.len() + flags.len() + 4);
    buf.extend_from_slice(verb);
    buf.push(b' ');
    buf.extend_from_slice(key);
    if !flags.is_empty() {
        buf.push(b' ');
        buf.extend_from_slice(flags);
    }
    buf.extend_from_slice(b"\r\n");
}

/// `ma <key> N<exptime> J<initial> D<delta> [MD] v\r\n`: incr (or decr) by `delta`, a miss
/// creating the counter at `initial` with that expiry (a counter created so holds its digits with
/// client flags 0, as the classic fallback and the binary protocol create it); answered `VA`
/// with the new value.
pub fn encode_arith_create(
    buf: &mut Vec<u8>,
    incr: bool,
    key: &[u8],
    delta: u64,
    initial: u64,
    exptime: u32,
) {
    buf.reserve(key.len() + 64);
    buf.extend_from_slice(b"ma ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" N");
    push_exptime(buf, exptime);
    buf.extend_from_slice(b" J");
    push_u64(buf, initial);
    buf.extend_from_slice(b" D");
    push_u64(buf, delta);
    if !incr {
        buf.extend_from_slice(b" MD");
    }
    buf.extend_from_slice(b" v\r\n");
}

/// The token of flag `c` in a meta reply's flags (`Some(b"")` for a flag without one), if set.
pub fn flag(flags: &[u8], c: u8) -> Option<&[u8]> {
    flags
        .split(|&b| b == b' ')
        .find(|tok| tok.first() == Some(&c))
        .map(|tok| &tok[1..])
}

/// Parse the reply to one meta command (`ReplyKind::MetaCmd`): `VA <size> <flags>` and its data
/// block, or `HD`/`EN`/`NF`/`NS`/`EX` and flags, or `ME <key> <name>=<value>...` (the debug
/// command's answer, as flags), or an error line. `Err` means the peer broke
/// the protocol: drop the connection.
pub fn parse_command_reply(buf: &[u8]) -> Result<Parsed<Reply<'_>>> {
    let Some(end) = find_line(buf)? else {
        return Ok(Parsed::NeedMore);
    };
    let line = &buf[..end];
    if let Some(e) = error_line(line) {
        return Ok(Parsed::Done(Reply::Failed(e), end + 2));
    }
    let (code, rest) = match line.get(..2) {
        Some(c) if line.len() == 2 || line[2] == b' ' => (c, line.get(3..).unwrap_or(b"")),
        _ => return Err(garbage(line)),
    };
    let code = [code[0], code[1]];
    if code != *b"VA" {
        if !matches!(&code, b"HD" | b"EN" | b"NF" | b"NS" | b"EX" | b"ME") {
            return Err(garbage(line));
        }
        let reply = Reply::MetaResult {
            code,
            flags: rest,
            data: None,
        };
        return Ok(Parsed::Done(reply, end + 2));
    }
    let (len, flags) = va_size(rest).ok_or_else(|| garbage(line))?;
    let start = end + 2;
    let Some(block) = buf.get(start..start + len + 2) else {
        return Ok(Parsed::NeedMore);
    };
    if &block[len..] != b"\r\n" {
        return Err(Error::Protocol("meta value block not ended by CRLF".into()));
    }
    let reply = Reply::MetaResult {
        code,
        flags,
        data: Some(&block[..len]),
    };
    Ok(Parsed::Done(reply, start + len + 2))
}

/// A `VA` line's size (at most `MAX_VALUE`) and flags, from what follows `VA `.
fn va_size(rest: &[u8]) -> Option<(usize, &[u8])> {
    let (size, flags) = match rest.iter().position(|&b| b == b' ') {
        Some(sp) => (&rest[..sp], &rest[sp + 1..]),
        None => (rest, &b""[..]),
    };
    match parse_dec_u64(size) {
        Some(n) if n <= MAX_VALUE as u64 => Some((n as usize, flags)),
        _ => None,
    }
}

/// What the complete `VA` line at the start of `buf` announces: `(unit bytes, data bytes)`, as
/// `text::announced` for a `VALUE` line. `None` for any other unit.
pub fn announced(buf: &[u8]) -> Option<(usize, usize)> {
    let rest = buf.strip_prefix(b"VA ")?;
    let end = find_line(buf).ok()??;
    let (len, _) = va_size(&rest[..end - 3])?;
    Some((end + 2 + len + 2, len))
}

/// The opaque token of a meta reply line's flags (`O<n>`), if any.
fn opaque(flags: &[u8]) -> Result<Option<u32>> {
    // The usual line: fastmc asks for no flag back but the token, so it is all there is.
    if let Some(n) = flags.strip_prefix(b"O").and_then(parse_dec_u64) {
        return u32::try_from(n).map(Some).map_err(|_| garbage(flags));
    }
    match flags
        .split(|&b| b == b' ')
        .find_map(|tok| tok.strip_prefix(b"O"))
    {
        None => Ok(None),
        Some(n) => parse_dec_u64(n)
            .and_then(|v| u32::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| garbage(flags)),
    }
}

/// Parse one reply line of a quiet meta batch (`MetaStore`, `MetaDelete`) or of a probe
/// (`MetaProbe`). `Err` means the peer broke the protocol: drop the connection.
pub fn parse_reply(kind: ReplyKind, buf: &[u8]) -> Result<Parsed<Reply<'_>>> {
    let Some(end) = find_line(buf)? else {
        return Ok(Parsed::NeedMore);
    };
    let line = &buf[..end];
    let used = end + 2;
    if let Some(e) = error_line(line) {
        return Ok(Parsed::Done(Reply::Failed(e), used));
    }
    if line == b"MN" {
        return Ok(Parsed::Done(Reply::MetaNoop, used));
    }
    if kind == ReplyKind::MetaProbe {
        return Err(garbage(line));
    }
    let (code, flags) = match line.get(..2) {
        Some(c) if line.len() == 2 || line[2] == b' ' => (c, line.get(3..).unwrap_or(b"")),
        _ => return Err(garbage(line)),
    };
    let status = match (kind, code) {
        (_, b"NF") => MetaStatus::NotFound,
        (ReplyKind::MetaStore, b"HD") => MetaStatus::Stored,
        (ReplyKind::MetaStore, b"NS") => MetaStatus::NotStored,
        (ReplyKind::MetaStore, b"EX") => MetaStatus::Exists,
        (ReplyKind::MetaDelete, b"HD") => MetaStatus::Deleted,
        _ => return Err(garbage(line)),
    };
    match opaque(flags)? {
        Some(token) => Ok(Parsed::Done(
            Reply::Meta {
                status,
                opaque: token,
            },
            used,
        )),
        None => Err(Error::Protocol(
            "meta reply without the opaque token it was sent with".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_item as item;

    fn parse_all(kind: ReplyKind, input: &[u8], cut: usize) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut avail = cut.min(input.len());
        let mut pos = 0;
        while pos < input.len() {
            match crate::protocol::parse_text_reply(kind, &input[pos..avail])? {
                Parsed::Done(r, n) => {
                    assert!(n > 0 && pos + n <= avail, "consumed past the input");
                    out.push(format!("{r:?}"));
                    pos += n;
                }
                Parsed::NeedMore => {
                    assert!(
                        avail < input.len(),
                        "wants more at the end of a complete input"
                    );
                    avail = input.len();
                }
            }
        }
        Ok(out)
    }

    #[test]
    fn quiet_store_replies_at_every_split() {
        let input = b"NS O3\r\nEX O7\r\nNF O12 k\r\nSERVER_ERROR object too large for cache\r\nHD O4294967295\r\nMN\r\n";
        let expect = [
            "Meta { status: NotStored, opaque: 3 }",
            "Meta { status: Exists, opaque: 7 }",
            "Meta { status: NotFound, opaque: 12 }",
            "Failed(TooBig)",
            "Meta { status: Stored, opaque: 4294967295 }",
            "MetaNoop",
        ];
        for cut in 0..=input.len() {
            assert_eq!(parse_all(ReplyKind::MetaStore, input, cut).unwrap(), expect);
        }
    }

    #[test]
    fn quiet_delete_and_probe() {
        assert_eq!(
            parse_all(ReplyKind::MetaDelete, b"NF O0\r\nHD O1\r\nMN\r\n", 3).unwrap(),
            [
                "Meta { status: NotFound, opaque: 0 }",
                "Meta { status: Deleted, opaque: 1 }",
                "MetaNoop"
            ]
        );
        assert_eq!(
            parse_all(ReplyKind::MetaProbe, b"ERROR\r\nMN\r\n", 0).unwrap(),
            ["Failed(UnknownCommand)", "MetaNoop"]
        );
        assert!(parse_reply(ReplyKind::MetaProbe, b"STORED\r\n").is_err());
    }

    #[test]
    fn garbage_and_missing_opaque_are_protocol_errors() {
        for bad in [
            &b"NS\r\n"[..],
            b"NS O\r\n",
            b"NS Ox\r\n",
            b"NS O99999999999\r\n",
            b"NSX O1\r\n",
            b"EX O1\r\n".as_slice(),
            b"VALUE a 0 1\r\n",
            b"\r\n",
            b"N\r\n",
        ] {
            let kind = ReplyKind::MetaDelete;
            assert!(parse_reply(kind, bad).is_err(), "{bad:?}");
        }
        assert!(parse_reply(ReplyKind::MetaStore, b"HD O1 \xff\r\n").is_ok());
        assert!(parse_reply(ReplyKind::MetaStore, b"NS O1\n").is_err());
        assert_eq!(
            parse_reply(ReplyKind::MetaStore, b"NS O1\r").unwrap(),
            Parsed::NeedMore
        );
    }

    #[test]
    fn command_replies_at_every_split() {
        let input = b"VA 2 f16 c9 W\r\nab\r\nVA 0 Z\r\n\r\nEN\r\nHD\r\nNF\r\nEX c3\r\nERROR\r\nVA 4\r\n\r\n\r\n\r\nME k exp=-1\r\n";
        let expect = [
            "MetaResult { code: [86, 65], flags: [102, 49, 54, 32, 99, 57, 32, 87], data: Some([97, 98]) }",
            "MetaResult { code: [86, 65], flags: [90], data: Some([]) }",
            "MetaResult { code: [69, 78], flags: [], data: None }",
            "MetaResult { code: [72, 68], flags: [], data: None }",
            "MetaResult { code: [78, 70], flags: [], data: None }",
            "MetaResult { code: [69, 88], flags: [99, 51], data: None }",
            "Failed(UnknownCommand)",
            "MetaResult { code: [86, 65], flags: [], data: Some([13, 10, 13, 10]) }",
            "MetaResult { code: [77, 69], flags: [107, 32, 101, 120, 112, 61, 45, 49], data: None }",
        ];
        for cut in 0..=input.len() {
            assert_eq!(
                parse_all(ReplyKind::MetaCmd, input, cut).unwrap(),
                expect,
                "cut {cut}"
            );
        }
        for bad in [
            &b"VA x\r\n"[..],
            b"VA 1 W\r\nab\r\n",
            b"MN\r\n",
            b"VALUE a 0 1\r\n",
            b"OK\r\n",
            b"HDX\r\n",
        ] {
            assert!(parse_command_reply(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn command_encoder_and_flags() {
        let mut b = Vec::new();
        encode_command(&mut b, b"mg", b"k", b"v f c N30 R5");
        encode_command(&mut b, b"md", b"k2", b"");
        assert_eq!(b, b"mg k v f c N30 R5\r\nmd k2\r\n");
        assert_eq!(flag(b"f16 c9 W", b'c'), Some(&b"9"[..]));
        assert_eq!(flag(b"f16 c9 W", b'W'), Some(&b""[..]));
        assert_eq!(flag(b"f16 c9 W", b'Z'), None);
        assert_eq!(flag(b"", b'Z'), None);
    }

    #[test]
    fn encoders() {
        let mut b = Vec::new();
        encode_store_quiet(&mut b, StoreCmd::Set, b"k", &item(0, 0, b"v", 0), 0);
        encode_store_quiet(&mut b, StoreCmd::Add, b"k2", &item(16, 60, b"", 0), 41);
        encode_store_quiet(&mut b, StoreCmd::Replace, b"k3", &item(1, 0, b"xy", 0), 2);
        encode_delete_quiet(&mut b, b"k", 9);
        encode_noop(&mut b);
        assert_eq!(
            b,
            b"ms k 1 q\r\nv\r\nms k2 0 T60 F16 ME q O41\r\n\r\nms k3 2 F1 MR q O2\r\nxy\r\nmd k q O9\r\nmn\r\n"
        );
        assert!(has_quiet_store(StoreCmd::Set));
        assert!(!has_quiet_store(StoreCmd::Cas));
        assert!(!has_quiet_store(StoreCmd::Append));
    }

    #[test]
    fn a_store_sends_its_time_as_memcached_reads_it() {
        // -1 (expire now, Django's timeout 0) wrapped to 32 bits: memcached 1.6.45 refuses
        // T4294967295 with "CLIENT_ERROR bad token in command line format"
        let mut b = Vec::new();
        encode_store_quiet(&mut b, StoreCmd::Set, b"k", &item(0, u32::MAX, b"v", 0), 3);
        assert_eq!(b, b"ms k 1 T-1 q\r\nv\r\n");
    }

    #[test]
    fn a_va_line_announces_its_unit() {
        assert_eq!(announced(b"VA 1000 f5 c9\r\n"), Some((15 + 1000 + 2, 1000)));
        assert_eq!(announced(b"VA 7\r\n"), Some((6 + 7 + 2, 7)));
        assert_eq!(announced(b"VA 1000"), None);
        assert_eq!(announced(b"HD f5\r\n"), None);
        assert_eq!(announced(b"VA 99999999999\r\n"), None); // over MAX_VALUE: garbage
    }
}
