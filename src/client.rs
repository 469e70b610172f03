//! The client: every operation is a batch. Keys are routed by the ring, each involved server gets
//! one buffer of pipelined requests, and all involved connections are driven at once by one poll
//! loop that interleaves writes and reads (so no batch size can deadlock on full socket buffers).
//! Every reply is attributed to its key; a failed server fails exactly its own keys.
//!
//! Depends on `pool`, `connection`, `protocol`, `ring`, `behaviors`, `error`. Never on Python.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use rustix::event::{PollFd, PollFlags};

use crate::behaviors::{Behaviors, Rejected};
use crate::connection::{is_stale_connection_error, Address, Connection, SocketOptions};
use crate::error::{Error, Result};
use crate::pool::{FailurePolicy, Probe, Server};
use crate::protocol::{binary, meta, text};
use crate::protocol::{validate_binary_key, validate_text_key, Parsed, Reply, ReplyKind, StoreCmd};
use crate::ring::{Ring, RingServer};

/// Keys per `get` line: keeps lines short for every server (memcached 1.6.12 rejected huge ones).
const KEYS_PER_GET: usize = 100;

/// About how many bytes a delete, incr/decr or touch request takes besides its key (the binary
/// header is 24 bytes, `incr <key> <20 digits> noreply\r\n` 36).
const REQUEST_BYTES: usize = 40;

/// Most bytes reserved up front for the values of one `get_multi`.
const ARENA_START: usize = 256 * 1024;

/// After this many unwaited `noreply` writes on a connection, the next one waits for the server
/// to catch up (`Job::prepend_sync`): what it may owe stays bounded.
const MAX_UNSYNCED: u32 = 1024;

/// Values at least this large go in a quiet meta segment of their own (see `store_multi`).
const QUIET_ALONE: usize = 8 * 1024;

/// A server as given by the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    pub address: Address,
    pub weight: u32,
}

/// A fetched value: its flags, its CAS unique, and where its bytes are in `Fetched::data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    pub cas: Option<u64>,
    start: usize,
    len: usize,
}

/// What a fetch returns: one outcome per key; the values' bytes are kept together in one buffer
/// (one allocation for the batch instead of one per value).
#[derive(Debug, Default)]
pub struct Fetched {
    pub items: Vec<Result<Option<Item>>>,
    data: Vec<u8>,
}

impl Fetched {
    /// The bytes of a value of this batch.
    pub fn bytes(&self, item: &Item) -> &[u8] {
        self.data
            .get(item.start..item.start.saturating_add(item.len))
            .unwrap_or_default()
    }
}

/// What a storage command answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreStatus {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

/// One server's `stats` reply: (name, value) pairs.
pub type Stats = Vec<(Vec<u8>, Vec<u8>)>;

/// What `plan` makes of an operation's keys: wire keys, per-server jobs, keys failed up front.
type Plan<'k> = (Vec<Cow<'k, [u8]>>, Vec<Job>, Vec<(u32, Error)>);

/// One storage request of a batch.
#[derive(Clone, Copy, Debug)]
pub struct StoreItem<'a> {
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    pub data: &'a [u8],
    pub cas: u64,
}

struct State {
    behaviors: Behaviors,
    namespace: Vec<u8>,
    ring: Ring,
    live: Vec<bool>,
    opts: SocketOptions,
    policy: FailurePolicy,
}

pub struct Client {
    servers: Vec<Server>,
    ring_servers: Vec<RingServer>,
    state: RwLock<Arc<State>>,
    maybe_ejected: AtomicBool,
}

fn ring_server(spec: &ServerSpec) -> RingServer {
    match &spec.address {
        Address::Tcp { host, port } => RingServer {
            host: host.clone(),
            port: if *port == 0 { 11211 } else { *port },
            weight: spec.weight.max(1),
        },
        Address::Unix(path) => RingServer {
            host: path.clone(),
            port: 0,
            weight: spec.weight.max(1),
        },
    }
}

impl State {
    fn new(
        behaviors: Behaviors,
        namespace: Vec<u8>,
        servers: &[RingServer],
        live: Vec<bool>,
    ) -> Self {
        let ring = Ring::build(&behaviors.ring, servers, &live);
        let opts = SocketOptions {
            binary: behaviors.binary,
            security: behaviors.security.clone(),
            connect_timeout: behaviors.connect_timeout(),
            read_timeout: behaviors.read_timeout(),
            write_timeout: behaviors.write_timeout(),
            tcp_keepalive: behaviors.tcp_keepalive,
            send_buffer: behaviors
                .socket_send_size
                .and_then(|v| usize::try_from(v).ok()),
            recv_buffer: behaviors
                .socket_recv_size
                .and_then(|v| usize::try_from(v).ok()),
        };
        let policy = FailurePolicy {
            retry_timeout: behaviors.retry_timeout(),
            auto_eject: behaviors.auto_eject,
            failure_limit: behaviors.failure_limit,
            dead_timeout: behaviors.dead_timeout(),
        };
        State {
            behaviors,
            namespace,
            ring,
            live,
            opts,
            policy,
        }
    }

    /// The key as it goes on the wire, validated.
    fn wire_key<'k>(&self, key: &'k [u8]) -> Result<Cow<'k, [u8]>> {
        let k = if self.namespace.is_empty() {
            Cow::Borrowed(key)
        } else {
            let mut k = Vec::with_capacity(self.namespace.len() + key.len());
            k.extend_from_slice(&self.namespace);
            k.extend_from_slice(key);
            Cow::Owned(k)
        };
        if self.behaviors.binary {
            validate_binary_key(&k)?;
        } else {
            validate_text_key(&k, self.behaviors.verify_keys)?;
        }
        Ok(k)
    }

    fn route(&self, key: &[u8], wire: &[u8]) -> usize {
        if self.behaviors.hash_with_prefix_key {
            self.ring.server_for(wire)
        } else {
            self.ring.server_for(key)
        }
    }
}

/// One request line (or command) in a server's pipeline and the keys it answers for.
#[derive(Clone, Copy, Debug)]
struct Req {
    kind: ReplyKind,
    /// Range in `Job::keys`.
    start: u32,
    len: u32,
    /// The `version` marker that closes a batch of `noreply` commands.
    marker: bool,
}

/// Everything one server is asked in one operation.
struct Job {
    server: usize,
    wbuf: Vec<u8>,
    /// Operation-wide key indices, in the order this server's requests name them.
    keys: Vec<u32>,
    reqs: Vec<Req>,
    /// Where the open quiet meta segment starts in `keys`.
    quiet_start: u32,
    /// A single `noreply` write sent without waiting for anything (`close_noreply`).
    forget: bool,
    /// Binary protocol: the quiet batch is `noreply`, so soft failures (not stored, not found)
    /// count as success, as pylibmc reports them.
    noreply: bool,
    /// TLS only: offsets in `wbuf` where a storage request ends. Each one ends a TLS record,
    /// because memcached (1.6.x) stalls when the record holding the end of a value also holds
    /// the next request: it reads the value exactly and leaves the rest inside OpenSSL, where
    /// its event loop never looks.
    record_ends: Vec<usize>,
}

impl Job {
    fn new(server: usize) -> Job {
        Job {
            server,
            wbuf: Vec::new(),
            keys: Vec::new(),
            reqs: Vec::new(),
            quiet_start: 0,
            forget: false,
            noreply: false,
            record_ends: Vec::new(),
        }
    }

    /// The opaque of the next key pushed: its position in this job (binary protocol).
    fn next_opaque(&self) -> u32 {
        self.keys.len() as u32
    }

    fn push_req(&mut self, kind: ReplyKind, key: u32) {
        let start = self.keys.len() as u32;
        self.keys.push(key);
        self.reqs.push(Req {
            kind,
            start,
            len: 1,
            marker: false,
        });
    }

    /// Add a key to the open quiet meta segment; returns its opaque token (its position there).
    fn push_quiet(&mut self, key: u32) -> u32 {
        let pos = self.keys.len() as u32 - self.quiet_start;
        self.keys.push(key);
        pos
    }

    /// Close the open quiet meta segment, if it has keys: only failures were answered, each
    /// with its token, and `MN` completes every other key of the segment.
    fn close_quiet(&mut self, kind: ReplyKind) {
        let end = self.keys.len() as u32;
        if end == self.quiet_start {
            return;
        }
        meta::encode_noop(&mut self.wbuf);
        self.reqs.push(Req {
            kind,
            start: self.quiet_start,
            len: end - self.quiet_start,
            marker: true,
        });
        self.quiet_start = end;
    }

    /// Close the `noreply` commands of a write. A single one is not waited for at all, as with
    /// pylibmc: the connection notes it as unsynced, and the next request other than such a
    /// write starts with a marker that reads whatever the server answered to it
    /// (`prepend_sync`), so no such answer is ever taken for another request's reply. Several
    /// are closed by a marker, whose round trip reports errors for the batch.
    fn close_noreply(&mut self, single: bool) {
        if single {
            self.forget = true;
        } else {
            self.push_marker(None);
        }
    }

    /// Start with a `version` marker whose answer confirms that every earlier `noreply` command
    /// on the connection was processed; whatever comes before it belongs to those commands.
    fn prepend_sync(&mut self) {
        let mut marker = Vec::new();
        text::encode_version(&mut marker);
        self.wbuf.splice(0..0, marker.iter().copied());
        for end in &mut self.record_ends {
            *end += marker.len();
        }
        self.reqs.insert(
            0,
            Req {
                kind: ReplyKind::Version,
                start: 0,
                len: 0,
                marker: true,
            },
        );
    }

    /// Ask whether the server speaks the meta protocol, after everything else (no keys).
    fn push_meta_probe(&mut self) {
        meta::encode_noop(&mut self.wbuf);
        self.reqs.push(Req {
            kind: ReplyKind::MetaProbe,
            start: self.keys.len() as u32,
            len: 0,
            marker: false,
        });
    }

    /// Close a batch of `noreply` commands (text) or quiet commands (binary): its keys all ride
    /// on the final marker: `version`, or for binary (`Some(kind of the batch)`) a NOOP.
    fn push_marker(&mut self, binary: Option<ReplyKind>) {
        if binary.is_some() {
            binary::encode_noop(&mut self.wbuf, binary::NOOP_OPAQUE);
        } else {
            text::encode_version(&mut self.wbuf);
        }
        self.reqs.push(Req {
            kind: binary.unwrap_or(ReplyKind::Version),
            start: 0,
            len: self.keys.len() as u32,
            marker: true,
        });
    }
}

/// Receives the replies of a batch. `keys` are the operation-wide indices a request answers for;
/// `cursor` is the position inside them that a multi-value reply has reached.
trait Sink {
    /// One reply unit for the current request. `Ok(true)`: the request is complete.
    /// A resumable `Err` fails the request's remaining keys and the stream goes on.
    fn reply(
        &mut self,
        kind: ReplyKind,
        keys: &[u32],
        cursor: &mut usize,
        r: Reply<'_>,
    ) -> Result<bool>;
    /// These keys will get no reply: fail them.
    fn fail(&mut self, keys: &[u32], e: &Error);
    /// One of these keys failed with `e` and the others succeeded, but the server did not say
    /// which (an error line in a quiet meta batch): fail them, to be settled by the caller.
    fn ambiguous(&mut self, keys: &[u32], e: &Error) {
        self.fail(keys, e);
    }
    /// The stream broke the protocol: fail these keys even if they already have an outcome.
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        self.fail(keys, e);
    }
    /// A `noreply` batch ended: `errors` is what the server reported for it (unattributable).
    fn noreply_done(&mut self, keys: &[u32], errors: &[Error]) {
        if let Some(first) = errors.first() {
            let e = Error::ServerError(format!(
                "{} of {} noreply commands failed on this server (first: {first})",
                errors.len(),
                keys.len()
            ));
            self.fail(keys, &e);
        } else {
            self.assume_ok(keys);
        }
    }
    /// `noreply` keys that the server did not complain about.
    fn assume_ok(&mut self, keys: &[u32]);
}

/// A per-key outcome table.
struct Outcomes<T> {
    slots: Vec<Option<Result<T>>>,
}

impl<T> Outcomes<T> {
    fn new(n: usize) -> Self {
        Outcomes {
            slots: (0..n).map(|_| None).collect(),
        }
    }
    fn set(&mut self, i: u32, v: Result<T>) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            *s = Some(v);
        }
    }
    fn set_if_empty(&mut self, i: u32, v: Result<T>) {
        if let Some(s @ None) = self.slots.get_mut(i as usize) {
            *s = Some(v);
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        for &k in keys {
            self.set_if_empty(k, Err(e.clone()));
        }
    }
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        for &k in keys {
            self.set(k, Err(e.clone()));
        }
    }
    fn finish(self) -> Vec<Result<T>> {
        self.slots
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(Error::Protocol("no reply for this key".into()))))
            .collect()
    }
}

struct GetSink<'a> {
    wire: &'a [Cow<'a, [u8]>],
    out: Outcomes<Option<Item>>,
    data: Vec<u8>,
}

impl Sink for GetSink<'_> {
    fn reply(
        &mut self,
        _: ReplyKind,
        keys: &[u32],
        cursor: &mut usize,
        r: Reply<'_>,
    ) -> Result<bool> {
        match r {
            Reply::Value {
                key,
                flags,
                cas,
                data,
            } => {
                // Hits come back in request order: keys skipped over are misses.
                while *cursor < keys.len() {
                    let k = keys[*cursor];
                    *cursor += 1;
                    if *self.wire[k as usize] == *key {
                        let start = self.data.len();
                        self.data.extend_from_slice(data);
                        let len = data.len();
                        self.out.set(
                            k,
                            Ok(Some(Item {
                                flags,
                                cas,
                                start,
                                len,
                            })),
                        );
                        return Ok(false);
                    }
                    // (if empty: a binary batch may have failed this key on its own)
                    self.out.set_if_empty(k, Ok(None));
                }
                Err(Error::Protocol(
                    "value for a key that was not requested".into(),
                ))
            }
            Reply::End => {
                for &k in &keys[(*cursor).min(keys.len())..] {
                    self.out.set_if_empty(k, Ok(None));
                }
                *cursor = keys.len();
                Ok(true)
            }
            Reply::Failed(e) if *cursor == 0 => Err(e),
            Reply::Failed(e) => Err(Error::Protocol(format!(
                "error in the middle of a get reply: {e}"
            ))),
            _ => Err(Error::Protocol("unexpected reply to get".into())),
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        self.out.fail(keys, e);
    }
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        self.out.revoke(keys, e);
    }
    fn assume_ok(&mut self, _: &[u32]) {}
}

/// Sinks for commands with one reply line each.
struct LineSink<T, F: FnMut(Reply<'_>) -> Result<T>> {
    out: Outcomes<T>,
    map: F,
    noreply_value: Option<T>,
    /// Keys failed by an error that may belong to another key of the same range.
    ambiguous: Vec<u32>,
}

impl<T: Clone, F: FnMut(Reply<'_>) -> Result<T>> Sink for LineSink<T, F> {
    fn reply(&mut self, _: ReplyKind, keys: &[u32], _: &mut usize, r: Reply<'_>) -> Result<bool> {
        let v = match r {
            Reply::Failed(e) => Err(e),
            r => (self.map)(r),
        };
        match v {
            Err(e) if !e.is_resumable() => Err(e),
            v => {
                if let Some(&k) = keys.first() {
                    self.out.set(k, v);
                }
                Ok(true)
            }
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        self.out.fail(keys, e);
    }
    fn ambiguous(&mut self, keys: &[u32], e: &Error) {
        self.out.fail(keys, e);
        if keys.len() > 1 {
            self.ambiguous.extend_from_slice(keys);
        }
    }
    fn revoke(&mut self, keys: &[u32], e: &Error) {
        self.out.revoke(keys, e);
    }
    fn assume_ok(&mut self, keys: &[u32]) {
        if let Some(v) = &self.noreply_value {
            for &k in keys {
                self.out.set_if_empty(k, Ok(v.clone()));
            }
        }
    }
}

fn line_sink<T, F: FnMut(Reply<'_>) -> Result<T>>(
    n: usize,
    map: F,
    noreply_value: Option<T>,
) -> LineSink<T, F> {
    LineSink {
        out: Outcomes::new(n),
        map,
        noreply_value,
        ambiguous: Vec::new(),
    }
}

fn unexpected() -> Error {
    Error::Protocol("reply does not match the request".into())
}

/// `stats` replies: many lines per server.
struct StatsSink {
    out: Vec<Option<Result<Stats>>>,
    acc: Stats,
}

impl Sink for StatsSink {
    fn reply(&mut self, _: ReplyKind, keys: &[u32], _: &mut usize, r: Reply<'_>) -> Result<bool> {
        let Some(&k) = keys.first() else {
            return Ok(true);
        };
        match r {
            Reply::Stat { name, value } => {
                self.acc.push((name.to_vec(), value.to_vec()));
                Ok(false)
            }
            Reply::End => {
                self.out[k as usize] = Some(Ok(std::mem::take(&mut self.acc)));
                Ok(true)
            }
            Reply::Failed(e) if self.acc.is_empty() => Err(e),
            _ => Err(unexpected()),
        }
    }
    fn fail(&mut self, keys: &[u32], e: &Error) {
        for &k in keys {
            if let Some(s @ None) = self.out.get_mut(k as usize) {
                *s = Some(Err(e.clone()));
            }
        }
        self.acc.clear();
    }
    fn assume_ok(&mut self, _: &[u32]) {}
}

/// Where a quiet meta batch stands: the position after the last key the server answered for,
/// and error lines that came without a key (each belongs to some key between two answered ones).
#[derive(Default)]
struct QuietBatch {
    from: usize,
    pending: Vec<(usize, Error)>,
}

impl QuietBatch {
    /// One reply of a quiet meta batch; true when the batch is complete (`MN`).
    fn reply(&mut self, sink: &mut dyn Sink, keys: &[u32], reply: Reply<'_>) -> Result<bool> {
        match reply {
            Reply::Meta { status, opaque } => {
                let pos = opaque as usize;
                if pos < self.from || pos >= keys.len() {
                    return Err(Error::Protocol(
                        "meta reply for a request that was not sent".into(),
                    ));
                }
                for (from, e) in self.pending.drain(..) {
                    sink.ambiguous(&keys[from..pos], &e);
                }
                match sink.reply(ReplyKind::MetaStore, &keys[pos..=pos], &mut 0, *status) {
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
                self.pending.push((self.from, e));
                Ok(false)
            }
            Reply::MetaNoop => {
                for (from, e) in self.pending.drain(..) {
                    sink.ambiguous(&keys[from..], &e);
                }
                sink.assume_ok(keys);
                self.from = 0;
                Ok(true)
            }
            _ => Err(unexpected()),
        }
    }
}

/// Per server, how a write batch goes out: `Some(true)` as quiet meta commands, `Some(false)` as
/// classic commands, `None` as classic commands followed by a probe (the server has not told yet
/// whether it speaks the meta protocol). Empty when quiet commands are not wanted at all: no
/// allocation for single-key, `noreply` or binary writes.
struct QuietPlan(Vec<Option<bool>>);

impl QuietPlan {
    fn mode(&self, server: usize) -> Option<bool> {
        self.0.get(server).copied().unwrap_or(Some(false))
    }
}

/// A job in flight on its connection.
struct Active {
    job: Job,
    conn: Connection,
    binary: bool,
    /// Index of the next entry of `job.record_ends` to honour.
    record: usize,
    reused: bool,
    /// Whether the requests may be sent again after a reply-less failure (reads only).
    replay_safe: bool,
    wpos: usize,
    req: usize,
    cursor: usize,
    marker_errors: Vec<Error>,
    quiet: QuietBatch,
    /// What the meta probe found, if one was sent and answered.
    probe: Option<bool>,
    last_progress: Instant,
    /// Whether an error line was among the replies (see `Connection::answered`).
    error_reply: bool,
    failed: Option<Error>,
}

impl Active {
    /// Finished: failed, or every reply is in and every byte of the requests is out. (A server
    /// may answer before it has read all of a request: memcached refuses a too-large value
    /// after its command line and swallows the data block, which must still be sent in full.)
    fn done(&self) -> bool {
        self.failed.is_some() || (self.req >= self.job.reqs.len() && !self.writing())
    }

    fn writing(&self) -> bool {
        self.wpos < self.job.wbuf.len() || self.conn.pending_write()
    }

    /// Parse every complete unit that has arrived.
    fn parse_available(&mut self, sink: &mut dyn Sink) -> Result<()> {
        if self.binary {
            return self.parse_available_binary(sink);
        }
        while self.req < self.job.reqs.len() {
            let req = self.job.reqs[self.req];
            let parsed = text::parse_reply(req.kind, self.conn.unread())?;
            let Parsed::Done(reply, used) = parsed else {
                return Ok(());
            };
            self.error_reply |= matches!(reply, Reply::Failed(_));
            let keys = &self.job.keys[req.start as usize..(req.start + req.len) as usize];
            let complete = if req.kind == ReplyKind::MetaProbe {
                self.probe = Some(matches!(reply, Reply::MetaNoop));
                true
            } else if matches!(req.kind, ReplyKind::MetaStore | ReplyKind::MetaDelete) {
                self.quiet.reply(sink, keys, reply)?
            } else if req.marker {
                match reply {
                    Reply::Failed(e) => {
                        self.marker_errors.push(e);
                        false
                    }
                    Reply::Version(_) => {
                        sink.noreply_done(keys, &self.marker_errors);
                        self.marker_errors.clear();
                        if keys.is_empty() {
                            self.conn.synced();
                        }
                        true
                    }
                    _ => return Err(unexpected()),
                }
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
            self.step(used, complete);
        }
        self.nothing_unasked()
    }

    /// Binary protocol: like `parse_available`, with batches. A batch (quiet stores or deletes,
    /// or GETKQs) is closed by a NOOP whose opaque is `binary::NOOP_OPAQUE`; every other answer
    /// names its key by opaque (its position in the job): a hit, or a failure of that key only.
    /// A successful NOOP means every key not answered succeeded (stores) or missed (gets); a
    /// failed NOOP (e.g. the server demands authentication) fails them.
    fn parse_available_binary(&mut self, sink: &mut dyn Sink) -> Result<()> {
        while self.req < self.job.reqs.len() {
            let req = self.job.reqs[self.req];
            let parsed = binary::parse_reply(req.kind, self.conn.unread())?;
            let Parsed::Done((reply, opaque), used) = parsed else {
                return Ok(());
            };
            self.error_reply |= matches!(reply, Reply::Failed(_));
            let keys = &self.job.keys[req.start as usize..(req.start + req.len) as usize];
            let batch = req.marker || req.kind == ReplyKind::Retrieval;
            let complete = if !batch {
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
                let one = &keys[pos..=pos];
                match reply {
                    Reply::Failed(e) => sink.fail(one, &e),
                    Reply::Value { .. } if !req.marker => {
                        // The sink may only match a hit to the key its opaque names (keys
                        // before it are misses: GETKQ answers in order).
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
                    Reply::NotStored | Reply::Exists | Reply::NotFound
                        if req.marker && self.job.noreply => {}
                    r if req.marker => match sink.reply(req.kind, one, &mut 0, r) {
                        Ok(_) => {}
                        Err(e) if e.is_resumable() => sink.fail(one, &e),
                        Err(e) => return Err(e),
                    },
                    _ => return Err(unexpected()),
                }
                false
            };
            self.step(used, complete);
        }
        self.nothing_unasked()
    }

    /// Consume a parsed unit; move on to the next request when this one is complete.
    fn step(&mut self, used: usize, complete: bool) {
        self.conn.consume(used);
        if complete {
            self.req += 1;
            self.cursor = 0;
        }
    }

    /// After the last reply unit that has arrived: any byte left over was never asked for.
    fn nothing_unasked(&self) -> Result<()> {
        if self.conn.is_idle_clean() {
            Ok(())
        } else {
            Err(Error::Protocol(
                "the server sent more than was asked".into(),
            ))
        }
    }

    /// Write what the socket takes now; true if anything was written.
    fn write_some(&mut self) -> Result<bool> {
        let mut progressed = false;
        while self.writing() {
            let pending = self.conn.pending_write();
            let mut end = self.job.wbuf.len();
            while let Some(&e) = self.job.record_ends.get(self.record) {
                if e > self.wpos {
                    end = e;
                    break;
                }
                self.record += 1;
            }
            let n = self.conn.send_nonblocking(&self.job.wbuf[self.wpos..end])?;
            if n == 0 {
                progressed |= pending && !self.conn.pending_write();
                break;
            }
            self.wpos += n;
            progressed = true;
        }
        Ok(progressed)
    }

    /// The remaining keys of this job, which will get no reply now.
    fn fail_rest(&self, sink: &mut dyn Sink, e: &Error) {
        if matches!(e, Error::Protocol(_)) {
            // A reply for a key not asked for, or bytes after the last reply: the stream is out
            // of step, so no reply on it is trusted, not even the ones that looked complete.
            sink.revoke(&self.job.keys, e);
            return;
        }
        for (i, req) in self.job.reqs.iter().enumerate().skip(self.req) {
            let keys = &self.job.keys[req.start as usize..(req.start + req.len) as usize];
            let from = if i == self.req {
                self.cursor.min(keys.len())
            } else {
                0
            };
            sink.fail(&keys[from..], e);
        }
    }
}

fn fail_job(job: &Job, sink: &mut dyn Sink, e: &Error) {
    sink.fail(&job.keys, e);
}

fn to_timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    }
}

impl Client {
    /// Build a client. Behaviors are applied before the servers are added, as pylibmc does
    /// (which matters for weighted rings).
    pub fn new(
        specs: Vec<ServerSpec>,
        mut behaviors: Behaviors,
        namespace: Vec<u8>,
    ) -> Result<Client> {
        if specs.is_empty() {
            return Err(Error::NoServers);
        }
        let ring_servers: Vec<RingServer> = specs.iter().map(ring_server).collect();
        for s in &ring_servers {
            behaviors.ring.note_server_added(s.weight);
        }
        Ok(Self::assemble(specs, ring_servers, behaviors, namespace))
    }

    fn assemble(
        specs: Vec<ServerSpec>,
        ring_servers: Vec<RingServer>,
        behaviors: Behaviors,
        namespace: Vec<u8>,
    ) -> Client {
        let live = vec![true; specs.len()];
        let state = State::new(behaviors, namespace, &ring_servers, live);
        Client {
            servers: specs
                .into_iter()
                .map(|s| Server::new(s.address, s.weight))
                .collect(),
            ring_servers,
            state: RwLock::new(Arc::new(state)),
            maybe_ejected: AtomicBool::new(false),
        }
    }

    /// A new client with the same servers and behaviors and its own connections, as
    /// `memcached_clone` makes it (which can drop the weighted-ring flag: distribution.md s.10).
    pub fn clone_client(&self) -> Client {
        let st = self.state.read().clone();
        let mut behaviors = st.behaviors.clone();
        behaviors.ring = behaviors.ring.after_clone(&self.ring_servers);
        let specs = self
            .servers
            .iter()
            .map(|s| ServerSpec {
                address: s.address.clone(),
                weight: s.weight,
            })
            .collect();
        Self::assemble(
            specs,
            self.ring_servers.clone(),
            behaviors,
            st.namespace.clone(),
        )
    }

    pub fn addresses(&self) -> Vec<Address> {
        self.servers.iter().map(|s| s.address.clone()).collect()
    }

    pub fn behaviors(&self) -> Behaviors {
        self.state.read().behaviors.clone()
    }

    /// Change behaviors. Idle connections are closed so that new socket options apply.
    pub fn update_behaviors<F>(&self, f: F) -> std::result::Result<(), Rejected>
    where
        F: FnOnce(&mut Behaviors) -> std::result::Result<(), Rejected>,
    {
        let mut guard = self.state.write();
        let mut b = guard.behaviors.clone();
        let r = f(&mut b);
        // Behaviors before a rejected one stay applied, as in libmemcached.
        let live = guard.live.clone();
        *guard = Arc::new(State::new(
            b,
            guard.namespace.clone(),
            &self.ring_servers,
            live,
        ));
        drop(guard);
        for s in &self.servers {
            s.drop_idle();
        }
        r
    }

    pub fn set_namespace(&self, namespace: Vec<u8>) {
        let mut guard = self.state.write();
        let st = &**guard;
        *guard = Arc::new(State::new(
            st.behaviors.clone(),
            namespace,
            &self.ring_servers,
            st.live.clone(),
        ));
    }

    /// The state for one operation; rebuilds the ring first if a server was ejected or came back.
    fn snapshot(&self) -> Arc<State> {
        let st = self.state.read().clone();
        if !self.maybe_ejected.load(Ordering::Relaxed) {
            return st;
        }
        let now = Instant::now();
        let live: Vec<bool> = self.servers.iter().map(|s| !s.is_ejected(now)).collect();
        if live.iter().all(|&l| l) {
            self.maybe_ejected.store(false, Ordering::Relaxed);
        }
        if live == st.live {
            return st;
        }
        let mut guard = self.state.write();
        let cur = &**guard;
        let new = Arc::new(State::new(
            cur.behaviors.clone(),
            cur.namespace.clone(),
            &self.ring_servers,
            live,
        ));
        *guard = new.clone();
        new
    }

    /// The index of the server `key` maps to (pylibmc's `hash()`).
    pub fn server_for(&self, key: &[u8]) -> usize {
        let st = self.snapshot();
        let mut wire = st.namespace.clone();
        wire.extend_from_slice(key);
        st.route(key, &wire)
    }

    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// Close all idle connections (sending `quit`) and forget server failures.
    pub fn disconnect_all(&self) {
        for s in &self.servers {
            s.disconnect_idle();
            s.reset_health();
        }
    }

    /// Validate keys and group them by server. Returns per-key wire keys (empty on error; only
    /// with `keep_wire`, else none at all), the jobs, and pre-failed keys. `per_key`: about how
    /// many bytes a key's request takes besides the key; each job's request buffer is sized for
    /// its share of the keys up front, so that encoding (above all of a single key) does not
    /// regrow it step by step.
    fn plan<'k, F>(
        &self,
        st: &State,
        keys: &[&'k [u8]],
        keep_wire: bool,
        per_key: usize,
        mut encode: F,
    ) -> Plan<'k>
    where
        F: FnMut(&mut Job, u32, &[u8]),
    {
        let mut wire = Vec::with_capacity(if keep_wire { keys.len() } else { 0 });
        let mut bad = Vec::new();
        let n = self.servers.len();
        let mut jobs: Vec<Job> = Vec::new();
        // Which job serves each server (`usize::MAX`: none yet); on the stack for a few servers.
        let mut few = [usize::MAX; 16];
        let mut many = Vec::new();
        let slot: &mut [usize] = if n <= few.len() {
            &mut few[..n]
        } else {
            many.resize(n, usize::MAX);
            &mut many
        };
        for (i, key) in keys.iter().enumerate() {
            match st.wire_key(key) {
                Ok(w) => {
                    let s = st.route(key, &w).min(n - 1);
                    if slot[s] == usize::MAX {
                        slot[s] = jobs.len();
                        let mut job = Job::new(s);
                        // An even share of the keys, as a first guess that saves regrowing.
                        let share = keys.len() / n + 1;
                        job.keys.reserve(share);
                        if per_key > 0 {
                            job.wbuf.reserve(share * (w.len() + per_key));
                        }
                        jobs.push(job);
                    }
                    let job = &mut jobs[slot[s]];
                    encode(job, i as u32, &w);
                    if keep_wire {
                        wire.push(w);
                    }
                }
                Err(e) => {
                    bad.push((i as u32, e));
                    if keep_wire {
                        wire.push(Cow::Borrowed(&[]));
                    }
                }
            }
        }
        (wire, jobs, bad)
    }

    /// How a write batch goes out to each server (see `QuietPlan`); only asks the servers when
    /// quiet meta commands are `wanted`.
    fn quiet_plan(&self, wanted: bool) -> QuietPlan {
        QuietPlan(if wanted {
            self.servers.iter().map(|s| s.meta_support()).collect()
        } else {
            Vec::new()
        })
    }

    /// Close each job of a write batch: for the binary protocol (`binary`: the batch's kind) the
    /// closing NOOP; else the meta no-op for a quiet batch, the `version` marker for classic
    /// `noreply` commands, and a probe where the server's protocols are unknown.
    fn close_batches(
        jobs: &mut [Job],
        binary: Option<ReplyKind>,
        quiet: &QuietPlan,
        noreply: bool,
        single: bool,
        kind: ReplyKind,
    ) {
        for job in jobs {
            if binary.is_some() {
                // Quiet opcodes answer only failures, noreply or not; with `noreply` the
                // not-stored and not-found answers are dropped (`parse_available_binary`).
                job.noreply = noreply;
                job.push_marker(binary);
                continue;
            }
            match quiet.mode(job.server) {
                Some(true) => job.close_quiet(kind),
                _ if noreply => job.close_noreply(single),
                Some(false) => {}
                None => job.push_meta_probe(),
            }
        }
    }

    /// Read back the keys of ambiguous ranges (see `Sink::ambiguous`): for each, whether the
    /// server has it now, with its flags and bytes. A key whose read fails is left out (it
    /// keeps its error).
    #[allow(clippy::type_complexity)]
    fn read_back<'k>(
        &self,
        mut idx: Vec<u32>,
        key: impl Fn(u32) -> &'k [u8],
    ) -> Vec<(u32, Option<(u32, Vec<u8>)>)> {
        if idx.is_empty() {
            return Vec::new();
        }
        idx.sort_unstable();
        idx.dedup();
        let keys: Vec<&[u8]> = idx.iter().map(|&i| key(i)).collect();
        let got = self.get_multi(&keys, false);
        idx.iter()
            .zip(&got.items)
            .filter_map(|(&i, r)| match r {
                Ok(Some(item)) => Some((i, Some((item.flags, got.bytes(item).to_vec())))),
                Ok(None) => Some((i, None)),
                Err(_) => None,
            })
            .collect()
    }

    /// Fetch keys (`gets` when `with_cas`). Duplicates should be removed by the caller.
    pub fn get_multi(&self, keys: &[&[u8]], with_cas: bool) -> Fetched {
        let st = self.snapshot();
        let with_cas = with_cas || st.behaviors.cas;
        let (wire, mut jobs, bad) = self.plan(&st, keys, true, 0, |job, i, _| job.keys.push(i));
        // Encode the get lines per job, KEYS_PER_GET keys each.
        for job in &mut jobs {
            let n = job.keys.len();
            let lines = n / KEYS_PER_GET + 1;
            // Per key and per line: a space and `get ...\r\n`, or a header and a NOOP.
            let (per_key, per_line) = if st.behaviors.binary {
                (binary::HEADER_LEN, binary::HEADER_LEN)
            } else {
                (1, 8)
            };
            let key_bytes: usize = job
                .keys
                .iter()
                .map(|&k| wire[k as usize].len() + per_key)
                .sum();
            job.wbuf.reserve(key_bytes + lines * per_line);
            job.reqs.reserve(lines);
            let mut start = 0;
            while start < n {
                let end = (start + KEYS_PER_GET).min(n);
                if st.behaviors.binary {
                    // GETKQ per key (hits answer, misses are silent), then a NOOP.
                    for (pos, &k) in job.keys[start..end].iter().enumerate() {
                        binary::encode_getkq(
                            &mut job.wbuf,
                            &wire[k as usize],
                            (start + pos) as u32,
                        );
                    }
                    binary::encode_noop(&mut job.wbuf, binary::NOOP_OPAQUE);
                } else {
                    text::encode_get(
                        &mut job.wbuf,
                        with_cas,
                        job.keys[start..end].iter().map(|&k| &*wire[k as usize]),
                    );
                }
                job.reqs.push(Req {
                    kind: ReplyKind::Retrieval,
                    start: start as u32,
                    len: (end - start) as u32,
                    marker: false,
                });
                start = end;
            }
        }
        let mut sink = GetSink {
            wire: &wire,
            out: Outcomes::new(keys.len()),
            // Room for small values of every key: the arena rarely has to grow.
            data: Vec::with_capacity((keys.len() * 64).min(ARENA_START)),
        };
        for (i, e) in bad {
            sink.out.set(i, Err(e));
        }
        self.run(&st, jobs, &mut sink, true);
        Fetched {
            items: sink.out.finish(),
            data: sink.data,
        }
    }

    /// Storage commands, pipelined. With `noreply` the server answers nothing per key and one
    /// `version` round trip closes the batch, so no stray reply can ever be read later.
    pub fn store_multi(
        &self,
        cmd: StoreCmd,
        items: &[StoreItem<'_>],
        noreply: bool,
    ) -> Vec<Result<StoreStatus>> {
        let st = self.snapshot();
        let noreply = noreply || st.behaviors.noreply;
        let keys: Vec<&[u8]> = items.iter().map(|it| it.key).collect();
        let bin = st.behaviors.binary;
        let tls = st.opts.security.tls.is_some();
        let mut too_big = Vec::new();
        let quiet =
            self.quiet_plan(!bin && !noreply && keys.len() > 1 && meta::has_quiet_store(cmd));
        // No room for values ahead: each encoder reserves exactly what its request takes, and a
        // guess from the average value would reserve twice a single value (or, for a value too
        // big to send, far more than is ever written).
        let (_, mut jobs, mut bad) = self.plan(&st, &keys, false, 0, |job, i, w| {
            let it = &items[i as usize];
            if bin {
                // Quiet opcodes: only failures answer, then the closing NOOP.
                if !binary::body_fits(w, it.data.len()) {
                    too_big.push((i, Error::TooBig));
                    return;
                }
                let opaque = job.next_opaque();
                binary::encode_store(
                    &mut job.wbuf,
                    cmd,
                    w,
                    it.flags,
                    it.exptime,
                    it.data,
                    it.cas,
                    true,
                    opaque,
                );
                job.keys.push(i);
                if tls {
                    job.record_ends.push(job.wbuf.len());
                }
                return;
            }
            if quiet.mode(job.server) == Some(true) {
                // A large value may be refused (`SERVER_ERROR object too large`), and error
                // lines carry no token: it gets a segment of its own, so the error is its own.
                let alone = it.data.len() >= QUIET_ALONE;
                if alone {
                    job.close_quiet(ReplyKind::MetaStore);
                }
                let pos = job.push_quiet(i);
                meta::encode_store_quiet(&mut job.wbuf, cmd, w, it.flags, it.exptime, it.data, pos);
                if tls {
                    job.record_ends.push(job.wbuf.len());
                }
                if alone {
                    job.close_quiet(ReplyKind::MetaStore);
                }
                return;
            }
            text::encode_store(
                &mut job.wbuf,
                cmd,
                w,
                it.flags,
                it.exptime,
                it.data,
                it.cas,
                noreply,
            );
            if tls {
                job.record_ends.push(job.wbuf.len());
            }
            if noreply {
                job.keys.push(i);
            } else {
                job.push_req(ReplyKind::Storage, i);
            }
        });
        bad.append(&mut too_big);
        let binary = bin.then_some(ReplyKind::Storage);
        let single = items.len() == 1;
        Self::close_batches(
            &mut jobs,
            binary,
            &quiet,
            noreply,
            single,
            ReplyKind::MetaStore,
        );
        let mut sink = line_sink(
            items.len(),
            |r| match r {
                Reply::Stored => Ok(StoreStatus::Stored),
                Reply::NotStored => Ok(StoreStatus::NotStored),
                Reply::Exists => Ok(StoreStatus::Exists),
                Reply::NotFound => Ok(StoreStatus::NotFound),
                _ => Err(unexpected()),
            },
            Some(StoreStatus::Stored),
        );
        for (i, e) in bad {
            sink.out.set(i, Err(e));
        }
        self.run(&st, jobs, &mut sink, false);
        // A key stored in an ambiguous range reads back as exactly what was sent.
        let amb = self.read_back(std::mem::take(&mut sink.ambiguous), |i| {
            items[i as usize].key
        });
        for (i, found) in amb {
            let it = &items[i as usize];
            if found.is_some_and(|(flags, data)| flags == it.flags && data == it.data) {
                sink.out.set(i, Ok(StoreStatus::Stored));
            }
        }
        sink.out.finish()
    }

    /// Deletes, pipelined: `true` if deleted, `false` if not found.
    pub fn delete_multi(&self, keys: &[&[u8]], noreply: bool) -> Vec<Result<bool>> {
        let st = self.snapshot();
        let noreply = noreply || st.behaviors.noreply;
        let bin = st.behaviors.binary;
        let quiet = self.quiet_plan(!bin && !noreply && keys.len() > 1);
        let (_, mut jobs, bad) = self.plan(&st, keys, false, REQUEST_BYTES, |job, i, w| {
            if bin {
                let opaque = job.next_opaque();
                binary::encode_delete(&mut job.wbuf, w, true, opaque);
                job.keys.push(i);
                return;
            }
            if quiet.mode(job.server) == Some(true) {
                let pos = job.push_quiet(i);
                meta::encode_delete_quiet(&mut job.wbuf, w, pos);
                return;
            }
            text::encode_delete(&mut job.wbuf, w, noreply);
            if noreply {
                job.keys.push(i);
            } else {
                job.push_req(ReplyKind::Delete, i);
            }
        });
        let binary = bin.then_some(ReplyKind::Delete);
        let single = keys.len() == 1;
        Self::close_batches(
            &mut jobs,
            binary,
            &quiet,
            noreply,
            single,
            ReplyKind::MetaDelete,
        );
        let mut sink = line_sink(
            keys.len(),
            |r| match r {
                Reply::Deleted => Ok(true),
                Reply::NotFound => Ok(false),
                _ => Err(unexpected()),
            },
            Some(true),
        );
        for (i, e) in bad {
            sink.out.set(i, Err(e));
        }
        self.run(&st, jobs, &mut sink, false);
        // A key deleted in an ambiguous range is gone: read the range back.
        let amb = self.read_back(std::mem::take(&mut sink.ambiguous), |i| keys[i as usize]);
        for (i, found) in amb {
            if found.is_none() {
                sink.out.set(i, Ok(true));
            }
        }
        sink.out.finish()
    }

    /// `incr`/`decr`, pipelined: the new value, or `None` if the key does not exist.
    pub fn arith_multi(&self, incr: bool, keys: &[&[u8]], delta: u64) -> Vec<Result<Option<u64>>> {
        let st = self.snapshot();
        let bin = st.behaviors.binary;
        let (_, jobs, bad) = self.plan(&st, keys, false, REQUEST_BYTES, |job, i, w| {
            if bin {
                let opaque = job.next_opaque();
                binary::encode_arith(&mut job.wbuf, incr, w, delta, opaque);
            } else {
                text::encode_arith(&mut job.wbuf, incr, w, delta, false);
            }
            job.push_req(ReplyKind::Arith, i);
        });
        let mut sink = line_sink(
            keys.len(),
            |r| match r {
                Reply::Number(n) => Ok(Some(n)),
                Reply::NotFound => Ok(None),
                _ => Err(unexpected()),
            },
            None,
        );
        for (i, e) in bad {
            sink.out.set(i, Err(e));
        }
        self.run(&st, jobs, &mut sink, false);
        sink.out.finish()
    }

    /// `touch`, pipelined: `true` if touched, `false` if not found.
    pub fn touch_multi(&self, keys: &[&[u8]], exptime: u32, noreply: bool) -> Vec<Result<bool>> {
        let st = self.snapshot();
        let noreply = noreply || st.behaviors.noreply;
        let bin = st.behaviors.binary;
        // The binary protocol has no quiet touch: every touch answers.
        let noreply = noreply && !bin;
        let (_, mut jobs, bad) = self.plan(&st, keys, false, REQUEST_BYTES, |job, i, w| {
            if bin {
                let opaque = job.next_opaque();
                binary::encode_touch(&mut job.wbuf, w, exptime, opaque);
            } else {
                text::encode_touch(&mut job.wbuf, w, exptime, noreply);
            }
            if noreply {
                job.keys.push(i);
            } else {
                job.push_req(ReplyKind::Touch, i);
            }
        });
        if noreply {
            for job in &mut jobs {
                job.close_noreply(keys.len() == 1);
            }
        }
        let mut sink = line_sink(
            keys.len(),
            |r| match r {
                Reply::Touched => Ok(true),
                Reply::NotFound => Ok(false),
                _ => Err(unexpected()),
            },
            Some(true),
        );
        for (i, e) in bad {
            sink.out.set(i, Err(e));
        }
        self.run(&st, jobs, &mut sink, false);
        sink.out.finish()
    }

    /// `flush_all` on every server; one outcome per server.
    pub fn flush_all(&self, delay: u32) -> Vec<Result<()>> {
        let st = self.snapshot();
        let jobs = (0..self.servers.len())
            .map(|s| {
                let mut job = Job::new(s);
                if st.behaviors.binary {
                    binary::encode_flush(&mut job.wbuf, delay);
                } else {
                    text::encode_flush_all(&mut job.wbuf, delay);
                }
                job.push_req(ReplyKind::Ok, s as u32);
                job
            })
            .collect();
        let mut sink = line_sink(
            self.servers.len(),
            |r| match r {
                Reply::Ok => Ok(()),
                _ => Err(unexpected()),
            },
            None,
        );
        self.run(&st, jobs, &mut sink, false);
        sink.out.finish()
    }

    /// `stats [args]` on every server; one outcome per server, in server order.
    pub fn stats(&self, args: &[u8]) -> Vec<Result<Stats>> {
        let st = self.snapshot();
        let n = self.servers.len();
        if args.iter().any(|&b| b == b'\r' || b == b'\n') {
            return (0..n)
                .map(|_| Err(Error::BadKey("stats arguments contain a line break".into())))
                .collect();
        }
        let jobs = (0..n)
            .map(|s| {
                let mut job = Job::new(s);
                if st.behaviors.binary {
                    binary::encode_stats(&mut job.wbuf, args);
                } else {
                    text::encode_stats(&mut job.wbuf, args);
                }
                job.push_req(ReplyKind::Stats, s as u32);
                job
            })
            .collect();
        let mut sink = StatsSink {
            out: (0..n).map(|_| None).collect(),
            acc: Vec::new(),
        };
        self.run(&st, jobs, &mut sink, true);
        sink.out
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(Error::Protocol("no reply".into()))))
            .collect()
    }

    /// Note a server failure; a newly ejected server makes the next operation rebuild the ring.
    fn server_failed(&self, st: &State, server: usize, e: &Error) {
        if e.is_server_failure() {
            if let Some(s) = self.servers.get(server) {
                if s.record_failure(Instant::now(), &st.policy) {
                    self.maybe_ejected.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// Check out connections for the jobs and drive them to completion.
    /// `replay_safe`: the requests only read, so a stale pooled connection that failed before any
    /// reply byte may replay them on a new one. Writes are replayed only if nothing was sent, and
    /// their pooled connections are probed for a server-side close before anything is sent.
    fn run(&self, st: &State, jobs: Vec<Job>, sink: &mut dyn Sink, replay_safe: bool) {
        let mut now = Instant::now();
        let n = jobs.len();
        let mut started = jobs
            .into_iter()
            .filter_map(|job| self.start(st, job, &mut *sink, replay_safe, &mut now));
        let (first, second) = (started.next(), started.next());
        let mut actives: Vec<Active> = match (first, second) {
            (Some(a), Some(b)) => {
                let mut all = Vec::with_capacity(n);
                all.extend([a, b].into_iter().chain(started));
                all
            }
            // One connection (or none): no list of them to keep, no poll loop.
            (one, _) => {
                drop(started);
                if let Some(a) = one {
                    let a = self.drive_one(st, a, sink);
                    self.finish(st, a, sink);
                }
                return;
            }
        };
        self.drive_many(st, &mut actives, sink);
        for a in actives {
            self.finish(st, a, sink);
        }
    }

    /// Check out a connection for `job`; `None` when that failed (the job's keys are failed).
    /// `now` is read again after a checkout that had to connect.
    fn start(
        &self,
        st: &State,
        mut job: Job,
        sink: &mut dyn Sink,
        replay_safe: bool,
        now: &mut Instant,
    ) -> Option<Active> {
        let server = &self.servers[job.server];
        if let Err(e) = server.check_health(*now) {
            fail_job(&job, sink, &e);
            return None;
        }
        let probe = if replay_safe {
            Probe::Never
        } else if job.forget {
            Probe::Always
        } else {
            Probe::UnlessAnswered(*now)
        };
        match server.checkout(&st.opts, probe) {
            Ok((mut conn, reused)) => {
                if !reused {
                    // Connecting may have taken a while: the next checkout needs the time.
                    *now = Instant::now();
                }
                conn.begin_request();
                if conn.unsynced() > 0 && (!job.forget || conn.unsynced() >= MAX_UNSYNCED) {
                    job.prepend_sync();
                }
                Some(Active {
                    job,
                    conn,
                    binary: st.behaviors.binary,
                    record: 0,
                    reused,
                    replay_safe,
                    wpos: 0,
                    req: 0,
                    cursor: 0,
                    marker_errors: Vec::new(),
                    quiet: QuietBatch::default(),
                    probe: None,
                    last_progress: *now,
                    error_reply: false,
                    failed: None,
                })
            }
            Err(e) => {
                self.server_failed(st, job.server, &e);
                fail_job(&job, sink, &e);
                None
            }
        }
    }

    /// Replace a stale pooled connection that failed before any reply byte with a new one and
    /// start the job over. Returns false if that is not safe or the reconnect failed: a write
    /// that reached the server may have been applied, so it is replayed only if nothing was sent.
    fn retry_fresh(&self, st: &State, a: &mut Active, e: &Error) -> bool {
        if !(a.reused
            && !a.conn.received_since_begin()
            && a.req == 0
            && (a.replay_safe || a.wpos == 0)
            && is_stale_connection_error(e))
        {
            return false;
        }
        match Connection::connect(&self.servers[a.job.server].address, &st.opts) {
            Ok(c) => {
                a.conn = c;
                a.reused = false;
                a.wpos = 0;
                a.record = 0;
                a.cursor = 0;
                a.marker_errors.clear();
                a.quiet = QuietBatch::default();
                a.last_progress = Instant::now();
                true
            }
            Err(_) => false,
        }
    }

    /// One server: write, then blocking reads with the socket's timeout (one `send`, one `recv`
    /// for a small request). Falls back to the poll loop if the request does not fit the socket
    /// or a signal interrupts a read.
    fn drive_one(&self, st: &State, mut a: Active, sink: &mut dyn Sink) -> Active {
        loop {
            let r = (|| -> Result<bool> {
                a.write_some()?;
                if a.writing() {
                    return Ok(false);
                }
                let mut received = false;
                loop {
                    a.parse_available(sink)?;
                    if a.done() {
                        return Ok(true);
                    }
                    // The clock is read only when a reply takes more than one read.
                    if received {
                        a.last_progress = Instant::now();
                    }
                    if a.conn.recv_blocking()? == 0 {
                        // A signal interrupted the wait. Waiting again would restart the socket's
                        // timeout (periodic signals would stretch it forever): the poll loop
                        // goes on against the deadline counted from the last progress.
                        return Ok(false);
                    }
                    received = true;
                }
            })();
            match r {
                Ok(true) => return a,
                Ok(false) => {
                    let mut v = vec![a];
                    self.drive_many(st, &mut v, sink);
                    return v.pop().expect("one active");
                }
                Err(e) => {
                    if self.retry_fresh(st, &mut a, &e) {
                        continue;
                    }
                    a.failed = Some(e);
                    return a;
                }
            }
        }
    }

    fn drive_many(&self, st: &State, actives: &mut [Active], sink: &mut dyn Sink) {
        // Start every write without waiting; afterwards touch a socket only when poll says so.
        for a in actives.iter_mut().filter(|a| !a.done()) {
            if let Err(e) = a.write_some().and_then(|_| a.parse_available(sink)) {
                if !self.retry_fresh(st, a, &e) {
                    a.failed = Some(e);
                }
            }
        }
        let mut waiting: Vec<usize> = Vec::with_capacity(actives.len());
        let mut ready: Vec<PollFlags> = Vec::with_capacity(actives.len());
        loop {
            // Deadlines: no progress for the read (or write) timeout fails that server only.
            let now = Instant::now();
            let mut wait = Duration::from_secs(3600);
            for a in actives.iter_mut().filter(|a| !a.done()) {
                let limit = if a.writing() {
                    st.opts.write_timeout
                } else {
                    st.opts.read_timeout
                };
                let deadline = a.last_progress + limit;
                if deadline <= now {
                    a.failed = Some(Error::Timeout);
                } else {
                    wait = wait.min(deadline - now);
                }
            }
            waiting.clear();
            waiting.extend((0..actives.len()).filter(|&i| !actives[i].done()));
            if waiting.is_empty() {
                return;
            }
            ready.clear();
            {
                let mut fds: Vec<PollFd<'_>> = waiting
                    .iter()
                    .map(|&i| {
                        let a = &actives[i];
                        let mut flags = PollFlags::IN;
                        if a.writing() {
                            flags |= PollFlags::OUT;
                        }
                        PollFd::from_borrowed_fd(a.conn.fd(), flags)
                    })
                    .collect();
                let ts = to_timespec(wait.max(Duration::from_millis(1)));
                let _ = rustix::event::poll(&mut fds, Some(&ts));
                ready.extend(fds.iter().map(|f| f.revents()));
            }
            for (&i, &re) in waiting.iter().zip(&ready) {
                if re.is_empty() {
                    continue;
                }
                let a = &mut actives[i];
                let broken = re.intersects(PollFlags::ERR | PollFlags::HUP);
                let r = (|| -> Result<bool> {
                    let mut progressed = false;
                    if a.writing() && (re.contains(PollFlags::OUT) || broken) {
                        progressed |= a.write_some()?;
                    }
                    if (re.contains(PollFlags::IN) || broken) && a.conn.recv_nonblocking()? > 0 {
                        progressed = true;
                        a.parse_available(sink)?;
                    }
                    Ok(progressed)
                })();
                match r {
                    Ok(true) => a.last_progress = Instant::now(),
                    Ok(false) => {}
                    Err(e) => {
                        if !self.retry_fresh(st, a, &e) {
                            a.failed = Some(e);
                        }
                    }
                }
            }
        }
    }

    /// Return a clean connection to the pool; otherwise drop it, fail what is left and note
    /// the server's failure.
    fn finish(&self, st: &State, mut a: Active, sink: &mut dyn Sink) {
        let server = &self.servers[a.job.server];
        if let Some(yes) = a.probe {
            server.set_meta_support(yes);
        }
        // A probe that went unanswered (a proxy may close or ignore unknown commands) after
        // every key was answered: no meta there, and no failure of the server either.
        if a.failed.is_some() && a.job.reqs.get(a.req).map(|r| r.kind) == Some(ReplyKind::MetaProbe)
        {
            server.set_meta_support(false);
            return;
        }
        match a.failed.take() {
            None if a.conn.is_idle_clean() => {
                if a.job.forget {
                    sink.assume_ok(&a.job.keys);
                    a.conn.add_unsynced(a.job.keys.len() as u32);
                } else {
                    // The server answered at the last progress noted, or later.
                    a.conn.answered((!a.error_reply).then_some(a.last_progress));
                }
                server.record_success();
                server.checkin(a.conn);
            }
            None => {}
            Some(e) => {
                if a.job.forget {
                    sink.fail(&a.job.keys, &e);
                }
                a.fail_rest(sink, &e);
                self.server_failed(st, a.job.server, &e);
            }
        }
    }
}
