//! The text protocol's encoders and parser: every reply at every split, garbage, short input.
use super::*;
use crate::protocol::ascii::MAX_LINE;
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
    let input =
        b"VALUE a 0 5\r\nhello\r\nVALUE bb 16 0 77\r\n\r\nVALUE c 4294967295 2\r\n\r\n\r\nEND\r\n";
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

/// The one-pass hit parser answers exactly what the general parser answers wherever it answers
/// at all: for plain hits, CAS hits, odd fields and keys, cut at every length, and with every
/// byte of a hit replaced by each of a set of bytes that matter to the grammar.
#[test]
fn the_plain_hit_parser_agrees_with_the_general_one() {
    let long_key = format!("VALUE {} 1 2\r\nab\r\n", "k".repeat(MAX_KEY_LEN));
    let too_long = format!("VALUE {} 1 2\r\nab\r\n", "k".repeat(MAX_KEY_LEN + 1));
    let mut inputs: Vec<Vec<u8>> = [
        &b"VALUE key 0 5\r\nhello\r\nEND\r\n"[..],
        b"VALUE k 4294967295 0\r\n\r\n",
        b"VALUE k 4294967296 0\r\n\r\n",
        b"VALUE k 007 3\r\nabc\r\n",
        b"VALUE k 1 3 99\r\nabc\r\n",
        b"VALUE k 1 1073741824\r\n",
        b"VALUE k 1 1073741825\r\n",
        b"VALUE k 1 12345678901\r\n",
        b"VALUE  1 3\r\nabc\r\n",
        b"VALUE k\r1 3\r\nabc\r\n",
        b"VALUE k 1 3\r\nabcXY",
        b"VALUE k 1 3\nabc\r\n",
        b"VALUE k 1 3 \r\nabc\r\n",
        b"VALUE k 1\r\n",
        b"END\r\n",
        long_key.as_bytes(),
        too_long.as_bytes(),
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    let base = b"VALUE kk 12 4\r\nwxyz\r\n".to_vec();
    for at in 0..base.len() {
        for b in [b' ', b'\r', b'\n', b'0', b'9', b'a', b'-', 0, 0xff] {
            let mut m = base.clone();
            m[at] = b;
            inputs.push(m);
        }
    }
    let mut answered = 0;
    for input in &inputs {
        for cut in 0..=input.len() {
            let buf = &input[..cut];
            let general = parse_reply_general(ReplyKind::Retrieval, buf);
            if let Some(fast) = parse_plain_value(buf) {
                answered += 1;
                let fast = match fast {
                    Parsed::Done(r, n) => format!("Done({}, {n})", owned(&r)),
                    Parsed::NeedMore => "NeedMore".into(),
                };
                let general = match general {
                    Ok(Parsed::Done(r, n)) => format!("Done({}, {n})", owned(&r)),
                    Ok(Parsed::NeedMore) => "NeedMore".into(),
                    Err(e) => format!("Err({e})"),
                };
                assert_eq!(fast, general, "{:?}", String::from_utf8_lossy(buf));
            }
            let whole = parse_reply(ReplyKind::Retrieval, buf).map(|p| format!("{p:?}"));
            let general = parse_reply_general(ReplyKind::Retrieval, buf).map(|p| format!("{p:?}"));
            assert_eq!(whole, general, "{:?}", String::from_utf8_lossy(buf));
        }
    }
    assert!(
        answered > 100,
        "the plain parser answered only {answered} times"
    );
}

#[test]
fn the_first_control_or_space_is_found_at_every_offset() {
    for len in 0..=20 {
        for at in 0..len {
            for b in 0..=255u8 {
                let mut s = vec![b'k'; len];
                s[at] = b;
                let want = s.iter().position(|&x| x <= b' ');
                assert_eq!(first_control_or_space(&s), want, "{s:?}");
            }
        }
        let mut s = vec![0x80u8; len];
        assert_eq!(first_control_or_space(&s), None);
        if len > 1 {
            s[len - 1] = b'\r';
            s[len / 2] = b' ';
            assert_eq!(first_control_or_space(&s), Some(len / 2));
        }
    }
}

/// The whole-word status lines (`common_status`) and the end of a get reply answer exactly what
/// the general parser answers: for every status of every kind, followed by more replies or
/// not, cut at every length, and with every byte replaced by each of a set of bytes.
#[test]
fn the_status_shortcuts_agree_with_the_general_parser() {
    let kinds = [
        ReplyKind::Storage,
        ReplyKind::Delete,
        ReplyKind::Touch,
        ReplyKind::Arith,
        ReplyKind::Retrieval,
    ];
    let lines: [&[u8]; 9] = [
        b"STORED\r\n",
        b"NOT_STORED\r\n",
        b"EXISTS\r\n",
        b"NOT_FOUND\r\n",
        b"DELETED\r\n",
        b"TOUCHED\r\n",
        b"END\r\n",
        b"12\r\n",
        b"ERROR\r\n",
    ];
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    for l in lines {
        inputs.push(l.to_vec());
        inputs.push([l, b"STORED\r\n"].concat());
        for at in 0..l.len() {
            for b in [b' ', b'\r', b'\n', b'X', 0] {
                let mut m = l.to_vec();
                m[at] = b;
                inputs.push(m);
            }
        }
    }
    let mut shortcut = 0;
    for kind in kinds {
        for input in &inputs {
            for cut in 0..=input.len() {
                let buf = &input[..cut];
                shortcut += usize::from(common_status(kind, buf).is_some());
                let whole = parse_reply(kind, buf).map(|p| format!("{p:?}"));
                let general = parse_reply_general(kind, buf).map(|p| format!("{p:?}"));
                assert_eq!(
                    whole,
                    general,
                    "{kind:?} {:?}",
                    String::from_utf8_lossy(buf)
                );
            }
        }
    }
    assert!(shortcut > 20, "the shortcut answered only {shortcut} times");
}

#[test]
fn one_key_encoders_write_what_the_general_ones_write() {
    for cas in [false, true] {
        let (mut one, mut general) = (Vec::new(), Vec::new());
        encode_get_one(&mut one, cas, b"k1");
        encode_get(&mut general, cas, [&b"k1"[..]]);
        assert_eq!(one, general);
    }
    let mut b = b"before ".to_vec();
    encode_delete(&mut b, b"nr", true);
    encode_delete(&mut b, b"w3", false);
    assert_eq!(b, b"before delete nr noreply\r\ndelete w3\r\n");
}
