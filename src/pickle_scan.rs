//! Whether a pickle holds plain data only: `None`, bools, numbers, str, bytes, bytearray and the
//! containers (list, dict, tuple, set, frozenset) of them. Such a pickle names no class and calls
//! nothing, so `pickle.loads` may load it without the allow-list unpickler's per-class check (a
//! Python `find_class` for every value: 1.5 times the cost of a 100-key `get_multi` of small
//! dicts). Anything else, and anything this scan does not understand, answers `false` and takes
//! the checked path, which refuses what is not listed.
//!
//! The scan walks the opcodes exactly as CPython's unpickler reads them (`Lib/pickletools.py`
//! documents each argument's encoding) up to `STOP`. Pure: no Python, no I/O.

/// Opcodes that name a class or a function, or call something, or load persistent or
/// out-of-band data: never plain.
const NOT_PLAIN: &[u8] = &[
    b'c', // GLOBAL
    b'i', // INST
    0x93, // STACK_GLOBAL
    0x82, // EXT1
    0x83, // EXT2
    0x84, // EXT4
    b'P', // PERSID
    b'Q', // BINPERSID
    b'R', // REDUCE
    b'b', // BUILD
    b'o', // OBJ
    0x81, // NEWOBJ
    0x92, // NEWOBJ_EX
    0x97, // NEXT_BUFFER
    0x98, // READONLY_BUFFER
];

/// Opcodes without an argument that build plain data.
const NO_ARG: &[u8] = &[
    b'(', b'0', b'1', b'2', b'N', 0x88, 0x89, b'a', b'e', b'l', b']', b'd', b'}', b's', b'u', b't',
    b')', 0x85, 0x86, 0x87, 0x8f, 0x90, 0x91, 0x94,
];

/// How an opcode's argument is encoded.
enum Arg {
    /// A text line ending with `\n`.
    Line,
    Fixed(usize),
    /// A little-endian length of this many bytes, then that many bytes; `signed`: a negative
    /// length is an error (CPython's BINSTRING and LONG4).
    Counted {
        width: usize,
        signed: bool,
    },
}

fn arg_of(op: u8) -> Option<Arg> {
    Some(match op {
        b'I' | b'L' | b'F' | b'S' | b'V' | b'g' | b'p' => Arg::Line,
        b'K' | b'h' | b'q' | 0x80 => Arg::Fixed(1),
        b'M' => Arg::Fixed(2),
        b'J' | b'j' | b'r' => Arg::Fixed(4),
        b'G' | 0x95 => Arg::Fixed(8),
        b'U' | b'C' | 0x8c | 0x8a => Arg::Counted {
            width: 1,
            signed: false,
        },
        b'X' | b'B' => Arg::Counted {
            width: 4,
            signed: false,
        },
        b'T' | 0x8b => Arg::Counted {
            width: 4,
            signed: true,
        },
        0x8d | 0x8e | 0x96 => Arg::Counted {
            width: 8,
            signed: false,
        },
        _ => return None,
    })
}

/// Each opcode's class, looked up in one step (a scan of the lists per opcode cost a 100-key
/// `get_multi` of small pickles a sixth of its time).
const NONE: u8 = 0;
const PLAIN_NO_ARG: u8 = 1;
const WITH_ARG: u8 = 2;
const CLASSES: [u8; 256] = {
    let mut t = [NONE; 256];
    let mut i = 0;
    while i < NO_ARG.len() {
        t[NO_ARG[i] as usize] = PLAIN_NO_ARG;
        i += 1;
    }
    let with_arg = b"ILFSVgpKhq\x80MJjrG\x95UC\x8c\x8aXBT\x8b\x8d\x8e\x96";
    let mut i = 0;
    while i < with_arg.len() {
        t[with_arg[i] as usize] = WITH_ARG;
        i += 1;
    }
    // (none of them is in the lists above; kept so, whatever the lists become)
    let mut i = 0;
    while i < NOT_PLAIN.len() {
        t[NOT_PLAIN[i] as usize] = NONE;
        i += 1;
    }
    t
};

/// `true` only for a well-formed pickle of plain data (see the module's header).
pub fn is_plain_data(data: &[u8]) -> bool {
    let mut at = 0usize;
    while let Some(&op) = data.get(at) {
        at += 1;
        if op == b'.' {
            return true; // STOP: what follows is never read
        }
        let next = match CLASSES[op as usize] {
            PLAIN_NO_ARG => Some(at),
            WITH_ARG => match arg_of(op) {
                Some(Arg::Line) => memchr::memchr(b'\n', &data[at..]).map(|i| at + i + 1),
                Some(Arg::Fixed(n)) => at.checked_add(n),
                Some(Arg::Counted { width, signed }) => counted(data, at, width, signed),
                _ => None,
            },
            // NOT_PLAIN, or no such opcode
            _ => None,
        };
        match next {
            Some(n) if n <= data.len() => at = n,
            _ => return false,
        }
    }
    false // no STOP: truncated
}

/// Where a counted argument at `at` ends, if its length is valid.
fn counted(data: &[u8], at: usize, width: usize, signed: bool) -> Option<usize> {
    let bytes = data.get(at..at.checked_add(width)?)?;
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(bytes);
    let len = u64::from_le_bytes(le);
    if signed && width == 4 && len & 0x8000_0000 != 0 {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    at.checked_add(width)?.checked_add(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made with CPython 3.11's pickle.dumps at the protocols named.
    #[test]
    fn plain_pickles_of_each_protocol() {
        // {"a": [1, 2.5, None, True], "b": (b"x", "y")}, protocol 5
        let p5 = b"\x80\x05\x95(\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01G@\x04\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01b\x94C\x01x\x94\x8c\x01y\x94\x86\x94u.";
        assert!(is_plain_data(p5));
        // [1, "s", {2}], protocol 0 (a set names builtins.set: not plain)
        let p0_set = b"(lp0\nI1\naVs\np1\nac__builtin__\nset\np2\n((lp3\nI2\natp4\nRp5\na.";
        assert!(!is_plain_data(p0_set));
        // [1, "s", -3000000000], protocol 0
        let p0 = b"(lp0\nI1\naVs\np1\naL-3000000000L\na.";
        assert!(is_plain_data(p0));
        // (1, b"bytes"), protocol 3
        let p3 = b"\x80\x03K\x01C\x05bytesq\x00\x86q\x01.";
        assert!(is_plain_data(p3));
    }

    #[test]
    fn anything_that_names_or_calls_is_not_plain() {
        // os.system("x"), protocol 0 and protocol 4
        assert!(!is_plain_data(b"cposix\nsystem\np0\n(Vx\np1\ntp2\nRp3\n."));
        assert!(!is_plain_data(
            b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x01x\x94\x85\x94R\x94."
        ));
        for op in NOT_PLAIN {
            assert!(!is_plain_data(&[0x80, 4, *op, b'.']), "{op:#x}");
        }
    }

    #[test]
    fn a_global_hidden_in_an_argument_is_data_and_one_after_it_is_seen() {
        // "c": a SHORT_BINUNICODE whose byte is an argument, not GLOBAL
        assert!(is_plain_data(
            b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x01c\x94."
        ));
        // the same with a wrong count that would make the scan skip a real GLOBAL
        assert!(!is_plain_data(b"\x80\x04\x8c\x00cos\nsystem\n."));
    }

    #[test]
    fn the_table_and_the_argument_encodings_agree() {
        for op in 0..=255u8 {
            match CLASSES[op as usize] {
                WITH_ARG => assert!(arg_of(op).is_some(), "{op:#x}"),
                _ => assert!(arg_of(op).is_none(), "{op:#x}"),
            }
        }
        assert_eq!(
            CLASSES.iter().filter(|&&c| c == PLAIN_NO_ARG).count(),
            NO_ARG.len()
        );
    }

    #[test]
    fn truncated_or_unknown_input_is_not_plain() {
        assert!(!is_plain_data(b""));
        assert!(!is_plain_data(b"\x80\x05K\x01")); // no STOP
        assert!(!is_plain_data(b"\x80\x05X\xff\xff\xff\xff.")); // a count past the end
        assert!(!is_plain_data(b"T\xff\xff\xff\xff.")); // BINSTRING's negative count
        assert!(!is_plain_data(b"\xff.")); // no such opcode (the signed values' first byte)
        assert!(!is_plain_data(b"I1")); // a line without its end
        assert!(!is_plain_data(b"\x8e\xff\xff\xff\xff\xff\xff\xff\xff."));
    }
}
