//! The server set a client routes over: the servers as given, their `Server` objects and the
//! ring's view of them, immutable once built. `Client::set_servers` builds the next one and
//! publishes it in a new `Snapshot`; an operation keeps the `Arc<Topology>` of the snapshot it
//! started with, so it finishes on the servers it was routed to, and a removed server's
//! connections are closed when the last operation holding it lets go.
//!
//! Owns `Topology` and the matching of a new server list against the current one (plain Rust,
//! no I/O; `Client::set_servers`, in `config`, publishes it). Uses `server::Server` and
//! `ring::RingServer`.

use std::sync::Arc;

use super::results::ServerSpec;
use crate::connection::connect::Address;
use crate::ring::{RingServer, RingSettings};
use crate::server::Server;

pub(super) struct Topology {
    /// Increases with every change of the server list (the dispatcher's workers follow it).
    pub version: u64,
    pub specs: Vec<ServerSpec>,
    pub servers: Vec<Arc<Server>>,
    pub ring_servers: Vec<RingServer>,
}

/// What a change of the server list did, in the order of the lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    pub added: Vec<Address>,
    pub removed: Vec<Address>,
}

/// A server as the ring sees it (libmemcached hashes the host name and the default port).
pub(super) fn ring_server(spec: &ServerSpec) -> RingServer {
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

impl Topology {
    /// New servers for every spec (a new client, or a clone with its own connections).
    pub fn fresh(specs: Vec<ServerSpec>, version: u64) -> Topology {
        let servers = specs
            .iter()
            .map(|s| Arc::new(Server::new(s.address.clone(), s.weight)))
            .collect();
        Self::with_servers(specs, servers, version)
    }

    fn with_servers(specs: Vec<ServerSpec>, servers: Vec<Arc<Server>>, version: u64) -> Topology {
        let ring_servers = specs.iter().map(ring_server).collect();
        Topology {
            version,
            specs,
            servers,
            ring_servers,
        }
    }

    pub fn addresses(&self) -> Vec<Address> {
        self.specs.iter().map(|s| s.address.clone()).collect()
    }

    /// The topology for `specs`: a server whose address is in the current list keeps its
    /// `Server` (connections, health, meta support, metrics); the others are new. With the
    /// same address listed twice, each listing takes one of the current servers in order.
    pub fn next(&self, specs: Vec<ServerSpec>, version: u64) -> (Topology, Membership) {
        let mut taken = vec![false; self.servers.len()];
        let mut change = Membership::default();
        let mut servers = Vec::with_capacity(specs.len());
        for spec in &specs {
            let kept = self
                .servers
                .iter()
                .enumerate()
                .find(|(i, s)| !taken[*i] && s.address == spec.address);
            match kept {
                Some((i, s)) => {
                    taken[i] = true;
                    servers.push(s.clone());
                }
                None => {
                    change.added.push(spec.address.clone());
                    servers.push(Arc::new(Server::new(spec.address.clone(), spec.weight)));
                }
            }
        }
        for (s, kept) in self.servers.iter().zip(taken) {
            if !kept {
                change.removed.push(s.address.clone());
            }
        }
        (Self::with_servers(specs, servers, version), change)
    }
}

/// `memcached_server_add_with_weight` for each server, as a new client adds them: whether
/// that turned the weighted ring on.
pub(super) fn note_servers(ring: &mut RingSettings, topo: &Topology) -> bool {
    let before = ring.weighted;
    for s in &topo.ring_servers {
        ring.note_server_added(s.weight);
    }
    !before && ring.weighted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Client, EventKind};
    use crate::error::Error;

    fn spec(port: u16, weight: u32) -> ServerSpec {
        ServerSpec {
            address: Address::Tcp {
                host: "127.0.0.1".into(),
                port,
            },
            weight,
        }
    }

    #[test]
    fn kept_servers_are_the_same_objects() {
        let t = Topology::fresh(vec![spec(1, 1), spec(2, 1), spec(3, 1)], 0);
        let (n, change) = t.next(vec![spec(3, 1), spec(4, 1), spec(1, 2)], 1);
        assert!(Arc::ptr_eq(&n.servers[0], &t.servers[2]));
        assert!(Arc::ptr_eq(&n.servers[2], &t.servers[0]));
        assert_eq!(change.added, vec![spec(4, 1).address]);
        assert_eq!(change.removed, vec![spec(2, 1).address]);
        assert_eq!(n.ring_servers[2].weight, 2);
        assert_eq!(n.version, 1);
    }

    #[test]
    fn a_listing_twice_takes_one_server_each() {
        let t = Topology::fresh(vec![spec(1, 1), spec(1, 1)], 0);
        let (n, change) = t.next(vec![spec(1, 1)], 1);
        assert!(Arc::ptr_eq(&n.servers[0], &t.servers[0]));
        assert!(change.added.is_empty());
        assert_eq!(change.removed, vec![spec(1, 1).address]);
        let (m, change) = n.next(vec![spec(1, 1), spec(1, 1)], 2);
        assert!(Arc::ptr_eq(&m.servers[0], &t.servers[0]));
        assert_eq!(change.added, vec![spec(1, 1).address]);
    }

    fn ketama_client(ports: &[u16]) -> Client {
        let mut b = crate::behaviors::Behaviors::default();
        b.set("ketama", 1, false).unwrap();
        Client::new(ports.iter().map(|&p| spec(p, 1)).collect(), b, Vec::new()).unwrap()
    }

    #[test]
    fn placement_after_set_servers_is_a_fresh_clients() {
        let keys: Vec<Vec<u8>> = (0..2000).map(|i| format!("key{i}").into_bytes()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let c = ketama_client(&[1, 2, 3]);
        let (v0, before) = c.route_keys(&refs);
        let change = c
            .set_servers(vec![spec(1, 1), spec(3, 1), spec(4, 1)])
            .unwrap();
        assert_eq!(change.added, vec![spec(4, 1).address]);
        assert_eq!(change.removed, vec![spec(2, 1).address]);
        let (v1, after) = c.route_keys(&refs);
        assert_eq!(v1, v0 + 1);
        assert_eq!(after, ketama_client(&[1, 3, 4]).route_keys(&refs).1);
        // Only keys of the removed server (2) or now on the added one (4) moved.
        let addr = |l: &[u16], i: usize| l[i];
        for (b, a) in before.iter().zip(&after) {
            let (b, a) = (addr(&[1, 2, 3], *b), addr(&[1, 3, 4], *a));
            assert!(b == a || b == 2 || a == 4, "{b} -> {a}");
        }
        let events: Vec<EventKind> = c.take_events().iter().map(|e| e.kind).collect();
        assert_eq!(events, vec![EventKind::Added, EventKind::Removed]);
    }

    #[test]
    fn the_same_list_changes_nothing_and_an_empty_one_is_refused() {
        let c = ketama_client(&[1, 2]);
        let change = c.set_servers(vec![spec(1, 1), spec(2, 1)]).unwrap();
        assert_eq!(change, Membership::default());
        assert_eq!(c.topology_version(), 0);
        assert!(matches!(c.set_servers(Vec::new()), Err(Error::NoServers)));
        assert_eq!(c.server_count(), 2);
        assert!(c.take_events().is_empty());
    }
}
