//! The stored bytes of a structured value (`py::structured`: JSON or msgpack) checked before
//! anything decodes them: nesting depth, msgpack's framing (lengths within the bytes, no
//! extension type, nothing after the value), no JSON number too long to parse in linear time,
//! and what decoding could cost in memory. Pure, as `pickle_scan`: no I/O, no Python; linear in
//! the bytes whatever the lengths inside claim.

/// How deep a structured value may nest (a list or dict is one level), written or read: deep
/// enough for any document, shallow enough that decoding never nears Python's recursion limit.
pub const MAX_DEPTH: usize = 100;
/// The longest run of digits a JSON value may hold: CPython's default `int` string limit
/// (`sys.set_int_max_str_digits`), which older versions lack (parsing more is quadratic).
const MAX_DIGITS: usize = 4300;

/// What a scan of stored bytes found wrong.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    TooDeep,
    Malformed(&'static str),
}

/// What decoding may cost, counted by the scans: generous per element, so that the objects a
/// value becomes (and the text it is parsed from) take no more than `bytes()`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Lists and dicts (a dict with its keys table, a list with its slots' first allocation).
    containers: u64,
    /// Every other element, and each dict entry and list slot.
    elements: u64,
    /// Bytes of text and binary payloads, and of the copy a decoder parses.
    payload: u64,
}

impl Cost {
    /// Bytes of Python objects, at most.
    pub fn bytes(&self) -> u64 {
        self.containers * 240 + self.elements * 80 + self.payload * 4
    }
}

/// Check JSON text's nesting (outside strings) and its runs of digits before it is parsed, and
/// count what parsing it may cost: each `,` and `:` separates one element more.
pub fn scan_json(data: &[u8]) -> Result<Cost, Scan> {
    let (mut depth, mut digits) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut cost = Cost {
        elements: 1,
        // The text as a str (up to 4 bytes a character), and its strings, as much again.
        payload: 2 * data.len() as u64,
        ..Cost::default()
    };
    for &b in data {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        if b.is_ascii_digit() {
            digits += 1;
            if digits > MAX_DIGITS {
                return Err(Scan::Malformed("a number of more than 4300 digits"));
            }
            continue;
        }
        digits = 0;
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Scan::TooDeep);
                }
                cost.containers += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => cost.elements += 1,
            _ => {}
        }
    }
    Ok(cost)
}

/// Walk msgpack's framing: exactly one object, every length within the bytes, no extension
/// type (fastmc writes none), nesting within `MAX_DEPTH`; and count what decoding it may cost.
/// Linear in the bytes whatever the lengths claim: each element takes at least one byte.
pub fn scan_msgpack(data: &[u8]) -> Result<Cost, Scan> {
    const SHORT: Scan = Scan::Malformed("truncated");
    /// What follows a marker: payload bytes to skip, or a container of so many elements.
    enum Next {
        Skip(u64),
        Items(u64),
    }
    use Next::{Items, Skip};
    // A big-endian length of `n` bytes at `at`, which moves past it.
    let read = |at: &mut usize, n: usize| -> Result<u64, Scan> {
        let s = data.get(*at..*at + n).ok_or(SHORT)?;
        *at += n;
        Ok(s.iter().fold(0u64, |acc, &b| acc << 8 | u64::from(b)))
    };
    // Elements still owed by each open container, innermost last.
    let mut open: Vec<u64> = Vec::new();
    let mut at = 0usize;
    // The bytes as a Python object for the decoder, and each payload (a str up to 4 bytes a
    // character) counted at the element.
    let mut cost = Cost {
        payload: data.len() as u64,
        ..Cost::default()
    };
    loop {
        let &b = data.get(at).ok_or(SHORT)?;
        at += 1;
        let next = match b {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => Skip(0),
            0x80..=0x8f => Items(u64::from(b & 0x0f) * 2),
            0x90..=0x9f => Items(u64::from(b & 0x0f)),
            0xa0..=0xbf => Skip(u64::from(b & 0x1f)),
            0xc4 | 0xd9 => Skip(read(&mut at, 1)?),
            0xc5 | 0xda => Skip(read(&mut at, 2)?),
            0xc6 | 0xdb => Skip(read(&mut at, 4)?),
            0xcc | 0xd0 => Skip(1),
            0xcd | 0xd1 => Skip(2),
            0xca | 0xce | 0xd2 => Skip(4),
            0xcb | 0xcf | 0xd3 => Skip(8),
            0xdc => Items(read(&mut at, 2)?),
            0xdd => Items(read(&mut at, 4)?),
            0xde => Items(read(&mut at, 2)? * 2),
            0xdf => Items(read(&mut at, 4)? * 2),
            0xc7..=0xc9 | 0xd4..=0xd8 => return Err(Scan::Malformed("an extension type")),
            0xc1 => return Err(Scan::Malformed("the unused marker 0xc1")),
        };
        let remaining = (data.len() - at) as u64;
        cost.elements += 1;
        match next {
            Skip(n) if n > remaining => return Err(SHORT),
            Skip(n) => {
                at += n as usize;
                cost.payload += n;
            }
            // Each element takes a byte at least.
            Items(n) if n > remaining => return Err(SHORT),
            Items(_) if open.len() >= MAX_DEPTH => return Err(Scan::TooDeep),
            Items(n) if n > 0 => {
                cost.containers += 1;
                open.push(n);
                continue;
            }
            Items(_) => cost.containers += 1,
        }
        // One element done: close every container it completes.
        loop {
            match open.last_mut() {
                None if at == data.len() => return Ok(cost),
                None => return Err(Scan::Malformed("bytes after the value")),
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_depth_and_digits() {
        assert!(scan_json(b"[[{\"a\":[1]}]]").is_ok());
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert_eq!(scan_json(deep.as_bytes()), Err(Scan::TooDeep));
        let fine = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(scan_json(fine.as_bytes()).is_ok());
        // Brackets and quotes inside strings are text.
        let quoted = format!("[\"{}\\\"{}\"]", "[".repeat(500), "{".repeat(500));
        assert!(scan_json(quoted.as_bytes()).is_ok());
        let long = "9".repeat(MAX_DIGITS + 1);
        assert!(matches!(
            scan_json(long.as_bytes()),
            Err(Scan::Malformed(_))
        ));
        assert!(scan_json("1".repeat(MAX_DIGITS).as_bytes()).is_ok());
    }

    #[test]
    fn msgpack_framing() {
        // {"a": [1, 2.5, b"x", None]}
        let ok = b"\x81\xa1a\x94\x01\xcb\x40\x04\x00\x00\x00\x00\x00\x00\xc4\x01x\xc0";
        let cost = scan_msgpack(ok).unwrap();
        // A map, a list, four scalars, the map's key; a, x and the float's and int's bytes.
        assert_eq!((cost.containers, cost.elements), (2, 7));
        assert!(scan_msgpack(b"\x90").is_ok());
        assert!(scan_msgpack(b"\x80").is_ok());
        for bad in [
            &b""[..],
            b"\x92\x01",
            b"\xdd\xff\xff\xff\xff\x01",
            b"\xc4\x05ab",
            b"\x01\x02",
            b"\xd4\x00\x00",
            b"\xc1",
            b"\xdb\x00\x00",
        ] {
            assert!(
                matches!(scan_msgpack(bad), Err(Scan::Malformed(_))),
                "{bad:?}"
            );
        }
        let mut deep = vec![0x91u8; MAX_DEPTH];
        deep.push(0x90);
        assert_eq!(scan_msgpack(&deep), Err(Scan::TooDeep));
        let mut fine = vec![0x91u8; MAX_DEPTH - 1];
        fine.push(0x90);
        assert!(scan_msgpack(&fine).is_ok());
    }
}
