//! A server's share of one operation (`ServerBatch`): its write buffer of pipelined requests
//! (large values held by reference, sent from the caller's bytes), the operation-wide key
//! indices in the order the server will answer them, and one `Request` per reply unit to
//! expect; how a batch is closed (quiet meta segment, `noreply`, binary NOOP), preceded by a
//! sync marker, and how a later piece of a streamed write joins it.
//!
//! Owns `ServerBatch` and `Request`. Uses `protocol` (encoders); never does I/O. Filled by
//! `plan` and the operations' encoders, sent by `inflight`.

use smallvec::SmallVec;

use super::keys::{spare_bytes, spare_bytes_keep, Origin};
use crate::metrics::Family;
use crate::protocol::{binary, meta, text, ReplyKind};

/// The batches of one operation, one per server: inline for one server (every single-key
/// call), so that planning one allocates no list of them.
pub(super) type Batches<'k> = SmallVec<[ServerBatch<'k>; 1]>;

/// One request line (or command) in a server's pipeline and the keys it answers for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Request {
    pub kind: ReplyKind,
    /// Range in `ServerBatch::keys`.
    pub start: u32,
    pub len: u32,
    /// A marker that closes a batch: the `version` after `noreply` commands, the meta no-op
    /// after a quiet segment, the binary NOOP after quiet opcodes.
    pub marker: bool,
}

impl Request {
    /// The keys this request answers for.
    pub fn keys<'a>(&self, all: &'a [u32]) -> &'a [u32] {
        &all[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Everything one server is asked in one operation.
pub(super) struct ServerBatch<'k> {
    pub server: usize,
    pub wbuf: Vec<u8>,
    /// Large values sent from the caller's own bytes rather than copied into `wbuf`: each goes
    /// before the byte of `wbuf` at its offset (ascending). Only where the batch lives no
    /// longer than the call's arguments (`into_owned` copies them in for a batch that must).
    pub ext: Vec<(usize, &'k [u8])>,
    /// Operation-wide key indices, in the order this server's requests name them (inline for
    /// a few keys: a single-key call allocates none of these).
    pub keys: SmallVec<[u32; 4]>,
    pub reqs: SmallVec<[Request; 2]>,
    /// Where the open quiet meta segment starts in `keys`.
    quiet_start: u32,
    /// `noreply` writes sent without waiting for anything (`close_noreply`).
    pub forget: bool,
    /// After this write batch succeeds, ask the server (on a connection of its own) whether it
    /// speaks the meta protocol (`Client::probe_meta`).
    pub probe_after: bool,
    /// Binary protocol: the quiet batch is `noreply`, so soft failures (not stored, not found)
    /// count as success, as pylibmc reports them.
    pub noreply: bool,
    /// TLS only: offsets in `wbuf` where a storage request ends. Each one ends a TLS record,
    /// because memcached (1.6.x) stalls when the record holding the end of a value also holds
    /// the next request: it reads the value exactly and leaves the rest inside OpenSSL, where
    /// its event loop never looks.
    pub record_ends: Vec<usize>,
    /// What the metrics count this batch's requests as.
    pub family: Family,
    /// The thread `wbuf` was taken on (see `Drop`).
    origin: Origin,
}

/// A batch's request buffer is kept for the thread's next batch (`keys::spare_bytes`).
impl Drop for ServerBatch<'_> {
    fn drop(&mut self) {
        spare_bytes_keep(std::mem::take(&mut self.wbuf), self.origin);
    }
}

impl<'k> ServerBatch<'k> {
    pub fn new(server: usize) -> ServerBatch<'k> {
        let (wbuf, origin) = spare_bytes();
        ServerBatch {
            origin,
            server,
            wbuf,
            ext: Vec::new(),
            keys: SmallVec::new(),
            reqs: SmallVec::new(),
            quiet_start: 0,
            forget: false,
            probe_after: false,
            noreply: false,
            record_ends: Vec::new(),
            family: Family::Admin,
        }
    }

    /// The batch with its borrowed values copied into `wbuf`, to outlive the call's arguments.
    pub fn into_owned(mut self) -> ServerBatch<'static> {
        if !self.ext.is_empty() {
            let extra: usize = self.ext.iter().map(|(_, d)| d.len()).sum();
            let mut w = Vec::with_capacity(self.wbuf.len() + extra);
            let mut from = 0;
            for &(at, d) in &self.ext {
                w.extend_from_slice(&self.wbuf[from..at]);
                w.extend_from_slice(d);
                from = at;
            }
            w.extend_from_slice(&self.wbuf[from..]);
            self.wbuf = w;
        }
        ServerBatch {
            server: self.server,
            wbuf: std::mem::take(&mut self.wbuf),
            ext: Vec::new(),
            keys: std::mem::take(&mut self.keys),
            reqs: std::mem::take(&mut self.reqs),
            quiet_start: self.quiet_start,
            forget: self.forget,
            probe_after: self.probe_after,
            noreply: self.noreply,
            record_ends: std::mem::take(&mut self.record_ends),
            family: self.family,
            origin: self.origin,
        }
    }

    /// The next run of bytes to write from position `at` of `wbuf`, with `next` the first
    /// borrowed value not all written and `pos` how much of it is: that value's rest when it
    /// is due at `at` (then true), else `wbuf` up to the next value or its end; `None` when
    /// everything is written.
    pub fn segment(&self, at: usize, next: usize, pos: usize) -> Option<(&[u8], bool)> {
        match self.ext.get(next) {
            Some(&(x, d)) if x == at => Some((&d[pos..], true)),
            _ if at == self.wbuf.len() => None,
            e => Some((
                &self.wbuf[at..e.map_or(self.wbuf.len(), |&(x, _)| x)],
                false,
            )),
        }
    }

    /// Bytes of its requests, the borrowed values included.
    pub fn request_len(&self) -> usize {
        self.wbuf.len() + self.ext.iter().map(|(_, d)| d.len()).sum::<usize>()
    }

    /// The opaque of the next key pushed: its position in this batch (binary protocol).
    pub fn next_opaque(&self) -> u32 {
        self.keys.len() as u32
    }

    /// A request answering for one key.
    /// It holds only `flush_all` (the one request answered by a bare `OK`).
    pub fn only_flush(&self) -> bool {
        !self.reqs.is_empty() && self.reqs.iter().all(|r| r.kind == ReplyKind::Ok)
    }

    pub fn push_req(&mut self, kind: ReplyKind, key: u32) {
        let start = self.keys.len() as u32;
        self.keys.push(key);
        self.reqs.push(Request {
            kind,
            start,
            len: 1,
            marker: false,
        });
    }

    /// Add a key to the open quiet meta segment; returns its opaque token (its position there).
    pub fn push_quiet(&mut self, key: u32) -> u32 {
        let pos = self.keys.len() as u32 - self.quiet_start;
        self.keys.push(key);
        pos
    }

    /// Close the open quiet meta segment, if it has keys: only failures were answered, each
    /// with its token, and `MN` completes every other key of the segment.
    pub fn close_quiet(&mut self, kind: ReplyKind) {
        let end = self.keys.len() as u32;
        if end == self.quiet_start {
            return;
        }
        meta::encode_noop(&mut self.wbuf);
        self.reqs.push(Request {
            kind,
            start: self.quiet_start,
            len: end - self.quiet_start,
            marker: true,
        });
        self.quiet_start = end;
    }

    /// Close the `noreply` commands of a write: they are not waited for at all, as with
    /// pylibmc. The connection notes them as unsynced, and the next request other than such a
    /// write starts with a marker that reads whatever the server answered to them
    /// (`prepend_sync`), so no such answer is ever taken for another request's reply.
    pub fn close_noreply(&mut self) {
        self.forget = true;
    }

    /// Close a batch of quiet binary commands with a NOOP: every key rides on it.
    pub fn close_binary(&mut self, kind: ReplyKind) {
        binary::encode_noop(&mut self.wbuf, binary::NOOP_OPAQUE);
        self.reqs.push(Request {
            kind,
            start: 0,
            len: self.keys.len() as u32,
            marker: true,
        });
    }

    /// Shift the key indices by `by`: a piece of an operation planned alone (see
    /// `Client::perform_streamed`) takes its place among the operation's keys.
    pub fn shift_keys(&mut self, by: u32) {
        for k in &mut self.keys {
            *k += by;
        }
    }

    /// Queue `more`, a later piece of the same operation for the same server, behind this
    /// batch: its requests follow in the pipeline, its key ranges and record ends moved past
    /// this batch's. Text protocol only (binary opaques count from each piece's start).
    pub fn append(&mut self, mut more: ServerBatch<'k>) {
        debug_assert_eq!((self.server, self.forget), (more.server, more.forget));
        let (base, wlen) = (self.keys.len() as u32, self.wbuf.len());
        self.keys.extend_from_slice(&more.keys);
        self.reqs.extend(more.reqs.iter().map(|r| Request {
            start: r.start + base,
            ..*r
        }));
        if wlen == 0 && self.ext.is_empty() {
            // Nothing of this batch waits to be written: take the piece's buffer as it is.
            std::mem::swap(&mut self.wbuf, &mut more.wbuf);
            self.record_ends = std::mem::take(&mut more.record_ends);
            self.ext = std::mem::take(&mut more.ext);
        } else {
            self.record_ends
                .extend(more.record_ends.iter().map(|e| e + wlen));
            self.ext
                .extend(more.ext.iter().map(|&(at, d)| (at + wlen, d)));
            self.wbuf.extend_from_slice(&more.wbuf);
        }
        self.quiet_start = self.keys.len() as u32;
        self.probe_after |= more.probe_after;
    }

    /// Start with a `version` marker whose answer confirms that every earlier `noreply` command
    /// on the connection was processed; whatever comes before it belongs to those commands.
    pub fn prepend_sync(&mut self) {
        let mut marker = Vec::new();
        text::encode_version(&mut marker);
        self.wbuf.splice(0..0, marker.iter().copied());
        for end in &mut self.record_ends {
            *end += marker.len();
        }
        for (at, _) in &mut self.ext {
            *at += marker.len();
        }
        self.reqs.insert(
            0,
            Request {
                kind: ReplyKind::Version,
                start: 0,
                len: 0,
                marker: true,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{Request, ServerBatch};
    use crate::protocol::ReplyKind;

    /// A quiet batch of `keys` (operation-wide indices) whose requests are `wire`, closed.
    fn piece(keys: &[u32], wire: &[u8], tls: bool) -> ServerBatch<'static> {
        let mut b = ServerBatch::new(2);
        for &k in keys {
            b.push_quiet(k);
        }
        b.wbuf.extend_from_slice(wire);
        if tls {
            b.record_ends.push(wire.len());
        }
        b.close_quiet(ReplyKind::MetaStore);
        b
    }

    fn ranges(reqs: &[Request]) -> Vec<(u32, u32, bool)> {
        reqs.iter().map(|r| (r.start, r.len, r.marker)).collect()
    }

    #[test]
    fn an_appended_piece_follows_with_its_ranges_and_record_ends_moved() {
        let mut a = piece(&[0, 1, 2], b"abc", true);
        let mut more = piece(&[0, 1], b"de", true);
        more.shift_keys(3);
        a.append(more);
        assert_eq!(a.keys[..], [0, 1, 2, 3, 4]);
        assert_eq!(ranges(&a.reqs), [(0, 3, true), (3, 2, true)]);
        assert_eq!(a.wbuf, b"abcmn\r\ndemn\r\n");
        assert_eq!(a.record_ends, [3, 9]);
        // A segment opened after the append starts after every key so far.
        assert_eq!(a.push_quiet(9), 0);
    }

    #[test]
    fn borrowed_values_keep_their_place_when_appended_copied_in_or_preceded() {
        let (v1, v2) = (b"VALUE1".to_vec(), b"V2".to_vec());
        let mut a = ServerBatch::new(0);
        a.wbuf.extend_from_slice(b"h1 ");
        a.ext.push((a.wbuf.len(), &v1[..]));
        a.wbuf.extend_from_slice(b"\r\n");
        let mut more = ServerBatch::new(0);
        more.wbuf.extend_from_slice(b"h2 ");
        more.ext.push((more.wbuf.len(), &v2[..]));
        more.wbuf.extend_from_slice(b"\r\nend");
        a.append(more);
        assert_eq!(a.request_len(), a.wbuf.len() + 8);
        a.prepend_sync();
        let owned = a.into_owned();
        assert!(owned.ext.is_empty());
        assert_eq!(owned.wbuf, b"version\r\nh1 VALUE1\r\nh2 V2\r\nend");
    }

    #[test]
    fn a_piece_appended_to_an_empty_buffer_is_taken_as_it_is() {
        let mut a = piece(&[0], b"abc", true);
        a.wbuf.clear();
        a.record_ends.clear();
        let mut more = piece(&[0, 1], b"xy", true);
        more.shift_keys(1);
        let at = more.wbuf.as_ptr();
        a.append(more);
        assert_eq!(a.wbuf.as_ptr(), at);
        assert_eq!(
            (a.wbuf.as_slice(), a.record_ends.as_slice()),
            (&b"xymn\r\n"[..], &[2][..])
        );
        assert_eq!(ranges(&a.reqs), [(0, 1, true), (1, 2, true)]);
        assert_eq!(a.keys[..], [0, 1, 2]);
    }
}
