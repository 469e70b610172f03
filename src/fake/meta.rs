//! memcached's meta commands (`mg`, `ms`, `md`, `ma`, `mn`) over a `Store`.
//!
//! The flags fastmc sends (`src/protocol/meta.rs`, `src/client/op/meta.rs`) are spoken: quiet writes,
//! lease reads and releases, invalidation, `t s k T E O` and `ma`. Replies follow memcached 1.6.45:
//! the requested return flags in the order they were asked, then `Z`, `X`, `W`; `q` hides only `HD`
//! (and `EN` for `mg`). Not spoken: base64 keys (`b`); `h`/`l`/`u` answer 0.

use super::store::{parse_u64, py_int, Delta, Item, Mode, Store, Stored, Times, KEY_MAX};

const BAD: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";

/// A refused command: its error line.
type Refused = &'static [u8];

/// A meta command's flags: the letters in order, and each one's token.
struct Flags<'a>(Vec<(u8, &'a [u8])>);

impl<'a> Flags<'a> {
    fn new(tokens: &[&'a [u8]]) -> Result<Flags<'a>, Refused> {
        let mut order: Vec<(u8, &'a [u8])> = Vec::with_capacity(tokens.len());
        for t in tokens {
            let (c, tok) = (t[0], &t[1..]);
            if order.iter().any(|&(o, _)| o == c) {
                return Err(b"CLIENT_ERROR duplicate flag\r\n");
            }
            order.push((c, tok));
        }
        Ok(Flags(order))
    }

    fn tok(&self, c: u8) -> Option<&'a [u8]> {
        self.0.iter().find(|&&(o, _)| o == c).map(|&(_, t)| t)
    }

    fn has(&self, c: u8) -> bool {
        self.tok(c).is_some()
    }

    /// The flag's token as an unsigned 64-bit number (digits only).
    fn num(&self, c: u8) -> Result<u64, Refused> {
        let raw = self.tok(c).unwrap_or_default();
        match parse_u64(raw) {
            Some(v) if !raw.is_empty() && raw.iter().all(u8::is_ascii_digit) => Ok(v),
            _ => Err(BAD_TOKEN),
        }
    }

    /// `num`, or `default` without the flag.
    fn num_or(&self, c: u8, default: u64) -> Result<u64, Refused> {
        if self.has(c) {
            self.num(c)
        } else {
            Ok(default)
        }
    }

    /// The flag's token as a signed 32-bit number (a time).
    fn time(&self, c: u8) -> Result<i64, Refused> {
        match py_int(self.tok(c).unwrap_or_default()) {
            Some(n) if (-(1i128 << 31)..1i128 << 31).contains(&n) => Ok(n as i64),
            _ => Err(BAD_TOKEN),
        }
    }

    /// The `O` and `k` flags copied back, as every reply carries them.
    fn echo(&self, out: &mut Vec<u8>, key: &[u8]) {
        for &(c, tok) in &self.0 {
            if c == b'O' {
                push(out, &[b" O", tok]);
            } else if c == b'k' {
                push(out, &[b" k", key]);
            }
        }
    }

    /// `code` with the echoed flags, a line.
    fn answer(&self, code: &[u8], key: &[u8]) -> Vec<u8> {
        let mut out = code.to_vec();
        self.echo(&mut out, key);
        out.extend_from_slice(b"\r\n");
        out
    }

    /// The `M` flag's mode letter, upper-cased (`default` without the flag).
    fn mode(&self, default: u8) -> Option<u8> {
        match self.tok(b'M') {
            None => Some(default),
            Some([m]) => Some(m.to_ascii_uppercase()),
            Some(_) => None,
        }
    }
}

fn push(out: &mut Vec<u8>, parts: &[&[u8]]) {
    for p in parts {
        out.extend_from_slice(p);
    }
}

fn push_num(out: &mut Vec<u8>, flag: &[u8], n: impl std::fmt::Display) {
    out.extend_from_slice(flag);
    out.extend_from_slice(n.to_string().as_bytes());
}

/// The meta commands the fake serves (`command`): a verb added there is listed here, and the
/// session hands it over.
pub const VERBS: [&[u8]; 6] = [b"mg", b"ms", b"md", b"ma", b"mn", b"me"];

/// The reply to one meta command (`data`: an `ms` data block with its CRLF).
pub fn command(st: &mut Store, tokens: &[&[u8]], data: &[u8]) -> Vec<u8> {
    let cmd = tokens[0];
    if cmd == b"mn" {
        return b"MN\r\n".to_vec();
    }
    let need = if cmd == b"ms" { 3 } else { 2 };
    if tokens.len() < need || tokens[1].len() > KEY_MAX {
        return BAD.to_vec();
    }
    let r = if cmd == b"ms" {
        Flags::new(&tokens[3..]).and_then(|f| ms(st, tokens[1], tokens[2], &f, data))
    } else {
        Flags::new(&tokens[2..]).and_then(|f| match cmd {
            b"mg" => mg(st, tokens[1], &f),
            b"md" => md(st, tokens[1], &f),
            b"me" => Ok(me(st, tokens[1])),
            _ => ma(st, tokens[1], &f),
        })
    };
    r.unwrap_or_else(|line| line.to_vec())
}

fn ttl(t: &Times, it: &Item) -> String {
    if it.exptime == 0 {
        "-1".into()
    } else {
        (it.exptime - t.now()).to_string()
    }
}

fn mg(st: &mut Store, key: &[u8], f: &Flags<'_>) -> Result<Vec<u8>, Refused> {
    let mut live = st.live(key);
    st.stats.cmd_get += 1;
    let mut created = false;
    if !live && f.has(b'N') {
        let exp = st.t.realtime(f.time(b'N')?);
        let cas = f.num_or(b'E', 0)?;
        st.link(key, Vec::new(), 0, exp, cas);
        (created, live) = (true, true);
    }
    let it = match st.items.get_mut(key) {
        Some(it) if live => it,
        _ => {
            st.stats.get_misses += 1;
            return Ok(if f.has(b'q') {
                Vec::new()
            } else {
                f.answer(b"EN", key)
            });
        }
    };
    st.stats.get_hits += 1;
    let value = f.has(b'v') && !(f.has(b'C') && it.cas == f.num(b'C')?);
    let mut head = if value {
        format!("VA {}", it.value.len()).into_bytes()
    } else {
        b"HD".to_vec()
    };
    let mut won = false;
    for &(c, tok) in &f.0 {
        match c {
            b'T' => it.exptime = st.t.realtime(f.time(b'T')?),
            b'N' if created => won = true,
            b'R' => {
                let recache = st.t.realtime(f.time(b'R')?);
                if !it.token_sent && !created && it.exptime != 0 && it.exptime < recache {
                    won = true;
                }
            }
            b's' => push_num(&mut head, b" s", it.value.len()),
            b't' => push(&mut head, &[b" t", ttl(&st.t, it).as_bytes()]),
            b'c' => push_num(&mut head, b" c", it.cas),
            b'f' => push_num(&mut head, b" f", it.flags),
            b'h' => head.extend_from_slice(b" h0"),
            b'l' => head.extend_from_slice(b" l0"),
            b'O' => push(&mut head, &[b" O", tok]),
            b'k' => push(&mut head, &[b" k", key]),
            _ => {}
        }
    }
    if it.token_sent {
        head.extend_from_slice(b" Z");
    }
    if it.stale {
        head.extend_from_slice(b" X");
        won |= !it.token_sent;
    }
    if won {
        head.extend_from_slice(b" W");
        it.token_sent = true;
    }
    head.extend_from_slice(b"\r\n");
    if value {
        push(&mut head, &[&it.value, b"\r\n"]);
    }
    Ok(head)
}

/// `me <key>`: the item's metadata as memcached 1.6.45 words it (`exp` the seconds left, -1
/// for none). The fake keeps no access record: `la` counts from the last write and `fetch` is
/// always `no`, as its `mg` answers `h0 l0`; `size` is memcached's item size (its 48-byte header,
/// the key and value with their terminators, the CAS).
fn me(st: &mut Store, key: &[u8]) -> Vec<u8> {
    if !st.live(key) {
        return b"EN\r\n".to_vec();
    }
    let Some(it) = st.items.get(key) else {
        return b"EN\r\n".to_vec();
    };
    let size = 48 + key.len() + 1 + it.value.len() + 2 + 8;
    let la = (st.t.now() - it.time).max(0);
    let mut out = b"ME ".to_vec();
    out.extend_from_slice(key);
    let fields = format!(
        " exp={} la={la} cas={} fetch=no cls=1 size={size}\r\n",
        ttl(&st.t, it),
        it.cas
    );
    out.extend_from_slice(fields.as_bytes());
    out
}

fn store_mode(m: u8) -> Option<Mode> {
    Some(match m {
        b'S' => Mode::Set,
        b'E' => Mode::Add,
        b'R' => Mode::Replace,
        b'A' => Mode::Append,
        b'P' => Mode::Prepend,
        _ => return None,
    })
}

fn ms(
    st: &mut Store,
    key: &[u8],
    size: &[u8],
    f: &Flags<'_>,
    data: &[u8],
) -> Result<Vec<u8>, Refused> {
    let Some(n) = py_int(size) else {
        return Err(BAD);
    };
    let tail = usize::try_from(n).ok().and_then(|n| data.get(n..));
    if n < 0 || tail.unwrap_or_default() != b"\r\n" {
        return Err(b"CLIENT_ERROR bad data chunk\r\n");
    }
    let value = &data[..n as usize];
    let Some(mut mode) = f.mode(b'S').and_then(store_mode) else {
        return Err(b"CLIENT_ERROR invalid mode for ms M token\r\n");
    };
    let flags = f.num_or(b'F', 0)?;
    if flags >= 1 << 32 {
        return Err(BAD_TOKEN);
    }
    let mut exptime = if f.has(b'T') { f.time(b'T')? } else { 0 };
    let mut cas = f.num_or(b'C', 0)?;
    if f.has(b'C') && matches!(mode, Mode::Set | Mode::Replace) {
        mode = Mode::Cas;
    }
    let old_cas = st.get(key).map(|it| it.cas);
    let appends = matches!(mode, Mode::Append | Mode::Prepend);
    if appends && old_cas.is_none() && f.has(b'N') {
        (mode, exptime) = (Mode::Set, f.time(b'N')?);
    } else if appends && f.has(b'C') && old_cas.is_some_and(|c| c != cas) {
        return Ok(f.answer(b"EX", key));
    }
    let mut stale = false;
    if let Some(oc) = old_cas.filter(|&oc| mode == Mode::Cas && f.has(b'I') && cas < oc) {
        (cas, stale) = (oc, true); // an invalidated write: stored, but marked stale
    }
    let status = st.store(mode, key, value, flags, exptime, cas);
    let code: &[u8] = match status {
        Stored::TooLarge => return Ok(b"SERVER_ERROR object too large for cache\r\n".to_vec()),
        Stored::NoMemory => return Ok(b"SERVER_ERROR out of memory storing object\r\n".to_vec()),
        Stored::Stored => b"HD",
        Stored::NotStored => b"NS",
        Stored::Exists => b"EX",
        Stored::NotFound => b"NF",
    };
    let mut it = None;
    if status == Stored::Stored {
        if let Some(item) = st.items.get_mut(key) {
            item.stale = stale;
            if f.has(b'E') {
                item.cas = f.num(b'E')?;
            }
            it = Some((item.cas, item.value.len()));
        }
    }
    if code == b"HD" && f.has(b'q') {
        return Ok(Vec::new());
    }
    let mut out = code.to_vec();
    for &(c, tok) in &f.0 {
        match c {
            b'O' => push(&mut out, &[b" O", tok]),
            b'k' => push(&mut out, &[b" k", key]),
            b'c' => push_num(&mut out, b" c", it.map_or(0, |i| i.0)),
            b's' => {
                if let Some((_, len)) = it {
                    push_num(&mut out, b" s", len);
                }
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

fn md(st: &mut Store, key: &[u8], f: &Flags<'_>) -> Result<Vec<u8>, Refused> {
    let Some(it) = st.get(key) else {
        return Ok(f.answer(b"NF", key));
    };
    let (cas, exptime) = (it.cas, it.exptime);
    if f.has(b'C') && cas != f.num(b'C')? {
        return Ok(f.answer(b"EX", key));
    }
    if f.has(b'x') {
        let flags = f.num_or(b'F', 0)?;
        st.link(key, Vec::new(), flags, exptime, cas);
    }
    if f.has(b'I') {
        let exp = if f.has(b'T') {
            Some(st.t.realtime(f.time(b'T')?))
        } else {
            None
        };
        if let Some(it) = st.items.get_mut(key) {
            it.exptime = exp.unwrap_or(it.exptime);
            (it.stale, it.token_sent) = (true, false);
        }
        let new_cas = if f.has(b'E') {
            f.num(b'E')?
        } else {
            st.next_cas()
        };
        if let Some(it) = st.items.get_mut(key) {
            it.cas = new_cas;
        }
    } else if !f.has(b'x') {
        st.items.remove(key);
    }
    Ok(if f.has(b'q') {
        Vec::new()
    } else {
        f.answer(b"HD", key)
    })
}

fn ma(st: &mut Store, key: &[u8], f: &Flags<'_>) -> Result<Vec<u8>, Refused> {
    let incr = match f.mode(b'I') {
        Some(b'I' | b'+') => true,
        Some(b'D' | b'-') => false,
        _ => return Err(b"CLIENT_ERROR invalid mode for ma M token\r\n"),
    };
    let delta = f.num_or(b'D', 1)?;
    let old_cas = st.get(key).map(|it| it.cas);
    if f.has(b'C') && old_cas.is_some() && old_cas != Some(f.num(b'C')?) {
        return Ok(f.answer(b"EX", key));
    }
    let number = match old_cas {
        None if f.has(b'N') => {
            let initial = f.num_or(b'J', 0)?;
            let exp = st.t.realtime(f.time(b'N')?);
            st.link(key, initial.to_string().into_bytes(), 0, exp, 0);
            initial
        }
        None => return Ok(f.answer(b"NF", key)),
        Some(_) => match st.delta(key, incr, delta) {
            Delta::Value(n) => n,
            Delta::NotFound => return Ok(f.answer(b"NF", key)),
            Delta::NonNumeric => {
                return Err(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
            }
        },
    };
    let exp = if f.has(b'T') {
        Some(st.t.realtime(f.time(b'T')?))
    } else {
        None
    };
    let Some(it) = st.items.get_mut(key) else {
        return Ok(f.answer(b"NF", key));
    };
    if let Some(e) = exp {
        it.exptime = e;
    }
    if f.has(b'q') && !f.has(b'v') {
        return Ok(Vec::new());
    }
    let digits = number.to_string();
    let mut out = if f.has(b'v') {
        format!("VA {}", digits.len()).into_bytes()
    } else {
        b"HD".to_vec()
    };
    for &(c, tok) in &f.0 {
        match c {
            b'c' => push_num(&mut out, b" c", it.cas),
            b't' => push(&mut out, &[b" t", ttl(&st.t, it).as_bytes()]),
            b'O' => push(&mut out, &[b" O", tok]),
            b'k' => push(&mut out, &[b" k", key]),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    if f.has(b'v') {
        push(&mut out, &[digits.as_bytes(), b"\r\n"]);
    }
    Ok(out)
}
