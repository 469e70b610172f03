//! Changes of a client's configuration, each published as a new `Snapshot` under the snapshot's
//! write lock (plain Rust: no I/O, no Python): behaviors, the namespace and the server list
//! (`set_servers`, matched against the current `Topology`). Operations already running keep the
//! snapshot they started with.
//!
//! Uses `snapshot`, `topology` and `behaviors`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::results::ServerSpec;
use super::snapshot::Snapshot;
use super::topology::{note_servers, Membership};
use super::Client;
use super::EventKind;
use crate::behaviors::{Behaviors, Rejected};
use crate::error::{Error, Result};

impl Client {
    /// Change behaviors. `f` must be plain Rust (it runs under the write lock: no Python, no
    /// I/O). Idle connections are closed when new socket options must apply, and only then: a
    /// connection may carry `noreply` writes the server has not run yet, and once it is closed
    /// the server may run them after what the next connection sends (memcached serves
    /// connections on several threads), so that writes would be reordered.
    pub fn update_behaviors<F>(&self, f: F) -> std::result::Result<(), Rejected>
    where
        F: FnOnce(&mut Behaviors) -> std::result::Result<(), Rejected>,
    {
        let mut guard = self.snapshot.write();
        let mut b = guard.behaviors.clone();
        let r = f(&mut b);
        if b.ring != guard.behaviors.ring {
            // Placement behaviors set: the weighted flag is theirs now.
            self.weighted_by_servers.store(false, Ordering::Relaxed);
        }
        // Behaviors before a rejected one stay applied, as in libmemcached.
        let live = guard.live.clone();
        let namespace = guard.namespace.clone();
        let topo = guard.topo.clone();
        let new = Snapshot::new(b, namespace, topo.clone(), live);
        let reconnect = !guard.opts.opens_as(&new.opts);
        if new.behaviors.hot != guard.behaviors.hot {
            // Counts of other settings are not comparable: a summary starts again.
            for s in &topo.servers {
                s.metrics.hot.clear();
            }
        }
        *guard = Arc::new(new);
        drop(guard);
        if reconnect {
            for s in &topo.servers {
                s.drop_idle();
            }
        }
        r
    }

    pub fn set_namespace(&self, namespace: Vec<u8>) {
        let mut guard = self.snapshot.write();
        let cur = &**guard;
        let behaviors = cur.behaviors.clone();
        let live = cur.live.clone();
        let topo = cur.topo.clone();
        *guard = Arc::new(Snapshot::new(behaviors, namespace, topo, live));
    }

    /// Replace the server list, atomically: an operation runs on the old list or on the new
    /// one, never on a mix. Servers in both lists (same address) keep their connections,
    /// health and metrics; a removed server's connections close when the last operation using
    /// it finishes. The ring is built as a fresh client's over `specs` with these behaviors
    /// (a weight above 1 under a consistent distribution turns the weighted ring on, as in the
    /// constructor; one the old list's weights turned on is off again first), so with a
    /// consistent distribution only the keys of added and removed servers move. Plain Rust
    /// under the snapshot's write lock: no I/O, no connection opened.
    pub fn set_servers(&self, specs: Vec<ServerSpec>) -> Result<Membership> {
        if specs.is_empty() {
            return Err(Error::NoServers);
        }
        let mut guard = self.snapshot.write();
        let cur = guard.clone();
        if cur.topo.specs == specs {
            return Ok(Membership::default());
        }
        let (topo, change) = cur.topo.next(specs, cur.topo.version.wrapping_add(1));
        let mut behaviors = cur.behaviors.clone();
        if self.weighted_by_servers.load(Ordering::Relaxed) {
            behaviors.ring.weighted = false;
        }
        // A fresh client's list: sorted only if `_sort_hosts` is on now.
        behaviors.ring.sorted = false;
        let by_servers = note_servers(&mut behaviors.ring, &topo);
        self.weighted_by_servers
            .store(by_servers, Ordering::Relaxed);
        // Kept servers keep their ejections: the ring leaves them out until they run out.
        let now = Instant::now();
        let live: Vec<bool> = topo.servers.iter().map(|s| !s.is_ejected(now)).collect();
        if live.contains(&false) {
            self.maybe_ejected.store(true, Ordering::Relaxed);
        }
        let snap = Snapshot::new(behaviors, cur.namespace.clone(), Arc::new(topo), live);
        *guard = Arc::new(snap);
        drop(guard);
        drop(cur);
        for a in &change.added {
            self.note_event(EventKind::Added, a, None);
        }
        for a in &change.removed {
            self.note_event(EventKind::Removed, a, None);
        }
        Ok(change)
    }
}
