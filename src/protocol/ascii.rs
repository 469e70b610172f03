//! Line framing shared by the two line-based protocols, text and meta: finding a reply line,
//! reading decimal numbers, mapping the error lines (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`)
//! both protocols answer with, and writing decimal numbers into requests. Pure: depends only on
//! `error`.

use crate::error::{Error, Result};

/// Longest reply line we accept before deciding the peer is not speaking the protocol.
pub const MAX_LINE: usize = 8 * 1024;
/// Largest data block we accept in a `VALUE` reply (memcached's own maximum item size is 1 GiB).
pub const MAX_VALUE: usize = 1 << 30;

/// Append an expiry time (already wrapped to 32 bits) as memcached reads every expiry: a signed
/// 32-bit number, so 4294967295 goes out as -1 (expire now). memcached 1.6.18 cast a larger
/// number to 32 bits itself; 1.6.45 refuses one beyond 2**31 - 1 in `touch`, `gat` and the meta
/// commands' `T` flag ("CLIENT_ERROR invalid exptime argument", "bad token") while the text
/// stores still take it, so the signed form keeps one meaning on both.
pub(super) fn push_exptime(buf: &mut Vec<u8>, exptime: u32) {
    let signed = exptime as i32;
    if signed < 0 {
        buf.push(b'-');
    }
    push_u64(buf, u64::from(signed.unsigned_abs()));
}

/// Two decimal digits for each number below 100, for `push_u64`.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Append `n` in decimal, two digits per division: a batch writes one or two numbers per key
/// (the value's length, the opaque token).
pub(super) fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    // Up to four digits (flags, short lengths, a batch's opaque tokens) as fixed-size copies,
    // which compile to plain stores.
    let pair = |d: u64| {
        let d = d as usize * 2;
        [DIGIT_PAIRS[d], DIGIT_PAIRS[d + 1]]
    };
    if n < 10 {
        buf.push(b'0' + n as u8);
        return;
    }
    if n < 100 {
        buf.extend_from_slice(&pair(n));
        return;
    }
    if n < 1000 {
        let [a, b] = pair(n % 100);
        buf.extend_from_slice(&[b'0' + (n / 100) as u8, a, b]);
        return;
    }
    if n < 10_000 {
        let ([a, b], [c, d]) = (pair(n / 100), pair(n % 100));
        buf.extend_from_slice(&[a, b, c, d]);
        return;
    }
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        i -= 1;
        tmp[i] = b'0' + n as u8;
    }
    buf.extend_from_slice(&tmp[i..]);
}

/// Find the end of the line that starts at `buf[0]`: the index of its `\r\n`.
pub(super) fn find_line(buf: &[u8]) -> Result<Option<usize>> {
    // A status line (`STORED`, `END`, `NOT_FOUND`) is shorter than the setup of `memchr`'s
    // vector search: the first bytes are scanned a word at a time.
    let nl = match newline_in(&buf[..buf.len().min(SHORT_LINE)]) {
        None if buf.len() > SHORT_LINE => {
            memchr::memchr(b'\n', &buf[SHORT_LINE..]).map(|i| i + SHORT_LINE)
        }
        found => found,
    };
    match nl {
        // The same limit whether the line arrived whole or in pieces.
        Some(nl) if nl > MAX_LINE => Err(Error::Protocol("reply line too long".into())),
        Some(nl) => {
            if nl == 0 || buf[nl - 1] != b'\r' {
                return Err(Error::Protocol("reply line not terminated by CRLF".into()));
            }
            Ok(Some(nl - 1))
        }
        None if buf.len() > MAX_LINE => Err(Error::Protocol("reply line too long".into())),
        None => Ok(None),
    }
}

/// How far `find_line` looks a word at a time before it searches.
const SHORT_LINE: usize = 24;

/// The first `\n` of a short `s`, eight bytes at a time: in `w ^ 0x0a0a..`, a newline is a zero
/// byte, and the lowest zero byte sets its own high bit in `x - 0x0101.. & !x` (a borrow only
/// passes upwards, from a byte that is itself zero).
fn newline_in(s: &[u8]) -> Option<usize> {
    if s.len() < 8 {
        return s.iter().position(|&b| b == b'\n');
    }
    super::words(s).find_map(|(at, w)| {
        let x = w ^ (super::ONES * u64::from(b'\n'));
        let zero = x.wrapping_sub(super::ONES) & !x & super::HIGH;
        (zero != 0).then(|| at + (zero.trailing_zeros() / 8) as usize)
    })
}

/// A decimal number of at most 20 digits that fits a `u64`.
pub(super) fn parse_dec_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    Some(n)
}

/// The error for a line that is not the protocol (its first 64 bytes shown).
pub(super) fn garbage(line: &[u8]) -> Error {
    let shown: String = String::from_utf8_lossy(&line[..line.len().min(64)]).into_owned();
    Error::Protocol(format!("unexpected reply {shown:?}"))
}

/// The most of an error line's text an error keeps. memcached's messages are short; a failure
/// is copied to every key it fails, so a long line from a hostile server must not be (libmemcached
/// keeps at most 2,048 bytes of it).
pub const MAX_ERROR_TEXT: usize = 256;

/// An error line's text, cut to `MAX_ERROR_TEXT` bytes.
fn error_text(msg: &[u8]) -> String {
    let msg = msg.strip_prefix(b" ").unwrap_or(msg);
    String::from_utf8_lossy(&msg[..msg.len().min(MAX_ERROR_TEXT)]).into_owned()
}

/// Map an error line to its per-request failure, if it is one.
pub(super) fn error_line(line: &[u8]) -> Option<Error> {
    if line == b"ERROR" {
        return Some(Error::UnknownCommand);
    }
    if let Some(msg) = line.strip_prefix(b"CLIENT_ERROR") {
        return Some(Error::ClientError(error_text(msg)));
    }
    if let Some(msg) = line.strip_prefix(b"SERVER_ERROR") {
        let msg = msg.strip_prefix(b" ").unwrap_or(msg);
        if msg.starts_with(b"object too large") {
            return Some(Error::TooBig);
        }
        if msg.starts_with(b"out of memory") {
            return Some(Error::OutOfMemory);
        }
        return Some(Error::ServerError(error_text(msg)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time search finds the first newline wherever it is (before, inside and
    /// after the words it scans, and in every byte of a word), as a byte-by-byte search does.
    #[test]
    fn the_first_newline_is_found_wherever_it_is() {
        for len in 0..64 {
            for at in 0..=len {
                for other in [b'x', 0x8a, 0x0b, 0x09, 0x00, 0xff] {
                    let mut s = vec![other; len];
                    if at < len {
                        s[at] = b'\n';
                        // A second newline after the first must not be taken for it.
                        if at + 3 < len {
                            s[at + 3] = b'\n';
                        }
                    }
                    let expect = s.iter().position(|&b| b == b'\n');
                    assert_eq!(
                        newline_in(&s[..len.min(SHORT_LINE)]),
                        expect.filter(|&i| i < SHORT_LINE),
                        "{s:?}"
                    );
                    let found = match find_line(&s) {
                        Ok(Some(end)) => Some(end + 1),
                        Ok(None) => None,
                        Err(_) => expect, // a newline with no CR before it
                    };
                    assert_eq!(found, expect, "{s:?}");
                }
            }
        }
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        let mut probes: Vec<u64> = (0..=1_100).collect();
        for p in 0..20 {
            let t = 10u64.pow(p);
            probes.extend([t - 1, t, t + 1, t.saturating_mul(9).saturating_add(1)]);
        }
        probes.extend([u64::MAX, u64::MAX - 1, 4_294_967_295]);
        for n in probes {
            let mut buf = b"x".to_vec();
            push_u64(&mut buf, n);
            assert_eq!(&buf[1..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn an_error_line_keeps_a_bounded_text() {
        let mut line = b"SERVER_ERROR ".to_vec();
        line.resize(MAX_LINE, b'x');
        match error_line(&line) {
            Some(Error::ServerError(m)) => assert_eq!(m.len(), MAX_ERROR_TEXT),
            other => panic!("{other:?}"),
        }
        let short = error_line(b"CLIENT_ERROR bad data chunk");
        assert_eq!(short, Some(Error::ClientError("bad data chunk".into())));
    }
}
