//! The configuration one operation runs with: behaviors, namespace, the server set (`Topology`)
//! and the ring built over its servers that are live, socket options and failure policy,
//! derived once per change. An operation takes an `Arc<Snapshot>` and never sees a
//! half-applied change: not of behaviors, not of the server list.
//!
//! Owns `Snapshot`. Uses `behaviors`, `ring`, `topology`, `connection::SocketOptions`,
//! `server::health::FailurePolicy` and `protocol`'s key checks.

use std::borrow::Cow;
use std::sync::Arc;

use super::topology::Topology;
use crate::behaviors::Behaviors;
use crate::connection::connect::SocketOptions;
use crate::error::{Error, Result};
use crate::protocol::{is_text_key, validate_binary_key, validate_text_key};
use crate::ring::Ring;
use crate::server::health::FailurePolicy;

#[derive(Clone)]
pub(super) struct Snapshot {
    pub behaviors: Behaviors,
    pub namespace: Vec<u8>,
    /// The servers; batch and ring indices are positions in `topo.servers`.
    pub topo: Arc<Topology>,
    pub ring: Ring,
    /// Per server, whether it is in the ring (not ejected).
    pub live: Vec<bool>,
    pub opts: SocketOptions,
    pub policy: FailurePolicy,
    /// Every key goes to this server (a call with a group key: `pin`).
    pub pin: Option<usize>,
}

impl Snapshot {
    pub fn new(
        behaviors: Behaviors,
        namespace: Vec<u8>,
        topo: Arc<Topology>,
        live: Vec<bool>,
    ) -> Self {
        let ring = Ring::build(&behaviors.ring, &topo.ring_servers, &live);
        let policy = FailurePolicy::from(&behaviors);
        let read_timeout = behaviors.read_timeout();
        let opts = SocketOptions {
            binary: behaviors.binary,
            security: behaviors.security.clone(),
            connect_timeout: behaviors.connect_timeout(),
            read_timeout,
            write_timeout: behaviors.write_timeout(),
            // A blocking read wakes at the check point to look at a stall (`stall`).
            recv_wait: if policy.check_stalls {
                super::stall::check_after(read_timeout)
            } else {
                read_timeout
            },
            tcp_keepalive: behaviors.tcp_keepalive,
            send_buffer: behaviors
                .socket_send_size
                .and_then(|v| usize::try_from(v).ok()),
            recv_buffer: behaviors
                .socket_recv_size
                .and_then(|v| usize::try_from(v).ok()),
        };
        Snapshot {
            behaviors,
            namespace,
            topo,
            ring,
            live,
            opts,
            policy,
            pin: None,
        }
    }

    /// This snapshot for a call whose keys all go where `group` goes (libmemcached's
    /// `memcached_generate_hash_with_redistribution` of the group key: the namespace hashed
    /// with it when `_hash_with_prefix_key` is on).
    pub fn pinned(&self, group: &[u8]) -> Snapshot {
        let mut wire = Vec::with_capacity(self.namespace.len() + group.len());
        wire.extend_from_slice(&self.namespace);
        wire.extend_from_slice(group);
        let server = self.ring.server_for(self.hashed(group, &wire));
        Snapshot {
            pin: Some(server),
            ..self.clone()
        }
    }

    /// The key as it goes on the wire, validated (`verify_keys`: pylibmc's behavior applies,
    /// which libmemcached's touch ignores). An empty key is refused even with a namespace, as
    /// libmemcached checks the key's own length: it must never reach a server as the bare
    /// namespace.
    #[inline(always)]
    pub fn wire_key<'k>(&self, key: &'k [u8], verify_keys: bool) -> Result<Cow<'k, [u8]>> {
        // The usual key, without a call: no namespace, the text protocol, and nothing wrong.
        if self.namespace.is_empty() && !self.behaviors.binary && is_text_key(key, verify_keys) {
            return Ok(Cow::Borrowed(key));
        }
        self.wire_key_checked(key, verify_keys)
    }

    /// `wire_key` in full: with the namespace, and the error that refuses a key.
    #[inline(never)]
    fn wire_key_checked<'k>(&self, key: &'k [u8], verify_keys: bool) -> Result<Cow<'k, [u8]>> {
        if key.is_empty() {
            return Err(Error::BadKey("empty key".into()));
        }
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
            validate_text_key(&k, verify_keys)?;
        }
        Ok(k)
    }

    /// The server a key maps to (`wire`: the key with the namespace).
    pub fn route(&self, key: &[u8], wire: &[u8]) -> usize {
        match self.pin {
            Some(server) => server,
            None => self.ring.server_for(self.hashed(key, wire)),
        }
    }

    /// `route` of every key, for keys whose server depends on the key alone
    /// (`routes_by_key`).
    pub fn route_all<'a, K>(&self, keys: &[K], key: impl Fn(&K) -> &'a [u8]) -> Vec<u16> {
        match self.pin {
            Some(server) => vec![server as u16; keys.len()],
            None => self.ring.servers_for(keys, key),
        }
    }

    /// Whether a key's server depends on the key alone, not on its wire form: no namespace, or
    /// the namespace left out of the hash.
    pub fn routes_by_key(&self) -> bool {
        self.pin.is_some() || self.namespace.is_empty() || !self.behaviors.hash_with_prefix_key
    }

    /// What the ring hashes for a key: with the namespace (`wire`) if the behaviors say so.
    pub fn hashed<'k>(&self, key: &'k [u8], wire: &'k [u8]) -> &'k [u8] {
        if self.behaviors.hash_with_prefix_key {
            wire
        } else {
            key
        }
    }
}
