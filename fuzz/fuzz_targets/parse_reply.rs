//! Fuzz the reply parsers (text, with the meta replies it delegates, and binary): the first byte
//! picks the parser, the reply kind and how the rest is cut into arrivals. A parser must never
//! panic, never consume nothing or more than it was given, and give the same units however the
//! bytes arrive.
#![no_main]

use fastmc::error::Result;
use fastmc::protocol::{binary, parse_text_reply, Parsed, ReplyKind};
use libfuzzer_sys::fuzz_target;

const KINDS: [ReplyKind; 12] = ReplyKind::ALL;

/// One parse step of either protocol, its unit rendered as text.
fn parse(binary_protocol: bool, kind: ReplyKind, buf: &[u8]) -> Result<Parsed<String>> {
    Ok(if binary_protocol {
        match binary::parse_reply(kind, buf)? {
            Parsed::Done(r, n) => Parsed::Done(format!("{r:?}"), n),
            Parsed::NeedMore => Parsed::NeedMore,
        }
    } else {
        match parse_text_reply(kind, buf)? {
            Parsed::Done(r, n) => Parsed::Done(format!("{r:?}"), n),
            Parsed::NeedMore => Parsed::NeedMore,
        }
    })
}

/// Units parsed from `buf` arriving in pieces of `step` bytes (0 = all at once).
fn units(binary_protocol: bool, kind: ReplyKind, buf: &[u8], step: usize) -> (Vec<String>, bool) {
    let mut pos = 0;
    let mut avail = if step == 0 {
        buf.len()
    } else {
        step.min(buf.len())
    };
    let mut out = Vec::new();
    loop {
        match parse(binary_protocol, kind, &buf[pos..avail]) {
            Ok(Parsed::Done(r, n)) => {
                assert!(n > 0, "consumed nothing");
                assert!(pos + n <= avail, "consumed past the input");
                out.push(r);
                pos += n;
            }
            Ok(Parsed::NeedMore) if avail < buf.len() => {
                avail = (avail + step.max(1)).min(buf.len());
            }
            Ok(Parsed::NeedMore) => return (out, false),
            Err(_) => return (out, true),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let binary_protocol = sel & 0x80 != 0;
    let kind = KINDS[(sel as usize & 0x7f) % KINDS.len()];
    let step = ((sel >> 3) & 0x0f) as usize;
    let whole = units(binary_protocol, kind, rest, 0);
    let pieces = units(binary_protocol, kind, rest, step);
    assert_eq!(whole, pieces, "arrival in pieces changed the result");
});
