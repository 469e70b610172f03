//! pylibmc's behaviors with libmemcached 1.0.16's semantics: which names exist (in the fixed
//! order pylibmc applies them), which values are rejected, how each value is stored and read
//! back, and what each does to placement, timeouts and failure handling. Pure: depends on `ring`
//! (and carries the constructor's protocol choice and `security` settings along with the rest).

use std::time::Duration;

use crate::metrics::hot::{self, HotSampling};
use crate::ring::hash::HashKind;
use crate::ring::{Distribution, RingSettings};

/// Every behavior name, in the order pylibmc applies them (`all_behaviors`; see
/// docs/design/placement.md#order-of-application).
pub const ALL_BEHAVIORS: [&str; 30] = [
    "no_block",
    "tcp_nodelay",
    "tcp_keepalive",
    "hash",
    "ketama_hash",
    "ketama",
    "ketama_weighted",
    "distribution",
    "cas",
    "buffer_requests",
    "verify_keys",
    "connect_timeout",
    "send_timeout",
    "receive_timeout",
    "num_replicas",
    "auto_eject",
    "retry_timeout",
    "remove_failed",
    "failure_limit",
    "_io_msg_watermark",
    "_io_bytes_watermark",
    "_io_key_prefetch",
    "_hash_with_prefix_key",
    "_noreply",
    "_sort_hosts",
    "_poll_timeout",
    "_socket_send_size",
    "_socket_recv_size",
    "dead_timeout",
    "pickle_protocol",
];

/// fastmc's own behaviors (not in pylibmc): applied after pylibmc's, read back with them.
pub const FASTMC_BEHAVIORS: [&str; 8] = [
    // 1: get_multi raises when a server fails instead of leaving its keys out of the result.
    "get_multi_raise_on_error",
    // 1: a timeout marks the server down at once, as libmemcached does: no check of a stalled
    // request on a fresh connection first (docs/failures.md#lossy-links).
    "mark_down_at_once",
    // Bytes a compressed value may inflate to (0: no limit); the binding's own, like
    // pickle_protocol: it applies before any deserializer (docs/security.md).
    "max_inflate",
    // Bytes: the largest value a server may send (default `DEFAULT_MAX_VALUE_SIZE`); a larger
    // one raises AllocationError and drops the connection before its bytes are read.
    "max_value_size",
    // Percent (0 to 100): each relative expiry a write sends is shortened by up to this share of
    // itself (`Jitter`), so keys written together do not expire together.
    "ttl_jitter",
    // 1: the share taken off is a hash of the key, not random: every client (and every
    // replica write) with the same settings gives a key the same expiry.
    "ttl_jitter_by_key",
    // Keys per server (0, the default: off; at most `hot::MAX_TOP`): hot-key telemetry keeps
    // a sampled top-K summary of the keys asked for (`metrics::hot`).
    "hot_keys",
    // One key in this many is sampled for `hot_keys` (default `hot::DEFAULT_ONE_IN`; 1: all).
    "hot_keys_sample",
];

/// `max_value_size`'s default: 128 MiB. memcached stores at most 1 MiB unless started with a
/// larger `-I`, so this is 128 times its default, and it keeps what a hostile server can make a
/// client hold for one value (about twice the value, at the peak) well under 512 MiB.
pub const DEFAULT_MAX_VALUE_SIZE: usize = 128 << 20;
/// The largest `max_value_size`: memcached's own largest item (`-I 1g`), beyond which the
/// parsers refuse any value.
pub const MAX_MAX_VALUE_SIZE: usize = 1 << 30;

/// libmemcached's "invalid arguments" return code, which pylibmc reports for rejected values.
pub const RC_INVALID_ARGUMENTS: u32 = 38;

/// A value libmemcached refuses (pylibmc: `memcached_behavior_set returned 38 ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub rc: u32,
}

/// memcached reads an expiry above 30 days as an absolute Unix time, not a number of seconds.
pub const RELATIVE_EXPIRY_MAX: u32 = 60 * 60 * 24 * 30;

/// TTL jitter: each relative expiry a write sends (a store's, a touch's, the one incr/decr
/// creates a key with) is shortened by a share of itself up to `percent`, never lengthened, and
/// never below one second. 0 (the default) leaves every expiry as given; so are 0 (no expiry)
/// and absolute Unix times (above 30 days). The share is uniform: random, or with `by_key` a
/// hash of the wire key (FNV-1a, mixed), so that every client with the same settings gives a key the
/// same expiry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Jitter {
    pub percent: u8,
    pub by_key: bool,
}

impl Jitter {
    /// The expiry a write of `key` (its wire form) sends for the `exptime` asked.
    #[inline]
    pub fn apply(self, exptime: u32, key: &[u8]) -> u32 {
        if self.percent == 0 || exptime == 0 || exptime > RELATIVE_EXPIRY_MAX {
            return exptime;
        }
        let unit = if self.by_key {
            key_unit(key)
        } else {
            crate::random::unit()
        };
        shorten(exptime, self.percent, unit)
    }
}

/// `exptime` less `unit` (a fraction in 2^-32ths) of its `percent` share, at least 1.
fn shorten(exptime: u32, percent: u8, unit: u32) -> u32 {
    let span = u64::from(exptime) * u64::from(percent) / 100;
    let cut = ((span + 1) * u64::from(unit)) >> 32;
    (u64::from(exptime) - cut).max(1) as u32
}

/// A key's share: its 64-bit FNV-1a hash, mixed (MurmurHash3's finalizer: FNV leaves keys
/// that differ in their last bytes close together in the high bits), the high half.
fn key_unit(key: &[u8]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h >> 32) as u32
}

/// Every behavior of a client, as pylibmc stores them (and reads them back).
#[derive(Clone, Debug)]
pub struct Behaviors {
    pub no_block: bool,
    pub tcp_nodelay: bool,
    pub tcp_keepalive: bool,
    pub ring: RingSettings,
    pub cas: bool,
    pub buffer_requests: bool,
    pub verify_keys: bool,
    pub connect_timeout_ms: i32,
    pub send_timeout_us: i32,
    pub receive_timeout_us: i32,
    pub num_replicas: u32,
    pub auto_eject: bool,
    pub retry_timeout_s: i32,
    pub failure_limit: u32,
    pub io_msg_watermark: u32,
    pub io_bytes_watermark: u32,
    pub io_key_prefetch: u32,
    pub hash_with_prefix_key: bool,
    pub noreply: bool,
    pub poll_timeout_ms: i32,
    pub socket_send_size: Option<i32>,
    pub socket_recv_size: Option<i32>,
    pub dead_timeout_s: i32,
    pub get_multi_raise_on_error: bool,
    pub mark_down_at_once: bool,
    /// The largest value a server may send, in bytes.
    pub max_value_size: usize,
    /// How relative expiries are spread (`ttl_jitter`, `ttl_jitter_by_key`).
    pub jitter: Jitter,
    /// Hot-key telemetry's settings (`hot_keys`, `hot_keys_sample`).
    pub hot: HotSampling,
    /// Speak the binary protocol (pylibmc's `binary=True`); fixed at construction.
    pub binary: bool,
    /// SASL credentials and TLS settings (constructor arguments, not behaviors in pylibmc).
    /// Shared: `Behaviors` is cloned on every call that reads it.
    pub security: std::sync::Arc<crate::security::Security>,
}

impl Default for Behaviors {
    fn default() -> Self {
        Behaviors {
            no_block: false,
            tcp_nodelay: false,
            tcp_keepalive: false,
            ring: RingSettings::default(),
            cas: false,
            buffer_requests: false,
            verify_keys: false,
            connect_timeout_ms: 4000,
            send_timeout_us: 0,
            receive_timeout_us: 0,
            num_replicas: 0,
            auto_eject: false,
            retry_timeout_s: 2,
            failure_limit: 5,
            io_msg_watermark: 500,
            io_bytes_watermark: 65 * 1024,
            io_key_prefetch: 0,
            hash_with_prefix_key: false,
            noreply: false,
            poll_timeout_ms: 5000,
            socket_send_size: None,
            socket_recv_size: None,
            dead_timeout_s: 0,
            get_multi_raise_on_error: false,
            mark_down_at_once: false,
            max_value_size: DEFAULT_MAX_VALUE_SIZE,
            jitter: Jitter::default(),
            hot: HotSampling::default(),
            binary: false,
            security: Default::default(),
        }
    }
}

fn dur_ms(ms: i32) -> Duration {
    Duration::from_millis(ms.max(1) as u64)
}

impl Behaviors {
    /// Apply one behavior as libmemcached's `memcached_behavior_set` would. `value` is the
    /// integer pylibmc passes (already wrapped to 64 bits). `pickle_protocol` is not handled here.
    pub fn set(&mut self, name: &str, value: i64, binary: bool) -> Result<(), Rejected> {
        let reject = Err(Rejected {
            rc: RC_INVALID_ARGUMENTS,
        });
        let on = value != 0;
        let v32 = value as i32;
        let u32v = value as u32;
        match name {
            "no_block" => self.no_block = on,
            "tcp_nodelay" => self.tcp_nodelay = on,
            "tcp_keepalive" => self.tcp_keepalive = on,
            "hash" => match HashKind::from_code(value) {
                Some(h) if h.available() => self.ring.set_hash(h),
                _ => return reject,
            },
            // Sets a hashkit field that nothing reads
            // (docs/design/placement.md#what-each-behavior-sets).
            "ketama_hash" if HashKind::from_code(value).is_none() => return reject,
            "ketama_hash" => {}
            "ketama" => self.ring.set_ketama(on),
            "ketama_weighted" => self.ring.set_ketama_weighted(on),
            "distribution" => match Distribution::from_code(value) {
                Some(Distribution::ConsistentMax) | None => return reject,
                Some(d) => self.ring.set_distribution(d),
            },
            "cas" => self.cas = on,
            "buffer_requests" => self.buffer_requests = on,
            "verify_keys" => {
                if binary {
                    return reject;
                }
                self.verify_keys = on;
            }
            "connect_timeout" => self.connect_timeout_ms = v32,
            "send_timeout" => self.send_timeout_us = v32,
            "receive_timeout" => self.receive_timeout_us = v32,
            "num_replicas" => self.num_replicas = u32v,
            "auto_eject" => self.auto_eject = on,
            "retry_timeout" => {
                if value == 0 {
                    return reject;
                }
                self.retry_timeout_s = v32;
            }
            "remove_failed" => {
                if value == 0 {
                    return reject;
                }
                self.auto_eject = true;
                self.failure_limit = u32v;
            }
            "failure_limit" => self.failure_limit = u32v,
            "_io_msg_watermark" => self.io_msg_watermark = u32v,
            "_io_bytes_watermark" => self.io_bytes_watermark = u32v,
            "_io_key_prefetch" => self.io_key_prefetch = u32v,
            "_hash_with_prefix_key" => self.hash_with_prefix_key = on,
            "_noreply" => self.noreply = on,
            "_sort_hosts" => self.ring.set_sort_hosts(on),
            "_poll_timeout" => self.poll_timeout_ms = v32,
            "_socket_send_size" => self.socket_send_size = Some(v32),
            "_socket_recv_size" => self.socket_recv_size = Some(v32),
            "dead_timeout" => self.dead_timeout_s = v32,
            "get_multi_raise_on_error" => self.get_multi_raise_on_error = on,
            "mark_down_at_once" => self.mark_down_at_once = on,
            "max_value_size" => match usize::try_from(value) {
                Ok(n) if (1..=MAX_MAX_VALUE_SIZE).contains(&n) => self.max_value_size = n,
                _ => return reject,
            },
            "ttl_jitter" => match u8::try_from(value) {
                Ok(p) if p <= 100 => self.jitter.percent = p,
                _ => return reject,
            },
            "ttl_jitter_by_key" => self.jitter.by_key = on,
            "hot_keys" => match u16::try_from(value) {
                Ok(k) if k <= hot::MAX_TOP => self.hot.top = k,
                _ => return reject,
            },
            "hot_keys_sample" => match u32::try_from(value) {
                Ok(n) if (1..=hot::MAX_ONE_IN).contains(&n) => self.hot.one_in = n,
                _ => return reject,
            },
            _ => {}
        }
        Ok(())
    }

    /// Read a behavior back as pylibmc's `get_behaviors()` shows it (numeric). Socket buffer
    /// sizes that were never set are `None`: the caller asks a socket.
    pub fn get(&self, name: &str) -> Option<i64> {
        let b = |x: bool| Some(x as i64);
        match name {
            "no_block" => b(self.no_block),
            "tcp_nodelay" => b(self.tcp_nodelay),
            "tcp_keepalive" => b(self.tcp_keepalive),
            "hash" => Some(self.ring.key_hash.code()),
            "ketama_hash" => Some(self.ring.key_hash.code()),
            "ketama" => b(self.ring.distribution.is_consistent()),
            "ketama_weighted" => b(self.ring.weighted),
            "distribution" => Some(self.ring.distribution.code()),
            "cas" => b(self.cas),
            "buffer_requests" => b(self.buffer_requests),
            "verify_keys" => b(self.verify_keys),
            "connect_timeout" => Some(self.connect_timeout_ms as i64),
            "send_timeout" => Some(self.send_timeout_us as i64),
            "receive_timeout" => Some(self.receive_timeout_us as i64),
            "num_replicas" => Some(self.num_replicas as i64),
            "auto_eject" => b(self.auto_eject),
            "retry_timeout" => Some(self.retry_timeout_s as i64),
            "remove_failed" | "failure_limit" => Some(self.failure_limit as i64),
            "_io_msg_watermark" => Some(self.io_msg_watermark as i64),
            "_io_bytes_watermark" => Some(self.io_bytes_watermark as i64),
            "_io_key_prefetch" => Some(self.io_key_prefetch as i64),
            "_hash_with_prefix_key" => b(self.hash_with_prefix_key),
            "_noreply" => b(self.noreply),
            "_sort_hosts" => b(self.ring.sort_hosts),
            "_poll_timeout" => Some(self.poll_timeout_ms as i64),
            "_socket_send_size" => self.socket_send_size.map(i64::from),
            "_socket_recv_size" => self.socket_recv_size.map(i64::from),
            "dead_timeout" => Some(self.dead_timeout_s as i64),
            "get_multi_raise_on_error" => b(self.get_multi_raise_on_error),
            "mark_down_at_once" => b(self.mark_down_at_once),
            "max_value_size" => Some(self.max_value_size as i64),
            "ttl_jitter" => Some(i64::from(self.jitter.percent)),
            "ttl_jitter_by_key" => b(self.jitter.by_key),
            "hot_keys" => Some(i64::from(self.hot.top)),
            "hot_keys_sample" => Some(i64::from(self.hot.one_in)),
            _ => None,
        }
    }

    /// How long to wait for the socket to become readable (receive_timeout in microseconds if
    /// set, else the poll timeout in milliseconds, as libmemcached does).
    pub fn read_timeout(&self) -> Duration {
        if self.receive_timeout_us > 0 {
            Duration::from_micros(self.receive_timeout_us as u64)
        } else {
            dur_ms(self.poll_timeout_ms)
        }
    }

    pub fn write_timeout(&self) -> Duration {
        if self.send_timeout_us > 0 {
            Duration::from_micros(self.send_timeout_us as u64)
        } else {
            dur_ms(self.poll_timeout_ms)
        }
    }

    pub fn connect_timeout(&self) -> Duration {
        if self.connect_timeout_ms > 0 {
            dur_ms(self.connect_timeout_ms)
        } else {
            dur_ms(self.poll_timeout_ms)
        }
    }

    pub fn retry_timeout(&self) -> Duration {
        Duration::from_secs(self.retry_timeout_s.max(0) as u64)
    }

    pub fn dead_timeout(&self) -> Duration {
        Duration::from_secs(self.dead_timeout_s.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_read_back_as_pylibmc() {
        let b = Behaviors::default();
        assert_eq!(b.get("connect_timeout"), Some(4000));
        assert_eq!(b.get("remove_failed"), Some(5));
        assert_eq!(b.get("_poll_timeout"), Some(5000));
        assert_eq!(b.get("_io_bytes_watermark"), Some(66560));
        assert_eq!(b.get("hash"), Some(0));
        assert_eq!(b.get("ketama"), Some(0));
        assert_eq!(b.get("_socket_send_size"), None);
    }

    #[test]
    fn libmemcached_quirks() {
        let mut b = Behaviors::default();
        assert!(b.set("retry_timeout", 0, false).is_err());
        assert!(b.set("remove_failed", 0, false).is_err());
        assert!(b.set("hash", 7, false).is_err());
        assert!(b.set("distribution", 7, false).is_err());
        assert!(b.set("verify_keys", 0, true).is_err());
        b.set("remove_failed", 3, false).unwrap();
        assert_eq!(b.get("auto_eject"), Some(1));
        assert_eq!(b.get("failure_limit"), Some(3));
        b.set("ketama_weighted", 1, false).unwrap();
        assert_eq!(b.get("hash"), Some(1));
        assert_eq!(b.get("ketama"), Some(1));
        b.set("ketama_weighted", 0, false).unwrap();
        assert_eq!(b.get("ketama"), Some(1));
        b.set("connect_timeout", 1 << 40, false).unwrap();
        assert_eq!(b.get("connect_timeout"), Some(0));
        b.set("num_replicas", -1, false).unwrap();
        assert_eq!(b.get("num_replicas"), Some(4294967295));
        b.set("tcp_nodelay", 7, false).unwrap();
        assert_eq!(b.get("tcp_nodelay"), Some(1));
    }

    #[test]
    fn ttl_jitter_shortens_relative_expiries_only_and_within_its_share() {
        let mut b = Behaviors::default();
        assert_eq!(b.get("ttl_jitter"), Some(0));
        assert!(b.set("ttl_jitter", 101, false).is_err());
        assert!(b.set("ttl_jitter", -1, false).is_err());
        assert_eq!(b.jitter.apply(1000, b"k"), 1000);
        b.set("ttl_jitter", 20, false).unwrap();
        let got: Vec<u32> = (0..2000).map(|_| b.jitter.apply(1000, b"k")).collect();
        assert!(got.iter().all(|&t| (800..=1000).contains(&t)), "{got:?}");
        let distinct: std::collections::BTreeSet<_> = got.iter().collect();
        assert!(distinct.len() > 150, "{}", distinct.len());
        // no expiry, and absolute times, as given
        for t in [0, RELATIVE_EXPIRY_MAX + 1, u32::MAX] {
            assert_eq!(b.jitter.apply(t, b"k"), t);
        }
        assert!(b.jitter.apply(RELATIVE_EXPIRY_MAX, b"k") <= RELATIVE_EXPIRY_MAX);
        // never below one second
        b.set("ttl_jitter", 100, false).unwrap();
        assert!((0..1000).all(|_| b.jitter.apply(1, b"k") == 1));
        assert!((0..1000).all(|_| (1..=2).contains(&b.jitter.apply(2, b"k"))));
        // by key: the same for a key, spread over keys
        b.set("ttl_jitter", 50, false).unwrap();
        b.set("ttl_jitter_by_key", 1, false).unwrap();
        assert_eq!(b.get("ttl_jitter_by_key"), Some(1));
        let a = b.jitter.apply(600, b"user:1");
        assert!((0..100).all(|_| b.jitter.apply(600, b"user:1") == a));
        let spread: std::collections::BTreeSet<_> = (0..500)
            .map(|i| b.jitter.apply(600, format!("user:{i}").as_bytes()))
            .collect();
        assert!(spread.len() > 100 && spread.iter().all(|&t| (300..=600).contains(&t)));
    }

    #[test]
    fn max_value_size_is_between_one_byte_and_memcacheds_largest_item() {
        let mut b = Behaviors::default();
        assert_eq!(b.get("max_value_size"), Some(128 << 20));
        assert!(b.set("max_value_size", 0, false).is_err());
        assert!(b.set("max_value_size", -1, false).is_err());
        assert!(b.set("max_value_size", (1 << 30) + 1, false).is_err());
        b.set("max_value_size", 1 << 30, false).unwrap();
        assert_eq!(b.get("max_value_size"), Some(1 << 30));
    }
}
