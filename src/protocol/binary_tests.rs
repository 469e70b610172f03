//! The binary protocol's encoders and parser, byte for byte.
use super::*;
use crate::protocol::test_item as item;

/// A response packet as memcached would write it.
fn resp(
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) -> Vec<u8> {
    let mut b = vec![RESPONSE, opcode];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.push(extras.len() as u8);
    b.push(0);
    b.extend_from_slice(&status.to_be_bytes());
    b.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    b.extend_from_slice(&opaque.to_be_bytes());
    b.extend_from_slice(&cas.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

fn parse_all(kind: ReplyKind, input: &[u8], cut: usize) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut avail = cut.min(input.len());
    let mut pos = 0;
    loop {
        match parse_reply(kind, &input[pos..avail])? {
            Parsed::Done((r, opaque), n) => {
                assert!(n > 0 && pos + n <= avail, "consumed past the input");
                out.push(format!("{r:?}@{opaque}"));
                pos += n;
                if pos == input.len() {
                    return Ok(out);
                }
            }
            Parsed::NeedMore => {
                assert!(
                    avail < input.len(),
                    "wants more at the end of a whole input"
                );
                avail = input.len();
            }
        }
    }
}

fn check_every_split(kind: ReplyKind, input: &[u8], expect: &[&str]) {
    for cut in 0..=input.len() {
        assert_eq!(
            parse_all(kind, input, cut).expect("valid"),
            expect,
            "split at {cut}"
        );
    }
    // Every prefix parses without error and never claims bytes it does not have.
    for cut in 0..input.len() {
        if let Parsed::Done(_, n) = parse_reply(kind, &input[..cut]).expect("prefix") {
            assert!(n <= cut);
        }
    }
}

#[test]
fn retrieval_hits_and_noop_at_every_split() {
    let mut input = resp(op::GETKQ, 0, 0, 77, &16u32.to_be_bytes(), b"a", b"hello");
    input.extend(resp(
        op::GETKQ,
        0,
        2,
        1,
        &0u32.to_be_bytes(),
        b"k \r\n\0",
        b"",
    ));
    input.extend(resp(op::NOOP, 0, 3, 0, b"", b"", b""));
    check_every_split(
        ReplyKind::Retrieval,
        &input,
        &[
            "Value { key: [97], flags: 16, cas: Some(77), data: [104, 101, 108, 108, 111] }@0",
            "Value { key: [107, 32, 13, 10, 0], flags: 0, cas: Some(1), data: [] }@2",
            "End@3",
        ],
    );
}

#[test]
fn storage_at_every_split() {
    let mut input = resp(op::SET, 0, 0, 5, b"", b"", b"");
    input.extend(resp(
        op::ADDQ,
        status::KEY_EXISTS,
        4,
        0,
        b"",
        b"",
        b"Data exists",
    ));
    input.extend(resp(
        op::REPLACE,
        status::KEY_NOT_FOUND,
        1,
        0,
        b"",
        b"",
        b"Not found",
    ));
    input.extend(resp(
        op::APPENDQ,
        status::NOT_STORED,
        7,
        0,
        b"",
        b"",
        b"Not stored",
    ));
    input.extend(resp(
        op::SETQ,
        status::TOO_LARGE,
        8,
        0,
        b"",
        b"",
        b"Too large.",
    ));
    input.extend(resp(
        op::SETQ,
        status::OUT_OF_MEMORY,
        9,
        0,
        b"",
        b"",
        b"oom",
    ));
    input.extend(resp(op::NOOP, 0, 0, 0, b"", b"", b""));
    check_every_split(
        ReplyKind::Storage,
        &input,
        &[
            "Stored@0",
            "Exists@4",
            "NotFound@1",
            "NotStored@7",
            "Failed(TooBig)@8",
            "Failed(OutOfMemory)@9",
            "End@0",
        ],
    );
}

#[test]
fn delete_at_every_split() {
    let mut input = resp(
        op::DELETEQ,
        status::KEY_NOT_FOUND,
        3,
        0,
        b"",
        b"",
        b"Not found",
    );
    input.extend(resp(op::DELETE, 0, 1, 0, b"", b"", b""));
    input.extend(resp(op::NOOP, 0, 0, 0, b"", b"", b""));
    check_every_split(
        ReplyKind::Delete,
        &input,
        &["NotFound@3", "Deleted@1", "End@0"],
    );
}

#[test]
fn arith_at_every_split() {
    let mut input = resp(op::INCREMENT, 0, 0, 9, b"", b"", &42u64.to_be_bytes());
    input.extend(resp(
        op::DECREMENT,
        0,
        1,
        9,
        b"",
        b"",
        &u64::MAX.to_be_bytes(),
    ));
    input.extend(resp(
        op::INCREMENT,
        status::KEY_NOT_FOUND,
        2,
        0,
        b"",
        b"",
        b"Not found",
    ));
    input.extend(resp(
        op::INCREMENT,
        status::NON_NUMERIC,
        3,
        0,
        b"",
        b"",
        b"Non-numeric server-side value for incr or decr",
    ));
    check_every_split(
        ReplyKind::Arith,
        &input,
        &[
            "Number(42)@0",
            "Number(18446744073709551615)@1",
            "NotFound@2",
            "Failed(UnknownStatus(\"status 0x0006: Non-numeric server-side value for incr or decr\"))@3",
        ],
    );
}

#[test]
fn touch_at_every_split() {
    let mut input = resp(op::TOUCH, 0, 0, 0, b"", b"", b"");
    input.extend(resp(
        op::TOUCH,
        status::KEY_NOT_FOUND,
        1,
        0,
        b"",
        b"",
        b"Not found",
    ));
    check_every_split(ReplyKind::Touch, &input, &["Touched@0", "NotFound@1"]);
}

#[test]
fn stats_version_flush_unknown_at_every_split() {
    let mut input = resp(op::STAT, 0, 0, 0, b"", b"pid", b"12");
    input.extend(resp(op::STAT, 0, 0, 0, b"", b"empty", b""));
    input.extend(resp(op::STAT, 0, 0, 0, b"", b"", b""));
    check_every_split(
        ReplyKind::Stats,
        &input,
        &[
            "Stat { name: [112, 105, 100], value: [49, 50] }@0",
            "Stat { name: [101, 109, 112, 116, 121], value: [] }@0",
            "End@0",
        ],
    );
    check_every_split(
        ReplyKind::Version,
        &resp(op::VERSION, 0, 0, 0, b"", b"", b"1.6.18"),
        &["Version([49, 46, 54, 46, 49, 56])@0"],
    );
    let mut input = resp(op::FLUSH, 0, 0, 0, b"", b"", b"");
    input.extend(resp(
        op::FLUSH,
        status::UNKNOWN_COMMAND,
        0,
        0,
        b"",
        b"",
        b"Unknown command",
    ));
    input.extend(resp(
        op::FLUSH,
        status::AUTH_ERROR,
        0,
        0,
        b"",
        b"",
        b"Auth failure.",
    ));
    check_every_split(
        ReplyKind::Ok,
        &input,
        &[
            "Ok@0",
            "Failed(UnknownCommand)@0",
            "Failed(Auth(\"server refused: Auth failure.\"))@0",
        ],
    );
}

#[test]
fn garbage_is_a_protocol_error() {
    let bad: Vec<(ReplyKind, Vec<u8>)> = vec![
        // text where binary was expected
        (ReplyKind::Storage, b"STORED\r\n".to_vec()),
        // a request magic
        (ReplyKind::Storage, {
            let mut b = resp(op::SET, 0, 0, 0, b"", b"", b"");
            b[0] = REQUEST;
            b
        }),
        // an opcode that does not answer the request
        (ReplyKind::Retrieval, resp(op::SET, 0, 0, 0, b"", b"", b"")),
        (ReplyKind::Arith, resp(op::DELETE, 0, 0, 0, b"", b"", b"")),
        (
            ReplyKind::Stats,
            resp(op::GETKQ, 0, 0, 0, &[0; 4], b"k", b""),
        ),
        // a hit without flags, an incr result of the wrong size
        (
            ReplyKind::Retrieval,
            resp(op::GETKQ, 0, 0, 0, b"", b"k", b"v"),
        ),
        (
            ReplyKind::Arith,
            resp(op::INCREMENT, 0, 0, 0, b"", b"", b"42"),
        ),
        // key + extras longer than the body
        (ReplyKind::Retrieval, {
            let mut b = resp(op::GETKQ, 0, 0, 0, &[0; 4], b"k", b"");
            b[2] = 0xff;
            b
        }),
        // a body larger than any item
        (ReplyKind::Retrieval, {
            let mut b = resp(op::GETKQ, 0, 0, 0, &[0; 4], b"k", b"");
            b[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
            b
        }),
    ];
    for (kind, input) in &bad {
        assert!(
            matches!(parse_reply(*kind, input), Err(Error::Protocol(_))),
            "{kind:?} {input:?}"
        );
    }
}

#[test]
fn no_panic_on_any_short_input() {
    let kinds = ReplyKind::ALL;
    let base = resp(op::GETKQ, 0, 0, 0, &[0; 4], b"key", b"value");
    for k in kinds {
        for a in 0..=255u8 {
            let _ = parse_reply(k, &[a]);
            // every header byte set to every value, whole and truncated
            for i in 0..HEADER_LEN {
                let mut b = base.clone();
                b[i] = a;
                for cut in [b.len(), HEADER_LEN, HEADER_LEN + 2] {
                    let _ = parse_reply(k, &b[..cut]);
                }
                let _ = parse_response(&b);
            }
        }
    }
}

#[test]
fn store_encoders_write_the_binary_wire_format() {
    let mut b = Vec::new();
    encode_store(
        &mut b,
        StoreCmd::Set,
        b"k",
        &item(16, 5, b"hi", 99),
        false,
        7,
    );
    assert_eq!(
        b,
        [
            &[0x80, op::SET, 0, 1, 8, 0, 0, 0, 0, 0, 0, 11, 0, 0, 0, 7][..],
            &[0; 8],
            &[0, 0, 0, 16, 0, 0, 0, 5],
            b"k",
            b"hi"
        ]
        .concat()
    );
    b.clear();
    encode_store(&mut b, StoreCmd::Cas, b"k", &item(0, 0, b"", 2847), true, 1);
    assert_eq!(b[1], op::REPLACEQ); // a cas is a REPLACE with a CAS, as libmemcached sends it
    assert_eq!(be64(&b[16..24]), 2847);
    b.clear();
    encode_store(
        &mut b,
        StoreCmd::Append,
        b"k",
        &item(16, 5, b"x", 0),
        true,
        0,
    );
    assert_eq!((b[1], b[4], be32(&b[8..12])), (op::APPENDQ, 0, 2));
}

#[test]
fn other_encoders_write_the_binary_wire_format() {
    let mut b = Vec::new();
    encode_getkq(&mut b, b"a b", 3);
    encode_noop(&mut b, 4);
    assert_eq!(b.len(), 24 + 3 + 24);
    assert_eq!((b[1], be16(&b[2..4]), be32(&b[12..16])), (op::GETKQ, 3, 3));
    assert_eq!((b[27], be32(&b[39..43])), (0x80, 4));
    assert_eq!(b[28], op::NOOP);
    b.clear();
    encode_gatkq(&mut b, b"k", 300, 6);
    assert_eq!(b.len(), 24 + 4 + 1);
    assert_eq!((b[1], be16(&b[2..4]), b[4]), (op::GATKQ, 1, 4));
    assert_eq!((be32(&b[12..16]), be32(&b[24..28]), b[28]), (6, 300, b'k'));
    let r = resp(op::GATKQ, 0, 6, 0, &16u32.to_be_bytes(), b"k", b"v");
    assert_eq!(
        parse_reply(ReplyKind::Retrieval, &r).unwrap(),
        Parsed::Done(
            (
                Reply::Value {
                    key: b"k",
                    flags: 16,
                    cas: Some(0),
                    data: b"v"
                },
                6
            ),
            r.len()
        )
    );
    b.clear();
    encode_arith(&mut b, false, b"n", 5, 0);
    assert_eq!((b[1], b[4], be32(&b[8..12])), (op::DECREMENT, 20, 21));
    assert_eq!(
        &b[24..44],
        &[&5u64.to_be_bytes()[..], &[0; 8], &[0xff; 4]].concat()[..]
    );
    b.clear();
    encode_touch(&mut b, b"t", 50, 0);
    assert_eq!((b[1], b[4], be32(&b[24..28])), (op::TOUCH, 4, 50));
    b.clear();
    encode_flush(&mut b, 0);
    encode_flush(&mut b, 5);
    assert_eq!((b[4], b[28], b.len()), (0, 4, 52));
    b.clear();
    encode_sasl_plain(&mut b, b"user", b"pw");
    assert_eq!(b[1], op::SASL_AUTH);
    assert_eq!(&b[24..], b"PLAIN\0user\0pw");
    b.clear();
    encode_delete(&mut b, b"d", true, 0);
    encode_stats(&mut b, b"items");
    encode_version(&mut b);
    encode_quit(&mut b);
    let ops: Vec<u8> = [0, 25, 24 + 25 + 5, 24 + 25 + 5 + 24]
        .iter()
        .map(|&i| b[i + 1])
        .collect();
    assert_eq!(ops, [op::DELETEQ, op::STAT, op::VERSION, op::QUIT]);
}

#[test]
fn sasl_answers() {
    let ok = resp(op::SASL_AUTH, 0, 0, 0, b"", b"", b"Authenticated");
    let bad = resp(
        op::SASL_AUTH,
        status::AUTH_ERROR,
        0,
        0,
        b"",
        b"",
        b"Auth failure",
    );
    let unknown = resp(op::SASL_AUTH, status::UNKNOWN_COMMAND, 0, 0, b"", b"", b"");
    let parse = |b: &[u8]| match parse_response(b) {
        Ok(Parsed::Done(r, _)) => sasl_outcome(&r),
        other => panic!("{other:?}"),
    };
    assert_eq!(parse(&ok), Ok(()));
    assert!(matches!(parse(&bad), Err(Error::Auth(_))));
    assert!(matches!(parse(&unknown), Err(Error::Auth(_))));
}

#[test]
fn a_header_announces_its_packet_and_its_value() {
    let p = resp(op::GETK, 0, 0, 0, &[0; 4], b"key", &[b'v'; 100]);
    assert_eq!(announced(&p[..HEADER_LEN]), Some((HEADER_LEN + 107, 100)));
    assert_eq!(announced(&p[..HEADER_LEN - 1]), None);
    let mut bad = p.clone();
    bad[0] = REQUEST;
    assert_eq!(announced(&bad), None);
}
