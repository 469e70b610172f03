//! memcached's binary protocol over a `Store`: the requests fastmc sends with `binary=True`.
//!
//! GET/GETK/GETQ/GETKQ, GAT(K)(Q), TOUCH, SET/ADD/REPLACE (a CAS makes them a `cas`),
//! APPEND/PREPEND, their quiet forms, DELETE(Q), INCREMENT/DECREMENT(Q) (created from `initial`
//! unless the expiry is 0xffffffff), FLUSH(Q), NOOP, VERSION, STAT, QUIT(Q); anything else is
//! `Unknown command`. Answers are memcached 1.6's, quiet requests answered only when they fail (a
//! quiet get: only on a hit); binary expiry times are unsigned. SASL is not spoken.

use super::store::{Delta, Mode, Store, Stored};

pub const HEADER: usize = 24;

fn error_text(status: u16) -> &'static [u8] {
    match status {
        0x01 => b"Not found",
        0x02 => b"Data exists for key.",
        0x03 => b"Too large.",
        0x04 => b"Invalid arguments",
        0x05 => b"Not stored.",
        0x06 => b"Non-numeric server-side value for incr or decr",
        0x82 => b"Out of memory",
        _ => b"Unknown command",
    }
}

/// The opcode a quiet opcode is the quiet form of.
fn loud(op: u8) -> Option<u8> {
    Some(match op {
        0x09 => 0x00,
        0x0D => 0x0C,
        0x11..=0x18 => op - 0x10,
        0x19 => 0x0E,
        0x1A => 0x0F,
        0x1E => 0x1D,
        0x24 => 0x23,
        _ => return None,
    })
}

/// The size of the request at the start of `buf`: None while its header is incomplete or its
/// body is, `Some(None)` if it is not a request.
pub fn request_size(buf: &[u8]) -> Option<Option<usize>> {
    if buf.len() < HEADER {
        return None;
    }
    if buf[0] != 0x80 {
        return Some(None);
    }
    let size = HEADER + u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    (buf.len() >= size).then_some(Some(size))
}

/// A response frame.
struct Reply<'a> {
    op: u8,
    opaque: [u8; 4],
    out: &'a mut Vec<u8>,
}

impl Reply<'_> {
    fn send(&mut self, status: u16, extras: &[u8], key: &[u8], value: &[u8], cas: u64) {
        let body = extras.len() + key.len() + value.len();
        let o = &mut *self.out;
        o.extend_from_slice(&[0x81, self.op]);
        o.extend_from_slice(&(key.len() as u16).to_be_bytes());
        o.extend_from_slice(&[extras.len() as u8, 0]);
        o.extend_from_slice(&status.to_be_bytes());
        o.extend_from_slice(&(body as u32).to_be_bytes());
        o.extend_from_slice(&self.opaque);
        o.extend_from_slice(&cas.to_be_bytes());
        for part in [extras, key, value] {
            o.extend_from_slice(part);
        }
    }

    fn ok(&mut self) {
        self.send(0, b"", b"", b"", 0);
    }

    fn error(&mut self, status: u16) {
        self.send(status, b"", b"", error_text(status), 0);
    }
}

fn be32(b: &[u8]) -> u32 {
    b.get(..4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be64(b: &[u8]) -> u64 {
    b.get(..8).map_or(0, |b| {
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    })
}

/// The parts of one request.
struct Request<'a> {
    quiet: bool,
    cmd: u8,
    key: &'a [u8],
    extras: &'a [u8],
    value: &'a [u8],
    cas: u64,
}

/// Answer one complete request `packet` (header and body) into `out`; true to close.
pub fn command(st: &mut Store, packet: &[u8], out: &mut Vec<u8>) -> bool {
    let op = packet[1];
    let keylen = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    let extlen = usize::from(packet[4]);
    let bodylen = packet.len() - HEADER;
    let mut r = Reply {
        op,
        opaque: [packet[12], packet[13], packet[14], packet[15]],
        out,
    };
    if keylen > 250 || keylen + extlen > bodylen {
        r.error(0x04);
        return true;
    }
    let body = &packet[HEADER..];
    let q = Request {
        quiet: loud(op).is_some(),
        cmd: loud(op).unwrap_or(op),
        extras: &body[..extlen],
        key: &body[extlen..extlen + keylen],
        value: &body[extlen + keylen..],
        cas: be64(&packet[16..24]),
    };
    answer(st, &q, &mut r)
}

fn answer(st: &mut Store, q: &Request<'_>, r: &mut Reply<'_>) -> bool {
    match q.cmd {
        0x00 | 0x0C | 0x1D | 0x23 | 0x1C => get(st, q, r),
        0x01 | 0x02 | 0x03 | 0x0E | 0x0F => store(st, q, r),
        0x04 => match st.get(q.key).map(|it| it.cas) {
            None => r.error(0x01),
            Some(c) if q.cas != 0 && q.cas != c => r.error(0x02),
            Some(_) => {
                st.items.remove(q.key);
                if !q.quiet {
                    r.ok();
                }
            }
        },
        0x05 | 0x06 if q.extras.len() == 20 => arith(st, q, r),
        0x08 => {
            let delay = if q.extras.len() == 4 {
                be32(q.extras)
            } else {
                0
            };
            st.flush_all(i64::from(delay));
            if !q.quiet {
                r.ok();
            }
        }
        0x0A => r.ok(),
        0x0B => {
            let v = st.version.clone();
            r.send(0, b"", b"", &v, 0);
        }
        0x07 => {
            if !q.quiet {
                r.ok();
            }
            return true;
        }
        0x10 => stats(st, q.key, r),
        _ => r.error(0x81),
    }
    false
}

fn get(st: &mut Store, q: &Request<'_>, r: &mut Reply<'_>) {
    let touching = matches!(q.cmd, 0x1C | 0x1D | 0x23);
    if touching && q.extras.len() != 4 {
        r.error(0x04);
        return;
    }
    let found = if touching {
        st.touch(q.key, i64::from(be32(q.extras)))
    } else {
        st.get(q.key)
    };
    let with_key = matches!(q.cmd, 0x0C | 0x23);
    let Some(it) = found else {
        if q.quiet {
        } else if with_key {
            r.send(0x01, b"", q.key, b"", 0);
        } else {
            r.error(0x01);
        }
        return;
    };
    let flags = (it.flags as u32).to_be_bytes();
    let value: &[u8] = if q.cmd == 0x1C { b"" } else { &it.value };
    let key = if with_key { q.key } else { b"" };
    r.send(0, &flags, key, value, it.cas);
}

fn store(st: &mut Store, q: &Request<'_>, r: &mut Reply<'_>) {
    let mut mode = match q.cmd {
        0x01 => Mode::Set,
        0x02 => Mode::Add,
        0x03 => Mode::Replace,
        0x0E => Mode::Append,
        _ => Mode::Prepend,
    };
    let (flags, exptime) = if q.extras.len() == 8 {
        (be32(q.extras), be32(&q.extras[4..]))
    } else {
        (0, 0)
    };
    if q.cas != 0 && matches!(mode, Mode::Set | Mode::Replace) {
        mode = Mode::Cas;
    }
    let status = st.store(
        mode,
        q.key,
        q.value,
        u64::from(flags),
        i64::from(exptime),
        q.cas,
    );
    match status {
        Stored::Stored => {
            let cas = st.items.get(q.key).map_or(0, |it| it.cas);
            if !q.quiet {
                r.send(0, b"", b"", b"", cas);
            }
        }
        Stored::TooLarge => r.error(0x03),
        Stored::NoMemory => r.error(0x82),
        Stored::Exists => r.error(0x02),
        Stored::NotFound => r.error(0x01),
        // add finds the key, replace misses it, append/prepend either
        Stored::NotStored => r.error(match mode {
            Mode::Add => 0x02,
            Mode::Replace => 0x01,
            _ => 0x05,
        }),
    }
}

fn arith(st: &mut Store, q: &Request<'_>, r: &mut Reply<'_>) {
    let (delta, initial, exptime) = (be64(q.extras), be64(&q.extras[8..]), be32(&q.extras[16..]));
    let n = match st.delta(q.key, q.cmd == 0x05, delta) {
        Delta::NonNumeric => return r.error(0x06),
        Delta::Value(n) => n,
        Delta::NotFound if exptime == 0xFFFF_FFFF => return r.error(0x01),
        Delta::NotFound => {
            let exp = st.t.realtime(i64::from(exptime));
            st.link(q.key, initial.to_string().into_bytes(), 0, exp, 0);
            initial
        }
    };
    let cas = st.items.get(q.key).map_or(0, |it| it.cas);
    if !q.quiet {
        r.send(0, b"", b"", &n.to_be_bytes(), cas);
    }
}

fn stats(st: &mut Store, group: &[u8], r: &mut Reply<'_>) {
    if !group.is_empty() {
        return r.error(0x01);
    }
    let now = st.t.now();
    let c = st.stats;
    let rows: [(&[u8], Vec<u8>); 10] = [
        (b"pid", b"1".to_vec()),
        (b"uptime", (now - st.t.started).to_string().into_bytes()),
        (b"time", now.to_string().into_bytes()),
        (b"version", st.version.clone()),
        (b"curr_items", st.curr_items().to_string().into_bytes()),
        (b"cmd_get", c.cmd_get.to_string().into_bytes()),
        (b"cmd_set", c.cmd_set.to_string().into_bytes()),
        (b"get_hits", c.get_hits.to_string().into_bytes()),
        (b"get_misses", c.get_misses.to_string().into_bytes()),
        (b"total_items", c.total_items.to_string().into_bytes()),
    ];
    for (k, v) in rows {
        r.send(0, b"", k, &v, 0);
    }
    r.ok();
}
