//! Warm-up: before traffic, open and check connections to every server, so that the first
//! requests of a fresh process find them in the pool instead of dialling under load. Each
//! server is warmed on a thread of its own (a dead one costs its connect timeout, once, beside
//! the others); a connection counts once it answered a round trip (`version`, or a binary
//! NOOP). Uses `server` (the pool) and `connection`; no operation, no ring.

use crate::connection::connect::{Address, SocketOptions};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::server::{Peek, Server};

use super::{stall, Client};

impl Client {
    /// Make the pool of every server of the current list hold `n` connections that answered a
    /// round trip just now (the idle ones it holds are checked first, then new ones opened).
    /// Per server, in list order: its address and how many it holds now, or the error that
    /// stopped it. Never raises for a server: the caller decides what a partial fleet means.
    pub fn warm_up(&self, n: usize) -> Vec<(Address, Result<usize>)> {
        let snap = self.snapshot();
        let (opts, binary) = (&snap.opts, snap.behaviors.binary);
        std::thread::scope(|scope| {
            let warming: Vec<_> = snap
                .topo
                .servers
                .iter()
                .map(|server| (server, scope.spawn(move || warm(server, opts, binary, n))))
                .collect();
            warming
                .into_iter()
                .map(|(server, t)| {
                    let r = t
                        .join()
                        .unwrap_or_else(|_| Err(Error::Protocol("warm-up".into())));
                    (server.address.clone(), r)
                })
                .collect()
        })
    }
}

/// `n` checked connections into `server`'s pool.
fn warm(server: &Server, opts: &SocketOptions, binary: bool, n: usize) -> Result<usize> {
    let mut ready = Vec::with_capacity(n);
    let mut outcome = Ok(());
    while ready.len() < n {
        let conn = match server.checkout_idle(Peek::Never) {
            Some(c) => c,
            None => match server.connect(opts) {
                Ok(c) => c,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            },
        };
        match ping(conn, binary) {
            Ok(c) => ready.push(c),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    let count = ready.len();
    for c in ready {
        server.checkin(c);
    }
    outcome.map(|()| count)
}

/// One round trip on `conn` (`stall`'s ping), within its socket timeouts; the connection back,
/// clean.
fn ping(mut conn: Box<Connection>, binary: bool) -> Result<Box<Connection>> {
    let req = stall::ping_request(binary);
    // A fresh or idle connection's socket buffer takes these few bytes at once.
    if conn.send_nonblocking(&req)? != req.len() || conn.pending_write() {
        return Err(Error::Protocol(
            "warm-up: the request did not go out".into(),
        ));
    }
    loop {
        if let Some(used) = stall::ping_reply(conn.unread(), binary)? {
            conn.consume(used);
            return Ok(conn);
        }
        if conn.recv_blocking()? == 0 {
            return Err(Error::Protocol(
                "warm-up: the server closed the connection".into(),
            ));
        }
    }
}
