//! One connection to the fake: its `Session` takes the bytes it received and gives back the
//! replies to every complete command (an incomplete one waits). The first byte decides the
//! protocol, as memcached's does: a binary request's magic, and the connection speaks binary
//! (`binary.rs`); otherwise each text line goes to its verb's file: a meta verb (listed in
//! `meta::VERBS`) to `meta.rs`, the classic commands to `text.rs`.

use super::store::{py_int, Store};
use super::{binary, meta, text};

/// One connection's protocol state (a partial command waits in `buf`).
#[derive(Debug, Default)]
pub struct Session {
    buf: Vec<u8>,
    /// `quit` was read (or the input was not a request): the connection is to be closed.
    pub closing: bool,
    binary: bool,
}

/// The length of the data block that follows this command line, if it has one.
fn data_length(tokens: &[&[u8]]) -> Option<usize> {
    let cmd = *tokens.first()?;
    let idx = if text::store_mode(cmd).is_some() {
        4
    } else if cmd == b"ms" {
        2
    } else {
        return None;
    };
    let n = py_int(tokens.get(idx)?)?;
    (0..1i128 << 31).contains(&n).then_some(n as usize)
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// The replies to every complete command after `data` is appended, into `out`.
    pub fn feed(&mut self, store: &mut Store, data: &[u8], out: &mut Vec<u8>) {
        if self.buf.is_empty() {
            let used = self.run(store, data, out);
            self.buf.extend_from_slice(&data[used..]);
            return;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(data);
        let used = self.run(store, &buf, out);
        buf.drain(..used);
        self.buf = buf;
    }

    /// Answer the complete commands at the start of `input`; how many bytes they took.
    fn run(&mut self, store: &mut Store, input: &[u8], out: &mut Vec<u8>) -> usize {
        let mut pos = 0;
        while pos < input.len() && !self.closing {
            let rest = &input[pos..];
            if self.binary || rest[0] == 0x80 {
                self.binary = true; // as memcached, the first byte decides for the connection
                match binary::request_size(rest) {
                    None => break,
                    Some(None) => {
                        self.closing = true; // not a request: memcached hangs up
                        break;
                    }
                    Some(Some(size)) => {
                        self.closing = binary::command(store, &rest[..size], out);
                        pos += size;
                        continue;
                    }
                }
            }
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                if rest.len() > 65536 {
                    out.extend_from_slice(b"CLIENT_ERROR line too long\r\n");
                    self.closing = true;
                }
                break;
            };
            let mut line = &rest[..nl];
            while let [head @ .., b'\r'] = line {
                line = head;
            }
            let tokens: Vec<&[u8]> = line
                .split(|&c| c == b' ')
                .filter(|t| !t.is_empty())
                .collect();
            let need = data_length(&tokens);
            let end = nl + 1 + need.map_or(0, |n| n + 2);
            if rest.len() < end {
                break; // the data block is still on its way
            }
            let block = &rest[nl + 1..end];
            pos += end;
            match tokens.first() {
                Some(verb) if meta::VERBS.contains(verb) => {
                    out.extend_from_slice(&meta::command(store, &tokens, block));
                }
                _ => text::answer(&mut self.closing, store, &tokens, block, out),
            }
        }
        pos
    }
}
