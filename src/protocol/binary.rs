//! The memcached binary protocol (for `binary=True` and SASL): encoders that append request
//! packets to a caller's buffer, and an incremental parser that takes whatever bytes have arrived
//! and returns either one complete response packet or "need more". Pure: no I/O; depends on
//! `protocol` and `error`.
//!
//! Batches use the quiet opcodes (GETKQ, SETQ, DELETEQ, ...) closed by a NOOP: the server answers
//! a quiet request only when it has something to say (a hit, a failure), and every answer carries
//! the request's `opaque`, which the client sets to the key's position in its batch.
//! Keys are length-prefixed, so any byte may appear in them (only the length is checked).

use super::{Parsed, Reply, ReplyKind, StoreCmd, StoreItem};
use crate::error::{Error, Result};

/// Size of every request and response header.
pub const HEADER_LEN: usize = 24;
/// Largest response body we accept (memcached's own maximum item size is 1 GiB).
pub const MAX_BODY: usize = (1 << 30) + 64 * 1024;
/// Longest key the 16-bit key length of a header can carry (memcached allows 250).
pub const MAX_WIRE_KEY: usize = u16::MAX as usize;

/// The opaque of the NOOP that closes a batch (batch keys use their positions, far below).
pub const NOOP_OPAQUE: u32 = u32::MAX;

const REQUEST: u8 = 0x80;
const RESPONSE: u8 = 0x81;

/// Opcodes used by the client.
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const SASL_AUTH: u8 = 0x21;
}

/// Response status codes.
pub mod status {
    pub const OK: u16 = 0x00;
    pub const KEY_NOT_FOUND: u16 = 0x01;
    pub const KEY_EXISTS: u16 = 0x02;
    pub const TOO_LARGE: u16 = 0x03;
    pub const INVALID_ARGUMENTS: u16 = 0x04;
    pub const NOT_STORED: u16 = 0x05;
    pub const NON_NUMERIC: u16 = 0x06;
    pub const AUTH_ERROR: u16 = 0x20;
    pub const AUTH_CONTINUE: u16 = 0x21;
    pub const UNKNOWN_COMMAND: u16 = 0x81;
    pub const OUT_OF_MEMORY: u16 = 0x82;
}

/// Append a request header. Callers guarantee the lengths fit (keys <= 250 bytes, bodies checked
/// against `MAX_BODY` by `body_fits`).
#[allow(clippy::too_many_arguments)]
fn header(
    buf: &mut Vec<u8>,
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    value_len: usize,
    opaque: u32,
    cas: u64,
) {
    let body = (extras_len + key_len + value_len) as u32;
    buf.reserve(HEADER_LEN + body as usize);
    buf.push(REQUEST);
    buf.push(opcode);
    buf.extend_from_slice(&(key_len as u16).to_be_bytes());
    buf.push(extras_len as u8);
    buf.push(0); // data type
    buf.extend_from_slice(&0u16.to_be_bytes()); // vbucket
    buf.extend_from_slice(&body.to_be_bytes());
    buf.extend_from_slice(&opaque.to_be_bytes());
    buf.extend_from_slice(&cas.to_be_bytes());
}

/// Whether a value of this size can be sent in one packet with this key.
pub fn body_fits(key: &[u8], value_len: usize) -> bool {
    key.len() <= MAX_WIRE_KEY && key.len() + value_len + 8 <= u32::MAX as usize
}

/// GETKQ: a hit answers with the key and value, a miss answers nothing.
pub fn encode_getkq(buf: &mut Vec<u8>, key: &[u8], opaque: u32) {
    header(buf, op::GETKQ, key.len(), 0, 0, opaque, 0);
    buf.extend_from_slice(key);
}

/// NOOP: the end-of-batch marker (its answer comes after every earlier answer).
pub fn encode_noop(buf: &mut Vec<u8>, opaque: u32) {
    header(buf, op::NOOP, 0, 0, 0, opaque, 0);
}

fn store_opcode(cmd: StoreCmd, quiet: bool) -> u8 {
    match (cmd, quiet) {
        (StoreCmd::Set | StoreCmd::Cas, false) => op::SET,
        (StoreCmd::Set | StoreCmd::Cas, true) => op::SETQ,
        (StoreCmd::Add, false) => op::ADD,
        (StoreCmd::Add, true) => op::ADDQ,
        (StoreCmd::Replace, false) => op::REPLACE,
        (StoreCmd::Replace, true) => op::REPLACEQ,
        (StoreCmd::Append, false) => op::APPEND,
        (StoreCmd::Append, true) => op::APPENDQ,
        (StoreCmd::Prepend, false) => op::PREPEND,
        (StoreCmd::Prepend, true) => op::PREPENDQ,
    }
}

/// SET/ADD/REPLACE (extras: flags, exptime), APPEND/PREPEND (no extras), and their quiet forms.
/// `cas` is sent for `StoreCmd::Cas` only (0 there means "unconditional", as in pylibmc).
/// The caller checks `body_fits` first. `item` goes under its wire key `key`.
pub fn encode_store(
    buf: &mut Vec<u8>,
    cmd: StoreCmd,
    key: &[u8],
    item: &StoreItem<'_>,
    quiet: bool,
    opaque: u32,
) {
    let StoreItem {
        flags,
        exptime,
        data,
        cas,
        ..
    } = *item;
    let with_extras = !matches!(cmd, StoreCmd::Append | StoreCmd::Prepend);
    let extras = if with_extras { 8 } else { 0 };
    let cas = if cmd == StoreCmd::Cas { cas } else { 0 };
    buf.reserve(HEADER_LEN + extras + key.len() + data.len());
    header(
        buf,
        store_opcode(cmd, quiet),
        key.len(),
        extras,
        data.len(),
        opaque,
        cas,
    );
    if with_extras {
        buf.extend_from_slice(&flags.to_be_bytes());
        buf.extend_from_slice(&exptime.to_be_bytes());
    }
    buf.extend_from_slice(key);
    buf.extend_from_slice(data);
}

/// DELETE / DELETEQ.
pub fn encode_delete(buf: &mut Vec<u8>, key: &[u8], quiet: bool, opaque: u32) {
    let opcode = if quiet { op::DELETEQ } else { op::DELETE };
    header(buf, opcode, key.len(), 0, 0, opaque, 0);
    buf.extend_from_slice(key);
}

/// INCREMENT / DECREMENT with expiration 0xffffffff, so a missing key is never created (what
/// libmemcached sends for pylibmc's `incr`/`decr`).
pub fn encode_arith(buf: &mut Vec<u8>, incr: bool, key: &[u8], delta: u64, opaque: u32) {
    let opcode = if incr { op::INCREMENT } else { op::DECREMENT };
    header(buf, opcode, key.len(), 20, 0, opaque, 0);
    buf.extend_from_slice(&delta.to_be_bytes());
    buf.extend_from_slice(&0u64.to_be_bytes());
    buf.extend_from_slice(&u32::MAX.to_be_bytes());
    buf.extend_from_slice(key);
}

/// TOUCH (extras: exptime).
pub fn encode_touch(buf: &mut Vec<u8>, key: &[u8], exptime: u32, opaque: u32) {
    header(buf, op::TOUCH, key.len(), 4, 0, opaque, 0);
    buf.extend_from_slice(&exptime.to_be_bytes());
    buf.extend_from_slice(key);
}

/// FLUSH, with the delay as extras when there is one.
pub fn encode_flush(buf: &mut Vec<u8>, delay: u32) {
    if delay > 0 {
        header(buf, op::FLUSH, 0, 4, 0, 0, 0);
        buf.extend_from_slice(&delay.to_be_bytes());
    } else {
        header(buf, op::FLUSH, 0, 0, 0, 0, 0);
    }
}

/// STAT, with the group name as key (empty for the general stats). At most `MAX_WIRE_KEY` bytes.
pub fn encode_stats(buf: &mut Vec<u8>, args: &[u8]) {
    let args = &args[..args.len().min(MAX_WIRE_KEY)];
    header(buf, op::STAT, args.len(), 0, 0, 0, 0);
    buf.extend_from_slice(args);
}

/// VERSION (the client never needs it: binary batches end with a NOOP; the tests do).
#[cfg(test)]
pub fn encode_version(buf: &mut Vec<u8>) {
    header(buf, op::VERSION, 0, 0, 0, 0, 0);
}

/// QUIT.
pub fn encode_quit(buf: &mut Vec<u8>) {
    header(buf, op::QUIT, 0, 0, 0, 0, 0);
}

/// SASL_AUTH with mechanism PLAIN: `\0user\0password` (RFC 4616, empty authorization id).
pub fn encode_sasl_plain(buf: &mut Vec<u8>, username: &[u8], password: &[u8]) {
    let mech = b"PLAIN";
    let value_len = 2 + username.len() + password.len();
    header(buf, op::SASL_AUTH, mech.len(), 0, value_len, 0, 0);
    buf.extend_from_slice(mech);
    buf.push(0);
    buf.extend_from_slice(username);
    buf.push(0);
    buf.extend_from_slice(password);
}

/// One response packet, borrowing from the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Response<'a> {
    pub opcode: u8,
    pub status: u16,
    pub opaque: u32,
    pub cas: u64,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Parse one response packet from the start of `buf`. `Err` means the peer broke the protocol.
pub fn parse_response(buf: &[u8]) -> Result<Parsed<Response<'_>>> {
    if buf.is_empty() {
        return Ok(Parsed::NeedMore);
    }
    if buf[0] != RESPONSE {
        return Err(Error::Protocol(format!(
            "bad magic byte 0x{:02x} in a binary response",
            buf[0]
        )));
    }
    if buf.len() < HEADER_LEN {
        return Ok(Parsed::NeedMore);
    }
    let key_len = be16(&buf[2..4]) as usize;
    let extras_len = buf[4] as usize;
    let status = be16(&buf[6..8]);
    let body_len = be32(&buf[8..12]) as usize;
    if body_len > MAX_BODY {
        return Err(Error::Protocol(format!(
            "binary response body of {body_len} bytes is too large"
        )));
    }
    if key_len + extras_len > body_len {
        return Err(Error::Protocol(
            "binary response key and extras exceed its body".into(),
        ));
    }
    let total = HEADER_LEN + body_len;
    if buf.len() < total {
        return Ok(Parsed::NeedMore);
    }
    let body = &buf[HEADER_LEN..total];
    Ok(Parsed::Done(
        Response {
            opcode: buf[1],
            status,
            opaque: be32(&buf[12..16]),
            cas: be64(&buf[16..24]),
            extras: &body[..extras_len],
            key: &body[extras_len..extras_len + key_len],
            value: &body[extras_len + key_len..],
        },
        total,
    ))
}

/// Whether `opcode` may answer a request of this kind (NOOP closes every kind of batch).
fn opcode_fits(kind: ReplyKind, opcode: u8) -> bool {
    opcode == op::NOOP
        || match kind {
            ReplyKind::Retrieval => matches!(opcode, op::GET | op::GETQ | op::GETK | op::GETKQ),
            ReplyKind::Storage => matches!(
                opcode,
                op::SET
                    | op::ADD
                    | op::REPLACE
                    | op::APPEND
                    | op::PREPEND
                    | op::SETQ
                    | op::ADDQ
                    | op::REPLACEQ
                    | op::APPENDQ
                    | op::PREPENDQ
            ),
            ReplyKind::Delete => matches!(opcode, op::DELETE | op::DELETEQ),
            ReplyKind::Arith => matches!(opcode, op::INCREMENT | op::DECREMENT),
            ReplyKind::Touch => opcode == op::TOUCH,
            ReplyKind::Ok => opcode == op::FLUSH,
            ReplyKind::Stats => opcode == op::STAT,
            ReplyKind::Version => opcode == op::VERSION,
            ReplyKind::MetaStore | ReplyKind::MetaDelete | ReplyKind::MetaProbe => false,
        }
}

fn message(value: &[u8]) -> String {
    String::from_utf8_lossy(&value[..value.len().min(200)]).into_owned()
}

/// The per-request failure a non-zero status stands for, or the soft outcome it is.
fn status_reply(status: u16, value: &[u8]) -> Reply<'static> {
    match status {
        status::KEY_NOT_FOUND => Reply::NotFound,
        status::KEY_EXISTS => Reply::Exists,
        status::NOT_STORED => Reply::NotStored,
        status::TOO_LARGE => Reply::Failed(Error::TooBig),
        status::OUT_OF_MEMORY => Reply::Failed(Error::OutOfMemory),
        status::UNKNOWN_COMMAND => Reply::Failed(Error::UnknownCommand),
        status::INVALID_ARGUMENTS => Reply::Failed(Error::ClientError(message(value))),
        status::AUTH_ERROR | status::AUTH_CONTINUE => {
            Reply::Failed(Error::Auth(format!("server refused: {}", message(value))))
        }
        s => Reply::Failed(Error::UnknownStatus(format!(
            "status 0x{s:04x}: {}",
            message(value)
        ))),
    }
}

/// Parse one response to a request of `kind` into the shared reply vocabulary, with its opaque.
///
/// A NOOP answer is `Reply::End`; a STAT answer with an empty key ends the stats (`End` too).
/// `Err` means the peer broke the protocol: the connection must be dropped.
pub fn parse_reply(kind: ReplyKind, buf: &[u8]) -> Result<Parsed<(Reply<'_>, u32)>> {
    let (r, used) = match parse_response(buf)? {
        Parsed::Done(r, used) => (r, used),
        Parsed::NeedMore => return Ok(Parsed::NeedMore),
    };
    if !opcode_fits(kind, r.opcode) {
        return Err(Error::Protocol(format!(
            "binary response opcode 0x{:02x} does not answer a {kind:?} request",
            r.opcode
        )));
    }
    if r.status != status::OK {
        return Ok(Parsed::Done(
            (status_reply(r.status, r.value), r.opaque),
            used,
        ));
    }
    let reply = match r.opcode {
        op::NOOP => Reply::End,
        op::GET | op::GETQ | op::GETK | op::GETKQ => {
            if r.extras.len() != 4 {
                return Err(Error::Protocol("get response without 4-byte flags".into()));
            }
            Reply::Value {
                key: r.key,
                flags: be32(r.extras),
                cas: Some(r.cas),
                data: r.value,
            }
        }
        op::DELETE | op::DELETEQ => Reply::Deleted,
        op::INCREMENT | op::DECREMENT => {
            if r.value.len() != 8 {
                return Err(Error::Protocol(
                    "incr/decr response without an 8-byte value".into(),
                ));
            }
            Reply::Number(be64(r.value))
        }
        op::TOUCH => Reply::Touched,
        op::FLUSH => Reply::Ok,
        op::STAT if r.key.is_empty() => Reply::End,
        op::STAT => Reply::Stat {
            name: r.key,
            value: r.value,
        },
        op::VERSION => Reply::Version(r.value),
        // Every other opcode that fits is a storage command.
        _ => Reply::Stored,
    };
    Ok(Parsed::Done((reply, r.opaque), used))
}

/// What a SASL_AUTH answer means: `Ok(())` when authenticated.
pub fn sasl_outcome(r: &Response<'_>) -> Result<()> {
    if r.opcode != op::SASL_AUTH {
        return Err(Error::Protocol(format!(
            "binary response opcode 0x{:02x} does not answer SASL_AUTH",
            r.opcode
        )));
    }
    match r.status {
        status::OK => Ok(()),
        status::AUTH_ERROR | status::AUTH_CONTINUE => Err(Error::Auth(format!(
            "SASL authentication failed: {}",
            message(r.value)
        ))),
        status::UNKNOWN_COMMAND => Err(Error::Auth(
            "the server does not support SASL authentication".into(),
        )),
        s => Err(Error::Auth(format!(
            "SASL authentication failed with status 0x{s:04x}: {}",
            message(r.value)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn storage_delete_arith_touch_at_every_split() {
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
    fn encoders_write_the_binary_wire_format() {
        let mut b = Vec::new();
        encode_store(
            &mut b,
            StoreCmd::Set,
            b"k",
            &StoreItem {
                key: b"",
                flags: 16,
                exptime: 5,
                data: b"hi",
                cas: 99,
            },
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
        encode_store(
            &mut b,
            StoreCmd::Cas,
            b"k",
            &StoreItem {
                key: b"",
                flags: 0,
                exptime: 0,
                data: b"",
                cas: 2847,
            },
            true,
            1,
        );
        assert_eq!(b[1], op::SETQ);
        assert_eq!(be64(&b[16..24]), 2847);
        b.clear();
        encode_store(
            &mut b,
            StoreCmd::Append,
            b"k",
            &StoreItem {
                key: b"",
                flags: 16,
                exptime: 5,
                data: b"x",
                cas: 0,
            },
            true,
            0,
        );
        assert_eq!((b[1], b[4], be32(&b[8..12])), (op::APPENDQ, 0, 2));
        b.clear();
        encode_getkq(&mut b, b"a b", 3);
        encode_noop(&mut b, 4);
        assert_eq!(b.len(), 24 + 3 + 24);
        assert_eq!((b[1], be16(&b[2..4]), be32(&b[12..16])), (op::GETKQ, 3, 3));
        assert_eq!((b[27], be32(&b[39..43])), (0x80, 4));
        assert_eq!(b[28], op::NOOP);
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
}
