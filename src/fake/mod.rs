//! The brain of `fastmc.testing`'s fake memcached: a store with memcached 1.6's semantics and
//! the text, meta and binary protocols over it (`store`, `text`, `meta`, `binary`; a
//! connection's `session` frames its bytes and hands each command to its protocol's file), as a
//! pure function of the bytes a connection sent and the fake's clock, and the in-process transport
//! (`wire`) that lets a `Connection` talk to it with no socket and no thread.
//!
//! A `Fake` is one fake server: its store behind a lock and its failure switches (down, slow,
//! out of memory, dropped connections). `python/fastmc/testing/_server.py` makes one, serves it
//! on a loopback socket for every other client (pylibmc, raw sockets), and registers it under
//! that socket's address (`register`): a `Connection` to a registered address is in-process
//! (`crate::connection`), so `fastmc.Client` never goes through the socket. Depends on nothing
//! else in the crate; speaks no Python.

pub mod binary;
pub mod meta;
pub mod session;
pub mod store;
pub mod text;
mod token;
pub mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use session::Session;
use store::{Clock, Store};

/// One fake server: its store and its failure switches.
#[derive(Debug)]
pub struct Fake {
    store: Mutex<Store>,
    /// How long every reply is held (`f64` seconds as bits; infinite: never answered).
    delay: AtomicU64,
    down: AtomicBool,
    /// Counted up when every connection is closed (`down`, `drop_connections`): a connection
    /// opened in an older epoch is closed.
    epoch: AtomicU64,
    /// In-process connections opened so far.
    accepted: AtomicU64,
}

impl Fake {
    pub fn new(clock: Arc<Clock>, item_size_max: usize, version: &[u8]) -> Fake {
        Fake {
            store: Mutex::new(Store::new(clock, item_size_max, version)),
            delay: AtomicU64::new(0f64.to_bits()),
            down: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        }
    }

    /// The store, locked.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock()
    }

    /// Answer what a connection sent (`session`: its protocol state) into `out`.
    pub fn handle(&self, session: &mut Session, data: &[u8], out: &mut Vec<u8>) {
        session.feed(&mut self.store.lock(), data, out);
    }

    /// Hold every reply `seconds` (0: answer at once; infinite: never).
    pub fn set_delay(&self, seconds: f64) {
        self.delay
            .store(seconds.max(0.0).to_bits(), Ordering::Relaxed);
    }

    /// How long replies are held (None: for ever).
    pub fn delay(&self) -> Option<Duration> {
        Duration::try_from_secs_f64(f64::from_bits(self.delay.load(Ordering::Relaxed))).ok()
    }

    /// Close every connection and refuse new ones (`false`: accept them again).
    pub fn set_down(&self, down: bool) {
        if down {
            self.drop_connections();
        }
        self.down.store(down, Ordering::Relaxed);
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// Close every in-process connection (as a restart would).
    pub fn drop_connections(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// In-process connections opened so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

/// The registered fakes: host, port, and the fake (dropped with its last owner).
type Registry = Vec<(String, u16, Weak<Fake>)>;
static REGISTRY: Mutex<Registry> = Mutex::new(Vec::new());
/// How many fakes are registered: connections look the registry up only when any is.
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

/// Serve `fake` in-process to connections to `host:port` (its loopback address).
pub fn register(host: &str, port: u16, fake: &Arc<Fake>) {
    let mut r = REGISTRY.lock();
    r.retain(|(h, p, f)| f.strong_count() > 0 && !(h == host && *p == port));
    r.push((host.to_string(), port, Arc::downgrade(fake)));
    REGISTERED.store(r.len(), Ordering::Relaxed);
}

/// Stop serving `host:port` in-process.
pub fn unregister(host: &str, port: u16) {
    let mut r = REGISTRY.lock();
    r.retain(|(h, p, f)| f.strong_count() > 0 && !(h == host && *p == port));
    REGISTERED.store(r.len(), Ordering::Relaxed);
}

/// The fake registered for `host:port`, if any.
pub fn lookup(host: &str, port: u16) -> Option<Arc<Fake>> {
    if REGISTERED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let r = REGISTRY.lock();
    r.iter()
        .find(|(h, p, _)| h == host && *p == port)
        .and_then(|(_, _, f)| f.upgrade())
}

#[cfg(test)]
mod tests;
