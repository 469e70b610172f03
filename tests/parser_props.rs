//! Property tests of the text-protocol reply parsers (`protocol::parse_text_reply`: classic and meta): on any
//! bytes it never panics and never claims to consume more than it was given; valid replies give
//! the same units however they are split into arrivals; a mutated valid stream is parsed without
//! a panic, and a unit once complete does not change when more bytes arrive.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fastmc::protocol::parse_text_reply as parse_reply;
use fastmc::protocol::{Parsed, ReplyKind};
use proptest::prelude::*;

const KINDS: [ReplyKind; 12] = ReplyKind::ALL;

/// Parse units from `buf` until the parser wants more or fails; checks the consumption bounds.
/// Returns the units (as text) and whether it stopped on an error.
fn parse_stream(kind: ReplyKind, buf: &[u8]) -> (Vec<String>, bool) {
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        match parse_reply(kind, &buf[pos..]) {
            Ok(Parsed::Done(r, n)) => {
                assert!(n > 0, "a unit must consume something");
                assert!(
                    n <= buf.len() - pos,
                    "consumed {n} of {} bytes",
                    buf.len() - pos
                );
                out.push(format!("{r:?}"));
                pos += n;
            }
            Ok(Parsed::NeedMore) => return (out, false),
            Err(_) => return (out, true),
        }
    }
}

/// Feed `buf` as it would arrive in chunks cut at `cuts`; the units must not depend on them.
fn parse_in_chunks(kind: ReplyKind, buf: &[u8], cuts: &[usize]) -> (Vec<String>, bool) {
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (buf.len() + 1)).collect();
    ends.push(buf.len());
    ends.sort_unstable();
    let mut pos = 0;
    let mut out = Vec::new();
    for avail in ends {
        loop {
            match parse_reply(kind, &buf[pos..avail]) {
                Ok(Parsed::Done(r, n)) => {
                    assert!(n > 0 && pos + n <= avail, "consumed past the input");
                    out.push(format!("{r:?}"));
                    pos += n;
                }
                Ok(Parsed::NeedMore) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0x21u8..0x7f, 1..40)
}

/// A valid retrieval reply: VALUE blocks (any data bytes, with or without cas) then END.
fn retrieval() -> impl Strategy<Value = (Vec<u8>, usize)> {
    proptest::collection::vec(
        (
            key(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::option::of(any::<u64>()),
        ),
        0..6,
    )
    .prop_map(|items| {
        let mut b = Vec::new();
        for (k, flags, data, cas) in &items {
            b.extend_from_slice(b"VALUE ");
            b.extend_from_slice(k);
            b.extend_from_slice(format!(" {flags} {}", data.len()).as_bytes());
            if let Some(c) = cas {
                b.extend_from_slice(format!(" {c}").as_bytes());
            }
            b.extend_from_slice(b"\r\n");
            b.extend_from_slice(data);
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"END\r\n");
        (b, items.len() + 1)
    })
}

/// A valid stream of one-line replies for `kind`, error lines included.
fn lines(kind: ReplyKind) -> impl Strategy<Value = (Vec<u8>, usize)> {
    let words: Vec<&'static str> = match kind {
        ReplyKind::Storage => vec!["STORED", "NOT_STORED", "EXISTS", "NOT_FOUND"],
        ReplyKind::Delete => vec!["DELETED", "NOT_FOUND"],
        ReplyKind::Touch => vec!["TOUCHED", "NOT_FOUND"],
        ReplyKind::Arith => vec!["NOT_FOUND", "0", "18446744073709551615", "42  "],
        ReplyKind::Ok => vec!["OK"],
        ReplyKind::Version => vec!["VERSION 1.6.38", "VERSION x"],
        ReplyKind::MetaStore => vec!["NS O3", "EX O0", "NF O12 k", "HD O4294967295", "MN"],
        ReplyKind::MetaDelete => vec!["NF O7", "HD O1", "MN"],
        ReplyKind::MetaProbe => vec!["MN"],
        ReplyKind::MetaCmd => vec!["HD", "EN", "NF", "NS c1", "EX", "HD W c12 t-1 Z X"],
        _ => vec!["STAT pid 1", "STAT a b c", "END"],
    };
    let errors = vec![
        "ERROR",
        "CLIENT_ERROR bad data chunk",
        "SERVER_ERROR out of memory storing object",
        "SERVER_ERROR object too large for cache",
        "SERVER_ERROR",
    ];
    let all: Vec<&'static str> = words.into_iter().chain(errors).collect();
    proptest::collection::vec(proptest::sample::select(all), 1..12).prop_map(|ws| {
        let mut b = Vec::new();
        for w in &ws {
            b.extend_from_slice(w.as_bytes());
            b.extend_from_slice(b"\r\n");
        }
        (b, ws.len())
    })
}

fn kind() -> impl Strategy<Value = ReplyKind> {
    proptest::sample::select(KINDS.to_vec())
}

/// Bytes biased toward the protocol's own tokens, so that the interesting paths are reached.
fn protocolish() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"VALUE ".to_vec()),
        Just(b"END".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b" ".to_vec()),
        Just(b"STAT ".to_vec()),
        Just(b"SERVER_ERROR ".to_vec()),
        Just(b"CLIENT_ERROR".to_vec()),
        Just(b"VERSION ".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        Just(b"4294967296".to_vec()),
        (0u64..2000).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(token, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_or_overreads_on_arbitrary_bytes(
        k in kind(),
        buf in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        parse_stream(k, &buf);
    }

    #[test]
    fn never_panics_or_overreads_on_protocol_like_bytes(k in kind(), buf in protocolish()) {
        parse_stream(k, &buf);
    }

    #[test]
    fn valid_retrieval_is_the_same_at_any_split(
        (buf, units) in retrieval(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let (whole, err) = parse_stream(ReplyKind::Retrieval, &buf);
        prop_assert!(!err);
        prop_assert_eq!(whole.len(), units);
        let (split, err) = parse_in_chunks(ReplyKind::Retrieval, &buf, &cuts);
        prop_assert!(!err);
        prop_assert_eq!(split, whole);
    }

    #[test]
    fn valid_lines_are_the_same_at_any_split(
        (k, (buf, units)) in kind()
            .prop_filter("line kinds", |k| *k != ReplyKind::Retrieval)
            .prop_flat_map(|k| (Just(k), lines(k))),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let (whole, err) = parse_stream(k, &buf);
        prop_assert!(!err);
        prop_assert_eq!(whole.len(), units);
        let (split, err) = parse_in_chunks(k, &buf, &cuts);
        prop_assert!(!err);
        prop_assert_eq!(split, whole);
    }

    #[test]
    fn mutated_valid_replies_never_panic_or_overread(
        (buf, _) in retrieval(),
        k in kind(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut buf = buf;
        for (at, byte, op) in edits {
            let i = at % (buf.len() + 1);
            match op {
                0 if i < buf.len() => buf[i] = byte,
                1 => buf.insert(i, byte),
                _ if i < buf.len() => { buf.remove(i); }
                _ => {}
            }
        }
        let (whole, err) = parse_stream(k, &buf);
        let (split, err2) = parse_in_chunks(k, &buf, &cuts);
        // arrival in pieces never changes what was parsed, nor whether it failed
        prop_assert_eq!(split, whole);
        prop_assert_eq!(err, err2);
    }

    #[test]
    fn a_complete_unit_does_not_change_when_more_bytes_arrive(
        k in kind(),
        buf in protocolish(),
        more in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        if let Ok(Parsed::Done(r, n)) = parse_reply(k, &buf) {
            let first = format!("{r:?}");
            let mut longer = buf.clone();
            longer.extend_from_slice(&more);
            match parse_reply(k, &longer) {
                Ok(Parsed::Done(r2, n2)) => {
                    prop_assert_eq!(n2, n);
                    prop_assert_eq!(format!("{r2:?}"), first);
                }
                other => prop_assert!(false, "became {:?}", other.map(|_| ())),
            }
        }
    }
}

/// A line over the length limit is refused whether it arrives whole or in pieces (found by the
/// fuzz target's whole-versus-pieces check), and one at the limit is accepted both ways.
#[test]
fn line_length_limit_does_not_depend_on_arrival() {
    use fastmc::protocol::ascii::MAX_LINE;
    for len in [
        MAX_LINE - 2,
        MAX_LINE - 1,
        MAX_LINE,
        MAX_LINE + 1,
        MAX_LINE + 2,
    ] {
        let mut buf = b"STAT x ".to_vec();
        buf.resize(len, b'y');
        buf.extend_from_slice(b"\r\nEND\r\n");
        let whole = parse_stream(ReplyKind::Stats, &buf);
        for step in [1usize, 7, 4096, MAX_LINE] {
            let cuts: Vec<usize> = (1..buf.len() / step + 1).map(|i| i * step).collect();
            assert_eq!(
                parse_in_chunks(ReplyKind::Stats, &buf, &cuts),
                whole,
                "len {len}"
            );
        }
    }
}
