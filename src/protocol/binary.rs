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
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
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

/// GATKQ (extras: exptime): GETKQ that also sets the key's expiry; misses answer nothing.
pub fn encode_gatkq(buf: &mut Vec<u8>, key: &[u8], exptime: u32, opaque: u32) {
    header(buf, op::GATKQ, key.len(), 4, 0, opaque, 0);
    buf.extend_from_slice(&exptime.to_be_bytes());
    buf.extend_from_slice(key);
}

/// NOOP: the end-of-batch marker (its answer comes after every earlier answer).
pub fn encode_noop(buf: &mut Vec<u8>, opaque: u32) {
    header(buf, op::NOOP, 0, 0, 0, opaque, 0);
}

/// The opcode of a storage command. `cas` is a REPLACE with a CAS, as libmemcached sends it: a
/// SET with a CAS that memcached refuses (a value too large) makes it drop the stored item,
/// while a refused REPLACE leaves it.
fn store_opcode(cmd: StoreCmd, quiet: bool) -> u8 {
    match (cmd, quiet) {
        (StoreCmd::Set, false) => op::SET,
        (StoreCmd::Set, true) => op::SETQ,
        (StoreCmd::Add, false) => op::ADD,
        (StoreCmd::Add, true) => op::ADDQ,
        (StoreCmd::Replace | StoreCmd::Cas, false) => op::REPLACE,
        (StoreCmd::Replace | StoreCmd::Cas, true) => op::REPLACEQ,
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
    let with_extras = !matches!(cmd, StoreCmd::Append | StoreCmd::Prepend);
    let extras = if with_extras { 8 } else { 0 };
    let cas = if cmd == StoreCmd::Cas { item.cas } else { 0 };
    buf.reserve(HEADER_LEN + extras + key.len() + item.data.len());
    header(
        buf,
        store_opcode(cmd, quiet),
        key.len(),
        extras,
        item.data.len(),
        opaque,
        cas,
    );
    if with_extras {
        buf.extend_from_slice(&item.flags.to_be_bytes());
        buf.extend_from_slice(&item.exptime.to_be_bytes());
    }
    buf.extend_from_slice(key);
    buf.extend_from_slice(item.data);
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
    encode_arith_create(buf, incr, key, delta, None, opaque);
}

/// INCREMENT/DECREMENT that, given `(initial, exptime)`, creates a missing counter at `initial`
/// with that expiry (the server answers `initial`); without, a miss stays a miss (expiration
/// all ones).
pub fn encode_arith_create(
    buf: &mut Vec<u8>,
    incr: bool,
    key: &[u8],
    delta: u64,
    create: Option<(u64, u32)>,
    opaque: u32,
) {
    let opcode = if incr { op::INCREMENT } else { op::DECREMENT };
    let (initial, exptime) = create.unwrap_or((0, u32::MAX));
    header(buf, opcode, key.len(), 20, 0, opaque, 0);
    buf.extend_from_slice(&delta.to_be_bytes());
    buf.extend_from_slice(&initial.to_be_bytes());
    buf.extend_from_slice(&exptime.to_be_bytes());
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

/// What the complete header at the start of `buf` announces: `(packet bytes, value bytes)`.
/// `None` before the header has arrived, or when it is not the protocol (the parser says so).
pub fn announced(buf: &[u8]) -> Option<(usize, usize)> {
    let h = buf.get(..HEADER_LEN)?;
    let body_len = be32(&h[8..12]) as usize;
    if h[0] != RESPONSE || body_len > MAX_BODY {
        return None;
    }
    let named = be16(&h[2..4]) as usize + h[4] as usize;
    Some((HEADER_LEN + body_len, body_len.saturating_sub(named)))
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
            ReplyKind::Retrieval => {
                matches!(
                    opcode,
                    op::GET | op::GETQ | op::GETK | op::GETKQ | op::GATK | op::GATKQ
                )
            }
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
            ReplyKind::MetaStore
            | ReplyKind::MetaDelete
            | ReplyKind::MetaProbe
            | ReplyKind::MetaCmd => false,
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
        op::GET | op::GETQ | op::GETK | op::GETKQ | op::GATK | op::GATKQ => {
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
#[path = "binary_tests.rs"]
mod tests;
