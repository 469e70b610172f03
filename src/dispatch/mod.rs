//! The dispatcher: the blocking client driven from threads of its own, for callers that cannot
//! block (the asyncio client). One worker thread per server, plus one for whole-client commands
//! (flush, stats). A single-key request goes to the worker of the server its key maps to, and
//! its `Done` is called on that worker's thread with the outcome the blocking call returned. A
//! request of several keys (on a client of several servers) goes to a spanning worker instead,
//! which runs it as the blocking client would (one poll loop over its servers, each with its own
//! deadline, the keys routed once): one hand-off instead of one per server, and no thread per
//! server woken for a share of it. Spanning workers are started as needed, up to
//! `MAX_SPANNING`, so that a request held up by a stalled server holds up only the requests
//! that wait on that server too.
//!
//! Requests queue up while a worker is busy, and the worker takes all of them at once
//! (`merge`): the gets of many callers travel as one `get_multi`, one write and one read. A
//! server that hangs stalls only its own worker, hence only the requests for its keys. The
//! blocking client owns every rule about timeouts, failures and stream safety; nothing here
//! touches a socket.
//!
//! A forked child gets fresh workers (threads do not survive `fork`): checked on every submit
//! against the fork generation the workers were started in (`crate::fork`, no system call).
//!
//! The server list may change (`Client::set_servers`): the workers follow the client's topology
//! version, checked on every submit. A server in both lists keeps its worker; a new one gets a
//! worker; a removed server's worker is retired: it loses its sender, runs every request already
//! queued to it (on the client's current servers, since the blocking call routes again) and
//! exits. A request routed on another list than the workers' goes to a spanning worker, whose
//! blocking call routes it on the current list: never lost, never answered from the wrong
//! server. Spanning workers are not tied to a server and serve every list.
//!
//! Uses `client::Client` (execution, routing) and `std::sync::mpsc` (the hand-off: since Rust
//! 1.67 it is crossbeam-channel's implementation). Never Python.

#[cfg(target_os = "linux")]
pub mod direct;
// epoll and timerfd are Linux's: elsewhere the loop's thread drives no request (the file says
// why), and every request goes to the workers.
#[cfg(not(target_os = "linux"))]
#[path = "direct_off.rs"]
pub mod direct;
pub mod mailbox;
mod merge;
pub mod request;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::client::op::Outcome;
use crate::client::Client;
use crate::connection::connect::Address;
use crate::error::{Error, Result};
use request::Request;

/// At most this many queued requests are run as one batch by a worker.
const MAX_BATCH: usize = 512;

/// A worker thread's stack: it runs the blocking client only.
const WORKER_STACK: usize = 256 * 1024;

/// At most this many spanning workers: as many multi-server requests in flight at once before
/// one waits for a worker (each is bounded by the client's timeouts).
const MAX_SPANNING: usize = 16;

type Callback = Box<dyn FnOnce(Option<Outcome>) + Send>;

/// What to do with a request's outcome. Called exactly once: with the outcome, or with `None`
/// when the request was dropped unanswered (client closed, worker gone), so nobody waits forever.
pub struct Done(Option<Callback>);

impl Done {
    pub fn new(f: impl FnOnce(Option<Outcome>) + Send + 'static) -> Done {
        Done(Some(Box::new(f)))
    }

    fn call(mut self, outcome: Outcome) {
        if let Some(f) = self.0.take() {
            f(Some(outcome));
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(None);
        }
    }
}

pub(crate) struct Job {
    req: Request,
    done: Done,
}

/// The workers of one process for one server list.
struct Workers {
    generation: u64,
    /// The topology version `servers` follows (indices are positions in that list).
    version: u64,
    servers: Vec<Sender<Job>>,
    addresses: Vec<Address>,
    admin: Sender<Job>,
    /// Not tied to a server: shared by the workers of every list.
    spanning: Arc<Spanning>,
}

impl Workers {
    fn start(client: &Arc<Client>) -> Result<Workers> {
        let (version, addresses) = client.versioned_addresses();
        let servers = (0..addresses.len())
            .map(|i| spawn(client, format!("fastmc-io-{i}")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Workers {
            generation: crate::fork::generation(),
            version,
            servers,
            addresses,
            admin: spawn(client, "fastmc-io-admin".into())?,
            spanning: Arc::new(Spanning::new(client)),
        })
    }

    /// The workers for the client's current server list: kept servers keep their worker (the
    /// same address listed twice: one worker each, in order), new ones get one. The workers
    /// not carried over are retired when the last holder of `self` lets go.
    fn follow(&self, client: &Arc<Client>) -> Result<Workers> {
        let (version, addresses) = client.versioned_addresses();
        let mut taken = vec![false; self.addresses.len()];
        let mut servers = Vec::with_capacity(addresses.len());
        for (i, a) in addresses.iter().enumerate() {
            let kept = self
                .addresses
                .iter()
                .enumerate()
                .position(|(j, b)| !taken[j] && b == a);
            match kept.and_then(|j| Some((j, self.servers.get(j)?))) {
                Some((j, tx)) => {
                    taken[j] = true;
                    servers.push(tx.clone());
                }
                None => servers.push(spawn(client, format!("fastmc-io-{version}-{i}"))?),
            }
        }
        Ok(Workers {
            generation: self.generation,
            version,
            servers,
            addresses,
            admin: self.admin.clone(),
            spanning: self.spanning.clone(),
        })
    }
}

/// `first` and what is queued behind it, up to `MAX_BATCH` jobs: one batch.
fn take_batch(first: Job, rx: &Receiver<Job>) -> Vec<Job> {
    let mut jobs = vec![first];
    while jobs.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(j) => jobs.push(j),
            Err(_) => break,
        }
    }
    jobs
}

/// A thread of the dispatcher's: named, with a worker's stack.
fn spawn_thread(name: &str, body: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(WORKER_STACK)
        .spawn(body)
        .map(|_| ())
}

fn start_thread(name: String, body: impl FnOnce() + Send + 'static) -> Result<()> {
    spawn_thread(&name, body)
        .map_err(|e| Error::NotSupported(format!("cannot start an I/O thread: {e}")))
}

fn spawn(client: &Arc<Client>, name: String) -> Result<Sender<Job>> {
    let (tx, rx) = channel::<Job>();
    let client = client.clone();
    // Until every sender is gone (the dispatcher was dropped or replaced).
    start_thread(name, move || {
        while let Ok(first) = rx.recv() {
            merge::run(&client, take_batch(first, &rx));
        }
    })?;
    Ok(tx)
}

/// The spanning workers: one queue, taken from by whichever worker is free; a new worker is
/// started when a request finds none free (up to `MAX_SPANNING`).
struct Spanning {
    client: Arc<Client>,
    tx: Sender<Job>,
    rx: Arc<Mutex<Receiver<Job>>>,
    /// Workers started, and those waiting for a job.
    started: AtomicUsize,
    idle: Arc<AtomicUsize>,
}

impl Spanning {
    fn new(client: &Arc<Client>) -> Spanning {
        let (tx, rx) = channel::<Job>();
        Spanning {
            client: client.clone(),
            tx,
            rx: Arc::new(Mutex::new(rx)),
            started: AtomicUsize::new(0),
            idle: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn submit(&self, job: Job) {
        if self.idle.load(Ordering::Acquire) == 0 {
            self.grow();
        }
        // With no worker at all (none could be started), dropping the job reports it lost.
        if self.started.load(Ordering::Acquire) > 0 {
            let _ = self.tx.send(job);
        }
    }

    fn grow(&self) {
        let n = self.started.load(Ordering::Acquire);
        if n >= MAX_SPANNING
            || self
                .started
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        let (client, rx, idle) = (self.client.clone(), self.rx.clone(), self.idle.clone());
        let body = move || loop {
            idle.fetch_add(1, Ordering::AcqRel);
            // One worker waits in `recv` holding the lock; the others wait for the lock.
            let next = {
                let rx = rx.lock();
                rx.recv().map(|first| {
                    idle.fetch_sub(1, Ordering::AcqRel);
                    take_batch(first, &rx)
                })
            };
            match next {
                Ok(jobs) => merge::run(&client, jobs),
                Err(_) => return, // the dispatcher was dropped or replaced
            }
        };
        if start_thread(format!("fastmc-io-span-{n}"), body).is_err() {
            self.started.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Runs requests of a shared blocking client on worker threads.
pub struct Dispatcher {
    client: Arc<Client>,
    workers: RwLock<Option<Arc<Workers>>>,
}

impl Dispatcher {
    pub fn new(client: Arc<Client>) -> Result<Dispatcher> {
        let workers = Workers::start(&client)?;
        Ok(Dispatcher {
            client,
            workers: RwLock::new(Some(Arc::new(workers))),
        })
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// Stop the workers once they have run what they were given (each request still gets its
    /// outcome). Later submits are answered `None`.
    pub fn shut_down(&self) {
        self.workers.write().take();
    }

    /// Start workers for servers added to the client's list and retire those of removed ones
    /// now, instead of at the next submit.
    pub fn follow_servers(&self) {
        let _ = self.workers();
    }

    /// The workers of this process for the client's current server list: started anew after
    /// a fork, updated after a change of the list.
    fn workers(&self) -> Option<Arc<Workers>> {
        let w = self.workers.read().clone()?;
        let now = crate::fork::generation();
        let version = self.client.topology_version();
        if w.generation == now && w.version == version {
            return Some(w);
        }
        let mut slot = self.workers.write();
        match &*slot {
            Some(cur) if cur.generation == now && cur.version == version => Some(cur.clone()),
            Some(cur) if cur.generation == now => {
                // Should a thread fail to start, the old workers go on serving: the blocking
                // calls route every request on the current list anyway.
                let Ok(next) = cur.follow(&self.client) else {
                    return Some(cur.clone());
                };
                let next = Arc::new(next);
                *slot = Some(next.clone());
                Some(next)
            }
            Some(_) => {
                let fresh = Arc::new(Workers::start(&self.client).ok()?);
                *slot = Some(fresh.clone());
                Some(fresh)
            }
            None => None,
        }
    }

    /// Run `req`; `done` gets its outcome on a worker thread.
    pub fn submit(&self, req: Request, done: Done) {
        let Some(workers) = self.workers() else {
            return; // dropping `done` reports the request unanswered
        };
        let Some(keys) = req.keys() else {
            let _ = workers.admin.send(Job { req, done });
            return;
        };
        // Placed by a group key: the spanning worker, where it runs alone, pinned.
        if req.route.is_some() {
            workers.spanning.submit(Job { req, done });
            return;
        }
        // One server: no routing to do (the blocking call routes again anyway).
        if workers.servers.len() == 1 {
            if let Some(tx) = workers.servers.first() {
                let _ = tx.send(Job { req, done });
            }
            return;
        }
        // Several keys: a spanning worker, without routing them here (hashing 10,000 keys on
        // the caller's thread, and again in the blocking call, cost a third more time than the
        // blocking client's call). Its blocking call routes them once.
        if keys.len() > 1 {
            workers.spanning.submit(Job { req, done });
            return;
        }
        // One key: its server's worker, where concurrent requests are merged. Routed on
        // another list than the workers follow, a spanning worker runs it instead: its blocking
        // call routes it on the list current then.
        let (version, routes) = self.client.route_keys(&keys.refs());
        let worker = routes.first().and_then(|&s| workers.servers.get(s));
        match worker {
            Some(tx) if version == workers.version => {
                let _ = tx.send(Job { req, done });
            }
            _ => workers.spanning.submit(Job { req, done }),
        }
    }
}
