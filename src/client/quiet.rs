//! A quiet meta segment settled: only failures answer, each with its token, an error line
//! names no key, and `MN` completes the rest. Fed the segment's replies by `replies.rs`, it
//! records each key's outcome in a `Sink`.
//!
//! Owns `QuietBatch`. Uses the sinks, `protocol::Reply` and `error`; no I/O (tested in
//! `sink_tests.rs`).

use super::sink::{unexpected, Sink};
use crate::error::{Error, Result};
use crate::protocol::{Reply, ReplyKind};

/// Where a quiet meta batch stands: the position after the last key the server answered for,
/// the first error line that came without a key since then (it belongs to some key between two
/// answered ones; a later one would fail the same keys, which keep their first failure), and
/// how many error lines the segment had: never more than it has keys.
#[derive(Default)]
pub(super) struct QuietBatch {
    from: usize,
    pending: Option<(usize, Error)>,
    error_lines: usize,
}

impl QuietBatch {
    /// One reply of a quiet meta batch; true when the batch is complete (`MN`).
    pub fn reply(&mut self, sink: &mut dyn Sink, keys: &[u32], reply: Reply<'_>) -> Result<bool> {
        match reply {
            Reply::Meta { status, opaque } => {
                let pos = opaque as usize;
                if pos < self.from || pos >= keys.len() {
                    return Err(Error::Protocol(
                        "meta reply for a request that was not sent".into(),
                    ));
                }
                if let Some((from, e)) = self.pending.take() {
                    sink.ambiguous(&keys[from..pos], &e);
                }
                match sink.reply(
                    ReplyKind::MetaStore,
                    &keys[pos..=pos],
                    &mut 0,
                    status.reply(),
                ) {
                    Ok(_) => {}
                    Err(e) if e.is_resumable() => sink.fail(&keys[pos..=pos], &e),
                    Err(e) => return Err(e),
                }
                self.from = pos + 1;
                Ok(false)
            }
            // An error line carries no token: it belongs to one of the keys after the last one
            // answered and before the next one answered (or the end of the segment).
            Reply::Failed(e) => {
                self.error_lines += 1;
                if self.error_lines > keys.len() {
                    return Err(Error::Protocol(
                        "more error lines than keys in a quiet batch".into(),
                    ));
                }
                self.pending.get_or_insert((self.from, e));
                Ok(false)
            }
            Reply::MetaNoop => {
                if let Some((from, e)) = self.pending.take() {
                    sink.ambiguous(&keys[from..], &e);
                }
                sink.assume_ok(keys);
                self.from = 0;
                self.error_lines = 0;
                Ok(true)
            }
            _ => Err(unexpected()),
        }
    }
}
