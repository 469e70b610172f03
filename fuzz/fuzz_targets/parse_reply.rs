//! Fuzz the text-protocol reply parser: the first byte picks the reply kind and how the rest is
//! cut into arrivals. The parser must never panic, never consume nothing or more than it was
//! given, and give the same units however the bytes arrive.
#![no_main]

use fastmc::protocol::text::parse_reply;
use fastmc::protocol::{Parsed, ReplyKind};
use libfuzzer_sys::fuzz_target;

const KINDS: [ReplyKind; 11] = ReplyKind::ALL;

/// Units parsed from `buf` arriving in pieces of `step` bytes (0 = all at once).
fn units(kind: ReplyKind, buf: &[u8], step: usize) -> (Vec<String>, bool) {
    let mut pos = 0;
    let mut avail = if step == 0 {
        buf.len()
    } else {
        step.min(buf.len())
    };
    let mut out = Vec::new();
    loop {
        match parse_reply(kind, &buf[pos..avail]) {
            Ok(Parsed::Done(r, n)) => {
                assert!(n > 0, "consumed nothing");
                assert!(pos + n <= avail, "consumed past the input");
                out.push(format!("{r:?}"));
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
    let kind = KINDS[(sel as usize) % KINDS.len()];
    let step = (sel >> 3) as usize;
    let whole = units(kind, rest, 0);
    let pieces = units(kind, rest, step);
    assert_eq!(whole, pieces, "arrival in pieces changed the result");
});
