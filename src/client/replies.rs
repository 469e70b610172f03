//! Reply routing: which request (and so which keys) each reply unit answers. Given a batch and
//! the bytes that have arrived, `Replies` parses every complete unit and hands it to the sink
//! with the keys of the request it answers: classic replies in request order, quiet meta
//! segments settled by their tokens and `MN`, `noreply` markers, and binary
//! batches whose answers name their key by opaque. It owns no socket, so every case is tested
//! with plain bytes (`replies_tests.rs`).
//!
//! Owns `Replies`. Uses `protocol` parsers, the plan's `ServerBatch`/`Request` and the sinks.

use super::batch::{Request, ServerBatch};
use super::quiet::QuietBatch;
use super::sink::{unexpected, Sink};
use crate::behaviors::DEFAULT_MAX_VALUE_SIZE;
use crate::error::{Error, Result};
use crate::protocol::{self, binary, parse_text_reply, Parsed, Reply, ReplyKind};

/// Where the replies of one batch stand.
pub(super) struct Replies {
    /// The request whose reply is being read.
    pub req: usize,
    /// How far into that request's keys a multi-value reply has come.
    pub cursor: usize,
    /// Error lines read before the sync marker: answers to earlier `noreply` writes.
    pub owed_errors: u32,
    quiet: QuietBatch,
    /// Whether an error line was among the replies (see `Connection::answered`).
    pub error_reply: bool,
    /// The largest data block a reply may carry (the behavior `max_value_size`).
    pub max_value: usize,
}

impl Default for Replies {
    fn default() -> Self {
        Replies {
            req: 0,
            cursor: 0,
            owed_errors: 0,
            quiet: QuietBatch::default(),
            error_reply: false,
            max_value: DEFAULT_MAX_VALUE_SIZE,
        }
    }
}

/// A data block over the limit: refused before it is read (the connection is dropped).
fn too_large(len: usize, max: usize) -> Error {
    Error::Alloc(format!(
        "a value of {len} bytes is over max_value_size ({max})"
    ))
}

/// The size of the data block a complete reply unit carries.
fn data_len(r: &Reply<'_>) -> usize {
    match r {
        Reply::Value { data, .. } => data.len(),
        Reply::MetaResult { data: Some(d), .. } => d.len(),
        _ => 0,
    }
}

/// What one `route` call took from its input.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Routed {
    /// Bytes of the input used by complete units.
    pub used: usize,
    /// A sync marker (`ServerBatch::prepend_sync`) was answered: every earlier `noreply`
    /// command on the connection has been processed.
    pub synced: bool,
    /// The size of the partial unit after `used`, when its header announced one (within
    /// `max_value`): the reader makes room for exactly that.
    pub need: Option<usize>,
}

impl Replies {
    /// Whether every request of `batch` is answered.
    pub fn complete(&self, batch: &ServerBatch) -> bool {
        self.req >= batch.reqs.len()
    }

    /// Dispatch every complete reply unit at the start of `input` (text or meta, or `binary`).
    /// Stops at a partial unit; the caller drops `used` bytes and calls again when more came.
    /// `Err` means the stream is out of step: the connection must be dropped.
    pub fn route(
        &mut self,
        batch: &ServerBatch,
        binary: bool,
        input: &[u8],
        sink: &mut dyn Sink,
    ) -> Result<Routed> {
        let mut done = Routed::default();
        while let Some(&req) = batch.reqs.get(self.req) {
            let rest = &input[done.used..];
            let step = if binary {
                self.binary_unit(batch, req, rest, sink)?
            } else {
                self.text_unit(batch, req, rest, sink, &mut done.synced)?
            };
            let Some((used, complete)) = step else {
                done.need = self.announced(binary, req.kind, rest)?;
                break;
            };
            done.used += used;
            if complete {
                self.req += 1;
                self.cursor = 0;
            }
        }
        Ok(done)
    }

    /// What the header of the partial unit at the start of `rest` announces, refused over
    /// `max_value` before any of its data is read.
    fn announced(&self, binary: bool, kind: ReplyKind, rest: &[u8]) -> Result<Option<usize>> {
        match protocol::announced(binary, kind, rest) {
            Some((_, len)) if len > self.max_value => Err(too_large(len, self.max_value)),
            Some((total, _)) => Ok(Some(total)),
            None => Ok(None),
        }
    }

    /// One text or meta unit for `req`: `None` if it has not fully arrived, else the bytes it
    /// took and whether `req` is complete.
    fn text_unit(
        &mut self,
        batch: &ServerBatch,
        req: Request,
        input: &[u8],
        sink: &mut dyn Sink,
        synced: &mut bool,
    ) -> Result<Option<(usize, bool)>> {
        let Parsed::Done(reply, used) = parse_text_reply(req.kind, input)? else {
            return Ok(None);
        };
        if data_len(&reply) > self.max_value {
            return Err(too_large(data_len(&reply), self.max_value));
        }
        self.error_reply |= matches!(reply, Reply::Failed(_));
        let keys = req.keys(&batch.keys);
        let complete = if matches!(req.kind, ReplyKind::MetaStore | ReplyKind::MetaDelete) {
            self.quiet.reply(sink, keys, reply)?
        } else if req.marker {
            let complete = self.marker_reply(reply)?;
            *synced |= complete;
            complete
        } else {
            match sink.reply(req.kind, keys, &mut self.cursor, reply) {
                Ok(c) => c,
                Err(e) if e.is_resumable() => {
                    sink.fail(&keys[self.cursor.min(keys.len())..], &e);
                    true
                }
                Err(e) => return Err(e),
            }
        };
        Ok(Some((used, complete)))
    }

    /// A reply to the sync marker (`ServerBatch::prepend_sync`): error lines before it are
    /// what the server answered to earlier `noreply` writes, which their callers chose not to
    /// wait for (as with pylibmc): read and dropped, never taken for another reply. The
    /// version itself completes the marker. True when complete.
    fn marker_reply(&mut self, reply: Reply<'_>) -> Result<bool> {
        match reply {
            Reply::Failed(_) => {
                self.owed_errors += 1;
                Ok(false)
            }
            Reply::Version(_) => Ok(true),
            _ => Err(unexpected()),
        }
    }

    /// Binary protocol: like `text_unit`, with batches. A batch (quiet stores or deletes, or
    /// GETKQs) is closed by a NOOP whose opaque is `binary::NOOP_OPAQUE`; every other answer
    /// names its key by opaque (its position in the batch): a hit, or a failure of that key
    /// only. A successful NOOP means every key not answered succeeded (stores) or missed
    /// (gets); a failed NOOP (e.g. the server demands authentication) fails them.
    fn binary_unit(
        &mut self,
        batch: &ServerBatch,
        req: Request,
        input: &[u8],
        sink: &mut dyn Sink,
    ) -> Result<Option<(usize, bool)>> {
        let Parsed::Done((reply, opaque), used) = binary::parse_reply(req.kind, input)? else {
            return Ok(None);
        };
        if data_len(&reply) > self.max_value {
            return Err(too_large(data_len(&reply), self.max_value));
        }
        self.error_reply |= matches!(reply, Reply::Failed(_));
        let keys = req.keys(&batch.keys);
        let in_batch = req.marker || req.kind == ReplyKind::Retrieval;
        let complete = if !in_batch {
            // One answer per request, as in text.
            match sink.reply(req.kind, keys, &mut self.cursor, reply) {
                Ok(c) => c,
                Err(e) if e.is_resumable() => {
                    sink.fail(keys, &e);
                    true
                }
                Err(e) => return Err(e),
            }
        } else if opaque == binary::NOOP_OPAQUE {
            match reply {
                Reply::End if req.marker => sink.assume_ok(keys),
                Reply::End => {
                    sink.reply(req.kind, keys, &mut self.cursor, Reply::End)?;
                }
                Reply::Failed(e) => sink.fail(keys, &e),
                _ => return Err(unexpected()),
            }
            true
        } else {
            let pos = (opaque as usize)
                .checked_sub(req.start as usize)
                .filter(|&p| p < keys.len())
                .ok_or_else(|| Error::Protocol("an answer names no key of the batch".into()))?;
            self.binary_key_reply(sink, req, batch.noreply, keys, pos, reply)?;
            false
        };
        Ok(Some((used, complete)))
    }

    /// Binary: an answer inside a batch (`req`) that names the key at `pos` of `keys`.
    /// `noreply`: the batch's soft failures count as success.
    fn binary_key_reply(
        &mut self,
        sink: &mut dyn Sink,
        req: Request,
        noreply: bool,
        keys: &[u32],
        pos: usize,
        reply: Reply<'_>,
    ) -> Result<()> {
        let one = &keys[pos..=pos];
        match reply {
            Reply::Failed(e) => sink.fail(one, &e),
            Reply::Value { .. } if !req.marker => {
                // The sink may only match a hit to the key its opaque names (keys before it
                // are misses: GETKQ answers in order).
                if pos < self.cursor {
                    return Err(Error::Protocol("a hit out of order".into()));
                }
                sink.reply(req.kind, &keys[..=pos], &mut self.cursor, reply)?;
                if self.cursor != pos + 1 {
                    return Err(Error::Protocol(
                        "a value's opaque does not match its key".into(),
                    ));
                }
            }
            Reply::NotStored | Reply::Exists | Reply::NotFound if req.marker && noreply => {}
            r if req.marker => match sink.reply(req.kind, one, &mut 0, r) {
                Ok(_) => {}
                Err(e) if e.is_resumable() => sink.fail(one, &e),
                Err(e) => return Err(e),
            },
            _ => return Err(unexpected()),
        }
        Ok(())
    }

    /// The keys of `batch` that will get no reply now: failed with `e`.
    pub fn fail_rest(&self, batch: &ServerBatch, sink: &mut dyn Sink, e: &Error) {
        if matches!(e, Error::Protocol(_)) {
            // A reply for a key not asked for, or bytes after the last reply: the stream is out
            // of step, so no reply on it is trusted, not even the ones that looked complete.
            sink.revoke(&batch.keys, e);
            return;
        }
        for (i, req) in batch.reqs.iter().enumerate().skip(self.req) {
            let keys = req.keys(&batch.keys);
            let from = if i == self.req {
                self.cursor.min(keys.len())
            } else {
                0
            };
            sink.fail(&keys[from..], e);
        }
    }
}

#[cfg(test)]
#[path = "replies_tests.rs"]
mod tests;
