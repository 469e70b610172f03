//! The client: every operation is a batch. Keys are routed by the ring, each involved server gets
//! one buffer of pipelined requests, and all involved connections are driven at once by one poll
//! loop that interleaves writes and reads (so no batch size can deadlock on full socket buffers).
//! Every reply is attributed to its key; a failed server fails exactly its own keys.
//!
//! The files of this folder, in the order a request travels:
//! - `config`: behaviors, namespace and server list changed, each published as a new snapshot;
//! - `snapshot`: the configuration one operation runs with (ring, behaviors, socket options);
//! - `topology`: the server set a snapshot routes over, and how a new list is matched to it;
//! - `pin`: a call's group key (`server_key=`), which places every key of the call by it;
//! - `plan`: keys validated, routed and encoded into one `ServerBatch` per server (`batch`);
//!   `keys`: keys in one buffer, for a request that outlives its caller's arguments, and the
//!   buffers a thread keeps for its next call;
//! - `op`: the operations, one type each (its plan, sink, metrics family, replay safety and
//!   settling; get's family is a folder: its encoder, its sink, its replica fail-over read);
//! - `calls`: the blocking methods the binding calls, each an operation run;
//! - `replicas`: a key's replica servers, their writes and which failures a read fails over on
//!   (`num_replicas`);
//! - `drive`: connections checked out and driven to completion: blocking (`poll`), by an event
//!   loop's selector (asyncio, the blocking driver taking over whatever would wait), or a lone
//!   `noreply` write;
//! - `stall`: a stalled batch checked on a fresh connection before it counts against its server;
//! - `probe`: whether a server speaks the meta protocol, asked on a connection of its own;
//! - `warm`: `warm_up`, each server's pool filled with connections that answered a ping;
//! - `inflight`: one batch on its connection (writes, reads handed to `replies`);
//! - `replies`: each reply unit matched to the request and keys it answers (no socket), a quiet
//!   meta segment settled by `quiet`;
//! - `sink`: replies turned into per-key outcomes (no socket); a large value keeping its read
//!   buffer (`claim`); a fetch's result (`fetched`).
//!
//! This file: `Client`, its construction, the snapshot an operation takes, events and metrics;
//! what its calls answer is in `results`. Depends on `server`,
//! `connection`, `protocol`, `ring`, `behaviors`, `error`. Never on Python.

mod batch;
mod calls;
mod claim;
mod config;
pub mod drive;
pub mod fetched;
mod inflight;
pub mod keys;
pub mod op;
pub mod pin;
mod plan;
mod probe;
mod quiet;
mod replicas;
mod replies;
pub mod results;
pub(crate) mod sink;
mod snapshot;
mod stall;
pub mod topology;
mod warm;

#[cfg(test)]
mod fake_tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use crate::behaviors::Behaviors;
use crate::connection::connect::Address;
use crate::error::{Error, Result};
use crate::server::health::{self, FailureContext, Verdict};
use crate::server::Peek;
use fetched::Fetched;
use results::{MetaOutcome, ServerSpec, Stats, StoreStatus};
use snapshot::Snapshot;
use topology::Topology;

/// A memcached client over a list of servers, shared by any number of threads: no lock is held
/// across I/O (each server keeps its own pool of idle connections), and a configuration change
/// (behaviors, or the server list: `set_servers`) publishes a new `Snapshot` that operations
/// already running do not see.
pub struct Client {
    snapshot: RwLock<Arc<Snapshot>>,
    /// A server may have been ejected or come back: the next snapshot checks the ring.
    maybe_ejected: AtomicBool,
    /// Server state changes not yet handed to the caller (`take_events`).
    events: Mutex<Vec<ServerEvent>>,
    has_events: AtomicBool,
    /// The weighted ring is on only because a server of the current list has a weight above 1
    /// (not by a behavior): `set_servers` starts from it off, as a fresh client would. Written
    /// under the snapshot's write lock.
    weighted_by_servers: AtomicBool,
}

/// A change of a server's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A healthy server failed: it is in its retry window.
    Down,
    /// A server that had failed answered again.
    Up,
    /// Taken out of the ring (`auto_eject`/`remove_failed`).
    Ejected,
    /// Back in the ring after an ejection.
    Rejoined,
    /// Put in the server list by `set_servers`.
    Added,
    /// Taken out of the server list by `set_servers`.
    Removed,
}

#[derive(Clone, Debug)]
pub struct ServerEvent {
    pub kind: EventKind,
    pub address: Address,
    /// The error that caused it, for `Down` and `Ejected`.
    pub detail: Option<String>,
}

/// At most this many events wait to be taken; older ones are dropped first.
const MAX_EVENTS: usize = 1024;

impl Client {
    /// Build a client. Behaviors are applied before the servers are added, as pylibmc does
    /// (which matters for weighted rings: docs/design/placement.md#the-weighted-flag).
    pub fn new(
        specs: Vec<ServerSpec>,
        mut behaviors: Behaviors,
        namespace: Vec<u8>,
    ) -> Result<Client> {
        if specs.is_empty() {
            return Err(Error::NoServers);
        }
        let topo = Topology::fresh(specs, 0);
        let by_servers = topology::note_servers(&mut behaviors.ring, &topo);
        Ok(Self::assemble(topo, behaviors, namespace, by_servers))
    }

    fn assemble(
        topo: Topology,
        behaviors: Behaviors,
        namespace: Vec<u8>,
        weighted_by_servers: bool,
    ) -> Client {
        let live = vec![true; topo.servers.len()];
        let snap = Snapshot::new(behaviors, namespace, Arc::new(topo), live);
        Client {
            snapshot: RwLock::new(Arc::new(snap)),
            maybe_ejected: AtomicBool::new(false),
            events: Mutex::new(Vec::new()),
            has_events: AtomicBool::new(false),
            weighted_by_servers: AtomicBool::new(weighted_by_servers),
        }
    }

    /// A new client with the same servers and behaviors and its own connections, as
    /// `memcached_clone` makes it (which can drop the weighted-ring flag: see
    /// `ring::RingSettings::after_clone` and docs/design/placement.md#clones-and-pools).
    pub fn clone_client(&self) -> Client {
        let snap = self.snapshot.read().clone();
        let mut behaviors = snap.behaviors.clone();
        behaviors.ring = behaviors.ring.after_clone(&snap.topo.ring_servers);
        let topo = Topology::fresh(snap.topo.specs.clone(), 0);
        // The clone's flag comes from its servers' weights alone.
        let by_servers = behaviors.ring.weighted;
        Self::assemble(topo, behaviors, snap.namespace.clone(), by_servers)
    }

    /// The current server set (no ejection check: for listings, not for routing).
    fn topo(&self) -> Arc<Topology> {
        self.snapshot.read().topo.clone()
    }

    /// The servers as given, in order (the constructor's list or the last `set_servers`).
    pub fn addresses(&self) -> Vec<Address> {
        self.topo().addresses()
    }

    /// Bumped by every change of the server list.
    pub fn topology_version(&self) -> u64 {
        self.snapshot.read().topo.version
    }

    /// The current servers' addresses with the topology version they belong to.
    pub fn versioned_addresses(&self) -> (u64, Vec<Address>) {
        let topo = self.topo();
        (topo.version, topo.addresses())
    }

    pub fn behaviors(&self) -> Behaviors {
        self.snapshot.read().behaviors.clone()
    }

    /// The snapshot in place, for a step that never blocks (the `*_now` writes): the read lock
    /// is held only while it runs. `None` when the ring may need a rebuild (`snapshot` does it).
    fn snapshot_in_place(&self) -> Option<parking_lot::RwLockReadGuard<'_, Arc<Snapshot>>> {
        if self.maybe_ejected.load(Ordering::Relaxed) || pin::pinned() {
            return None;
        }
        Some(self.snapshot.read())
    }

    /// The snapshot for one operation; rebuilds the ring first if a server was ejected or came
    /// back. Pinned to the group key's server while one is pinned on this thread (`pin`).
    #[inline(always)]
    fn snapshot(&self) -> Arc<Snapshot> {
        let snap = self.snapshot_live();
        match pin::current() {
            None => snap,
            Some(group) => Arc::new(snap.pinned(&group)),
        }
    }

    /// `snapshot`, unpinned.
    #[inline(always)]
    fn snapshot_live(&self) -> Arc<Snapshot> {
        let snap = self.snapshot.read().clone();
        if !self.maybe_ejected.load(Ordering::Relaxed) {
            return snap;
        }
        self.snapshot_rebuilt(snap)
    }

    /// `snap`, or the snapshot rebuilt where a server was ejected or came back since.
    #[cold]
    fn snapshot_rebuilt(&self, snap: Arc<Snapshot>) -> Arc<Snapshot> {
        let now = Instant::now();
        for s in &snap.topo.servers {
            if s.rejoined(now) {
                s.metrics.counted.rejoins.fetch_add(1, Ordering::Relaxed);
                self.note_event(EventKind::Rejoined, &s.address, None);
            }
        }
        let live: Vec<bool> = snap
            .topo
            .servers
            .iter()
            .map(|s| !s.is_ejected(now))
            .collect();
        if live.iter().all(|&l| l) {
            self.maybe_ejected.store(false, Ordering::Relaxed);
        }
        if live == snap.live {
            return snap;
        }
        let mut guard = self.snapshot.write();
        let cur = &**guard;
        if !Arc::ptr_eq(&cur.topo, &snap.topo) {
            // The server list changed meanwhile; `set_servers` looked at ejections itself.
            return guard.clone();
        }
        // An ejection or a return rebuilds the continuum with the key hash of now, as
        // libmemcached's `run_distribution` does.
        let mut behaviors = cur.behaviors.clone();
        behaviors.ring.rebuild();
        let new = Arc::new(Snapshot::new(
            behaviors,
            cur.namespace.clone(),
            cur.topo.clone(),
            live,
        ));
        *guard = new.clone();
        new
    }

    /// pylibmc's `hash()`: the index of the server `key` maps to in libmemcached's own server
    /// list, which `_sort_hosts` sorts (the caller's order otherwise).
    pub fn hash_index(&self, key: &[u8]) -> usize {
        let snap = self.snapshot();
        let mut wire = snap.namespace.clone();
        wire.extend_from_slice(key);
        snap.ring.internal_for(snap.hashed(key, &wire))
    }

    /// The server (index in the list as given) each key maps to now, with the topology version
    /// the indices belong to; a key that cannot be sent maps to the first server (it is refused
    /// there without I/O).
    pub fn route_keys(&self, keys: &[&[u8]]) -> (u64, Vec<usize>) {
        let snap = self.snapshot();
        let routes = keys
            .iter()
            .map(|k| match snap.wire_key(k, snap.behaviors.verify_keys) {
                Ok(w) => snap.route(k, &w),
                Err(_) => 0,
            })
            .collect();
        (snap.topo.version, routes)
    }

    /// The socket buffer sizes pylibmc reads back for `_socket_send_size`/`_socket_recv_size`
    /// when they were never set: those of a live connection to the first server (the kernel
    /// grows a connected TCP socket's buffers), or 0 when it cannot be reached.
    pub fn socket_buffer_sizes(&self) -> (usize, usize) {
        let snap = self.snapshot();
        let Some(first) = snap.topo.servers.first() else {
            return (0, 0);
        };
        match first.checkout(&snap.opts, Peek::Never) {
            Ok((conn, _)) => {
                let sizes = conn.buffer_sizes();
                first.checkin(conn);
                sizes
            }
            Err(_) => (0, 0),
        }
    }

    /// Queue a server state change for `take_events` (plain Rust: no callback runs here).
    pub(crate) fn note_event(&self, kind: EventKind, address: &Address, detail: Option<String>) {
        let mut q = self.events.lock();
        if q.len() >= MAX_EVENTS {
            q.remove(0);
        }
        q.push(ServerEvent {
            kind,
            address: address.clone(),
            detail,
        });
        self.has_events.store(true, Ordering::Release);
    }

    /// Whether `take_events` has something (one relaxed load).
    #[inline(always)]
    pub fn events_pending(&self) -> bool {
        self.has_events.load(Ordering::Relaxed)
    }

    /// The state changes since the last call (one atomic load when there are none: this runs
    /// after every call, so the common case must not write the shared flag).
    pub fn take_events(&self) -> Vec<ServerEvent> {
        if !self.has_events.load(Ordering::Relaxed)
            || !self.has_events.swap(false, Ordering::Acquire)
        {
            return Vec::new();
        }
        std::mem::take(&mut *self.events.lock())
    }

    /// Every server's metrics, in server order (`metrics::MetricsSnapshot`).
    pub fn metrics(&self) -> Vec<(Address, crate::metrics::MetricsSnapshot)> {
        self.topo()
            .servers
            .iter()
            .map(|s| (s.address.clone(), s.metrics_snapshot()))
            .collect()
    }

    /// Every server's hot keys (`metrics::hot`), hottest first, in server order; empty lists
    /// while hot-key telemetry is off. With `clear`, each summary starts again.
    pub fn hot_keys(&self, clear: bool) -> Vec<(Address, Vec<crate::metrics::hot::HotKey>)> {
        let snap = self.snapshot();
        let one_in = snap.behaviors.hot.one_in;
        snap.topo
            .servers
            .iter()
            .map(|s| (s.address.clone(), s.metrics.hot.report(one_in, clear)))
            .collect()
    }

    /// Where `key` stands among its server's hot keys: its rank (1: the hottest) and estimated
    /// requests; `None` while the telemetry is off or the key is not held.
    pub fn hot_rank(&self, key: &[u8]) -> Option<(usize, u64)> {
        let snap = self.snapshot();
        let hot = snap.behaviors.hot;
        if !hot.on() {
            return None;
        }
        let wire = snap.wire_key(key, false).ok()?;
        let server = snap.topo.servers.get(snap.route(key, &wire))?;
        let (rank, count) = server.metrics.hot.rank(key)?;
        Some((rank, count.saturating_mul(u64::from(hot.one_in))))
    }

    pub fn server_count(&self) -> usize {
        self.topo().servers.len()
    }

    /// Close all idle connections (sending `quit`) and forget server failures.
    pub fn disconnect_all(&self) {
        for s in &self.topo().servers {
            s.disconnect_idle();
            s.reset_health();
        }
    }

    /// Act on what failure `e` of server `server` costs it (`health::verdict`, given `ctx`):
    /// count a transient failure, or count the failure against the server, noting its events;
    /// a newly ejected server makes the next operation rebuild the ring.
    fn server_failed(&self, snap: &Snapshot, server: usize, e: &Error, ctx: FailureContext) {
        let Some(s) = snap.topo.servers.get(server) else {
            return;
        };
        match health::verdict(e, ctx) {
            Verdict::ConnectionOnly => {}
            Verdict::Transient => {
                s.metrics.counted.transient.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::CountsAgainstServer => {
                let counted = s.record_failure(Instant::now(), &snap.policy);
                if counted.marked_down {
                    self.note_event(EventKind::Down, &s.address, Some(e.to_string()));
                }
                if counted.ejected {
                    s.metrics.counted.ejections.fetch_add(1, Ordering::Relaxed);
                    self.maybe_ejected.store(true, Ordering::Relaxed);
                    self.note_event(EventKind::Ejected, &s.address, Some(e.to_string()));
                }
            }
        }
    }
}
