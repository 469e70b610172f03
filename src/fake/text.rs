//! memcached's classic text commands over a `Store`, one command line at a time (`answer`; the
//! session, `session.rs`, frames the lines and sends meta verbs to `meta.rs`).
//!
//! Replies are memcached 1.6's, line for line: a text command with `noreply` gets no reply at
//! all. Kept equal to memcached by the differential tests (tests/api/test_fake_diff.py).

use std::io::Write;

use super::store::{parse_u64, py_int, Delta, Mode, Store, Stored, KEY_MAX};

pub const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";

/// A command line memcached would refuse: its error line.
pub struct BadLine(pub &'static [u8]);

/// A signed 32-bit number as memcached reads a time or a length: any 64-bit number, cut to 32
/// bits (`strict`: refused beyond 32 bits, as 1.6.45 refuses a `touch`/`gat` time).
pub fn int32(tok: &[u8], strict: bool) -> Result<i64, BadLine> {
    let n = py_int(tok).ok_or(BadLine(BAD_FORMAT))?;
    let in64 = (-(1i128 << 63)..1i128 << 63).contains(&n);
    let in32 = (-(1i128 << 31)..1i128 << 31).contains(&n);
    if !in64 || (strict && !in32) {
        return Err(BadLine(BAD_FORMAT));
    }
    Ok(i64::from(n as i32))
}

/// Client flags as memcached 1.6.18 reads them: any 64-bit number, cut to 32 bits.
fn u32_flags(tok: &[u8]) -> Result<u64, BadLine> {
    parse_u64(tok)
        .map(|n| n & 0xffff_ffff)
        .ok_or(BadLine(BAD_FORMAT))
}

/// The fewest tokens (the command included) a classic command takes: fewer is a malformed
/// line, which 1.6.45 answers with `BAD_FORMAT` (1.6.18: ERROR).
fn min_tokens(cmd: &[u8]) -> Option<usize> {
    Some(match cmd {
        b"get" | b"gets" | b"delete" | b"verbosity" => 2,
        b"gat" | b"gats" | b"incr" | b"decr" | b"touch" => 3,
        b"set" | b"add" | b"replace" | b"append" | b"prepend" => 5,
        b"cas" => 6,
        _ => return None,
    })
}

/// The storage command `cmd` names, if it is one.
pub(super) fn store_mode(cmd: &[u8]) -> Option<Mode> {
    Some(match cmd {
        b"set" => Mode::Set,
        b"add" => Mode::Add,
        b"replace" => Mode::Replace,
        b"append" => Mode::Append,
        b"prepend" => Mode::Prepend,
        b"cas" => Mode::Cas,
        _ => return None,
    })
}

fn store_reply(s: Stored) -> &'static [u8] {
    match s {
        Stored::Stored => b"STORED\r\n",
        Stored::NotStored => b"NOT_STORED\r\n",
        Stored::Exists => b"EXISTS\r\n",
        Stored::NotFound => b"NOT_FOUND\r\n",
        Stored::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
        Stored::NoMemory => b"SERVER_ERROR out of memory storing object\r\n",
    }
}

/// The reply to one classic command line (`tokens`, and its data block), into `out`; `quit`
/// sets `closing`.
pub(super) fn answer(
    closing: &mut bool,
    st: &mut Store,
    tokens: &[&[u8]],
    data: &[u8],
    out: &mut Vec<u8>,
) {
    if matches!(tokens.first(), Some(&(b"get" | b"gets"))) && tokens.len() > 1 {
        get(st, &tokens[1..], tokens[0] == b"gets", None, out);
        return;
    }
    match command(closing, st, tokens, data) {
        Ok(reply) => out.extend_from_slice(&reply),
        Err(BadLine(line)) => out.extend_from_slice(line),
    }
}

fn command(
    closing: &mut bool,
    st: &mut Store,
    tokens: &[&[u8]],
    data: &[u8],
) -> Result<Vec<u8>, BadLine> {
    let Some(&cmd) = tokens.first() else {
        return Ok(b"ERROR\r\n".to_vec());
    };
    if !st.legacy {
        if let Some(too_few) = min_tokens(cmd) {
            if tokens.len() < too_few {
                // 1.6.45: a known command short of its arguments
                let store = store_mode(cmd).is_some() && tokens.len() < 4;
                return Ok(if store { b"ERROR\r\n" } else { BAD_FORMAT }.to_vec());
            }
        }
    }
    if matches!(cmd, b"get" | b"gets") && tokens.len() > 1 {
        let mut out = Vec::new();
        get(st, &tokens[1..], cmd == b"gets", None, &mut out);
        return Ok(out);
    }
    let gat_min = if st.legacy { 1 } else { 2 };
    if matches!(cmd, b"gat" | b"gats") && tokens.len() > gat_min {
        if tokens.len() == 2 {
            return Ok(b"END\r\n".to_vec()); // 1.6.18: an exptime and no key finds nothing
        }
        let Ok(exptime) = int32(tokens[1], true) else {
            return Ok(BAD_EXPTIME.to_vec());
        };
        let mut out = Vec::new();
        get(st, &tokens[2..], cmd == b"gats", Some(exptime), &mut out);
        return Ok(out);
    }
    if let Some(mode) = store_mode(cmd) {
        return Ok(store_text(st, mode, tokens, data));
    }
    let noreply = tokens.last() == Some(&&b"noreply"[..]);
    if let Some(reply) = simple(st, cmd, tokens, noreply)? {
        return Ok(if noreply { Vec::new() } else { reply });
    }
    if cmd == b"quit" {
        *closing = true;
        return Ok(Vec::new());
    }
    Ok(b"ERROR\r\n".to_vec())
}

fn value_block(out: &mut Vec<u8>, key: &[u8], flags: u64, value: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    // (writing into a Vec cannot fail)
    let _ = write!(out, " {flags} {}", value.len());
    if let Some(c) = cas {
        let _ = write!(out, " {c}");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn get(st: &mut Store, keys: &[&[u8]], with_cas: bool, touch: Option<i64>, out: &mut Vec<u8>) {
    for &k in keys {
        if k.len() > KEY_MAX {
            out.extend_from_slice(BAD_FORMAT);
            return;
        }
        st.stats.cmd_get += 1;
        let found = match touch {
            Some(t) => st.touch(k, t),
            None => st.get(k),
        };
        match found {
            None => st.stats.get_misses += 1,
            Some(it) => {
                let cas = with_cas.then_some(it.cas);
                value_block(out, k, it.flags, &it.value, cas);
                st.stats.get_hits += 1;
            }
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// The parsed arguments of a storage command line: key, flags, exptime, length, CAS token.
type StoreArgs<'a> = (&'a [u8], u64, i64, i64, u64);

fn store_args<'a>(tokens: &[&'a [u8]], with_cas: bool) -> Result<StoreArgs<'a>, BadLine> {
    let key = tokens[1];
    let flags = u32_flags(tokens[2])?;
    let exptime = int32(tokens[3], false)?;
    let length = int32(tokens[4], false)?;
    let token = if with_cas {
        parse_u64(tokens[5])
    } else {
        Some(0)
    };
    match token {
        Some(t) if key.len() <= KEY_MAX && length >= 0 => Ok((key, flags, exptime, length, t)),
        _ => Err(BadLine(BAD_FORMAT)),
    }
}

fn store_text(st: &mut Store, mode: Mode, tokens: &[&[u8]], data: &[u8]) -> Vec<u8> {
    let with_cas = mode == Mode::Cas;
    let n = if with_cas { 6 } else { 5 };
    let noreply = tokens.len() == n + 1 && tokens[n] == b"noreply";
    if tokens.len() != n + usize::from(noreply) {
        return b"ERROR\r\n".to_vec();
    }
    let unless_noreply = |line: &[u8]| if noreply { Vec::new() } else { line.to_vec() };
    let (key, flags, exptime, length, token) = match store_args(tokens, with_cas) {
        Ok(a) => a,
        Err(BadLine(line)) => return unless_noreply(line),
    };
    let length = length as usize;
    if data.get(length..).unwrap_or_default() != b"\r\n" {
        return unless_noreply(b"CLIENT_ERROR bad data chunk\r\n");
    }
    let status = st.store(mode, key, &data[..length], flags, exptime, token);
    unless_noreply(store_reply(status))
}

/// The classic commands without a data block or values (None: not one of them).
fn simple(
    st: &mut Store,
    cmd: &[u8],
    tokens: &[&[u8]],
    noreply: bool,
) -> Result<Option<Vec<u8>>, BadLine> {
    let mut args = &tokens[1..(tokens.len() - usize::from(noreply)).max(1)];
    let mut rest_after_key = &tokens[tokens.len().min(2)..];
    if !st.legacy {
        // 1.6.45 reads the arguments it needs and ignores any others
        let keep = match cmd {
            b"incr" | b"decr" | b"touch" => Some(2),
            b"delete" | b"verbosity" => Some(1),
            b"flush_all" => Some(args.len().min(1)),
            _ => None,
        };
        if let Some(k) = keep.filter(|&k| args.len() > k) {
            args = &args[..k];
            rest_after_key = &[];
        }
    }
    let reply = |s: &[u8]| Ok(Some(s.to_vec()));
    match (cmd, args.len()) {
        (b"incr" | b"decr", 2) => Ok(Some(arith(st, cmd == b"incr", args[0], args[1]))),
        (b"delete", _) if tokens.len() > 1 => Ok(Some(delete(st, args, rest_after_key))),
        (b"touch", 2) => {
            if args[0].len() > KEY_MAX {
                return reply(BAD_FORMAT);
            }
            let Ok(exptime) = int32(args[1], true) else {
                return reply(BAD_EXPTIME);
            };
            reply(if st.touch(args[0], exptime).is_some() {
                b"TOUCHED\r\n"
            } else {
                b"NOT_FOUND\r\n"
            })
        }
        (b"flush_all", 0 | 1) => {
            let delay = match args.first() {
                Some(a) => int32(a, false)?,
                None => 0,
            };
            st.flush_all(delay);
            reply(b"OK\r\n")
        }
        (b"verbosity", 1) => {
            u32_flags(args[0])?;
            reply(b"OK\r\n")
        }
        (b"version", 0) => {
            let mut v = b"VERSION ".to_vec();
            v.extend_from_slice(&st.version);
            v.extend_from_slice(b"\r\n");
            Ok(Some(v))
        }
        (b"stats", 0 | 1) => Ok(Some(stats(st, args.first().copied().unwrap_or(b"")))),
        _ => Ok(None),
    }
}

fn arith(st: &mut Store, incr: bool, key: &[u8], delta: &[u8]) -> Vec<u8> {
    let delta = parse_u64(delta);
    if key.len() > KEY_MAX {
        return BAD_FORMAT.to_vec();
    }
    let Some(delta) = delta else {
        return b"CLIENT_ERROR invalid numeric delta argument\r\n".to_vec();
    };
    if st.out_of_memory && st.live(key) {
        return b"SERVER_ERROR out of memory\r\n".to_vec();
    }
    match st.delta(key, incr, delta) {
        Delta::NonNumeric => {
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".to_vec()
        }
        Delta::NotFound => b"NOT_FOUND\r\n".to_vec(),
        Delta::Value(n) => format!("{n}\r\n").into_bytes(),
    }
}

/// `delete <key> [0] [noreply]` (`after_key`: the tokens after the key, as memcached checks).
fn delete(st: &mut Store, args: &[&[u8]], after_key: &[&[u8]]) -> Vec<u8> {
    let fine: [&[&[u8]]; 4] = [&[], &[b"0"], &[b"noreply"], &[b"0", b"noreply"]];
    if !fine.contains(&after_key) {
        return b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            .to_vec();
    }
    let key = args.first().copied().unwrap_or(b"noreply");
    if key.len() > KEY_MAX {
        return BAD_FORMAT.to_vec();
    }
    if st.delete(key) {
        b"DELETED\r\n".to_vec()
    } else {
        b"NOT_FOUND\r\n".to_vec()
    }
}

fn stats(st: &mut Store, group: &[u8]) -> Vec<u8> {
    let now = st.t.now();
    let rows: Vec<(&str, String)> = match group {
        b"" => {
            let curr = st.curr_items();
            let bytes: usize = st.items.values().map(|i| i.value.len()).sum();
            let c = st.stats;
            vec![
                ("pid", "1".into()),
                ("uptime", (now - st.t.started).to_string()),
                ("time", now.to_string()),
                ("version", String::from_utf8_lossy(&st.version).into_owned()),
                ("pointer_size", "64".into()),
                ("curr_items", curr.to_string()),
                ("bytes", bytes.to_string()),
                ("limit_maxbytes", (64 * 1024 * 1024).to_string()),
                ("threads", "1".into()),
                ("cmd_get", c.cmd_get.to_string()),
                ("cmd_set", c.cmd_set.to_string()),
                ("get_hits", c.get_hits.to_string()),
                ("get_misses", c.get_misses.to_string()),
                ("total_items", c.total_items.to_string()),
            ]
        }
        b"settings" => vec![
            ("item_size_max", st.item_size_max.to_string()),
            ("cas_enabled", "yes".into()),
        ],
        b"items" | b"slabs" | b"sizes" | b"conns" => vec![],
        _ => return b"ERROR\r\n".to_vec(),
    };
    let mut out = Vec::new();
    for (k, v) in rows {
        out.extend_from_slice(format!("STAT {k} {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"END\r\n");
    out
}
