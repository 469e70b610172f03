//! Get's encoder: a server batch's keys as retrieval requests (`get`/`gets` lines, `gat`/`gats`
//! with a touch, or binary GETKQ/GATKQ runs closed by a NOOP), one `Request` per line.
//!
//! Uses `protocol`'s encoders and the plan's `ServerBatch`.

use std::borrow::Cow;

use crate::client::batch::{Request, ServerBatch};
use crate::protocol::{binary, text, ReplyKind};

/// Keys per `get`/`gets` line (or binary GETKQ run). A line is one request, and memcached
/// answers each request of a pipeline with writes of its own: over a network, a reply split in
/// several writes took up to half a round trip longer than the same reply in one (`make
/// bench-net`, 1,000 keys over 3 servers at 1 ms: 1.9-2.0 ms with lines of 100 keys, 1.6 ms
/// with one line per server). A bound still: memcached holds a ~1 KiB response object per key
/// of a line until it has read the whole line (memcached #1046), and 1.6.12 alone failed some
/// long lines (#849, fixed in 1.6.13; libmemcached's unbounded lines fail there too).
const KEYS_PER_GET: usize = 1000;

/// Keys per `gat`/`gats` line. memcached reads a line longer than its read buffer only for
/// `get`/`gets` (it closes the connection on any other), so touching fetches stay short.
const KEYS_PER_GAT: usize = 100;

impl ServerBatch<'_> {
    /// Encode this batch's keys as retrieval requests of `KEYS_PER_GET` keys each: a `get`/`gets`
    /// line, or (binary) a GETKQ per key (hits answer, misses are silent) and a NOOP. With
    /// `touch`, each hit's expiry is set too: `gat`/`gats` lines of `KEYS_PER_GAT` keys, or
    /// GATKQ.
    pub fn encode_gets(
        &mut self,
        wire: &[Cow<'_, [u8]>],
        with_cas: bool,
        binary: bool,
        touch: Option<u32>,
    ) {
        let per_request = if touch.is_some() {
            KEYS_PER_GAT
        } else {
            KEYS_PER_GET
        };
        self.encode_gets_by(wire, with_cas, binary, touch, per_request);
    }

    /// `encode_gets` with `per_request` keys per line (one: each key's reply stands alone).
    pub fn encode_gets_by(
        &mut self,
        wire: &[Cow<'_, [u8]>],
        with_cas: bool,
        binary: bool,
        touch: Option<u32>,
        per_request: usize,
    ) {
        let n = self.keys.len();
        let per_request = per_request.max(1);
        let lines = n / per_request + 1;
        // Per key and per line: a space and `get ...\r\n`, or a header and a NOOP.
        let (per_key, per_line) = if binary {
            (binary::HEADER_LEN, binary::HEADER_LEN)
        } else {
            (1, 8)
        };
        let key_bytes: usize = self
            .keys
            .iter()
            .map(|&k| wire[k as usize].len() + per_key)
            .sum();
        self.wbuf.reserve(key_bytes + lines * per_line);
        self.reqs.reserve(lines);
        let mut start = 0;
        while start < n {
            let end = (start + per_request).min(n);
            let keys = &self.keys[start..end];
            if binary {
                for (pos, &k) in keys.iter().enumerate() {
                    let opaque = (start + pos) as u32;
                    match touch {
                        Some(t) => {
                            binary::encode_gatkq(&mut self.wbuf, &wire[k as usize], t, opaque)
                        }
                        None => binary::encode_getkq(&mut self.wbuf, &wire[k as usize], opaque),
                    }
                }
                binary::encode_noop(&mut self.wbuf, binary::NOOP_OPAQUE);
            } else {
                let line = keys.iter().map(|&k| &*wire[k as usize]);
                match touch {
                    Some(t) => text::encode_gat(&mut self.wbuf, with_cas, t, line),
                    None => text::encode_get(&mut self.wbuf, with_cas, line),
                }
            }
            self.reqs.push(Request {
                kind: ReplyKind::Retrieval,
                start: start as u32,
                len: (end - start) as u32,
                marker: false,
            });
            start = end;
        }
    }
}
