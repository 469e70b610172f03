//! libmemcached 1.0.16's key-to-server placement, bit for bit: the libhashkit hash functions,
//! the modula and consistent (ketama, spy, weighted) distributions, and the behavior
//! transitions that decide which ring a client ends up with (docs/design/placement.md). Pure:
//! depends on nothing but md-5.

pub mod hash;

use std::sync::atomic::{AtomicU64, Ordering};

use hash::{hash, HashKind};
use hash::{le32, md5_digest};

/// libmemcached's distributions, with their behavior codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    Modula = 0,
    Consistent = 1,
    ConsistentKetama = 2,
    Random = 3,
    ConsistentKetamaSpy = 4,
    ConsistentWeighted = 5,
    VirtualBucket = 6,
    ConsistentMax = 7,
}

const DISTRIBUTIONS: [Distribution; 8] = [
    Distribution::Modula,
    Distribution::Consistent,
    Distribution::ConsistentKetama,
    Distribution::Random,
    Distribution::ConsistentKetamaSpy,
    Distribution::ConsistentWeighted,
    Distribution::VirtualBucket,
    Distribution::ConsistentMax,
];

impl Distribution {
    pub fn from_code(c: i64) -> Option<Self> {
        usize::try_from(c)
            .ok()
            .and_then(|i| DISTRIBUTIONS.get(i).copied())
    }
    pub fn code(self) -> i64 {
        self as i64
    }
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Modula => "modula",
            Distribution::Consistent => "consistent",
            Distribution::ConsistentKetama => "consistent ketama",
            Distribution::Random => "random",
            Distribution::ConsistentKetamaSpy => "consistent ketama spy",
            Distribution::ConsistentWeighted => "consistent weighted",
            Distribution::VirtualBucket => "virtual bucket",
            Distribution::ConsistentMax => "consistent max",
        }
    }
    pub fn is_consistent(self) -> bool {
        matches!(
            self,
            Distribution::Consistent
                | Distribution::ConsistentKetama
                | Distribution::ConsistentKetamaSpy
                | Distribution::ConsistentWeighted
        )
    }
}

/// One ring member as libmemcached sees it: the literal host string (IPv6 without brackets),
/// port and weight; a UNIX socket is host = path, port = 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingServer {
    pub host: String,
    pub port: u16,
    pub weight: u32,
}

/// libmemcached's placement state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSettings {
    pub distribution: Distribution,
    pub key_hash: HashKind,
    /// The key hash when the continuum was last built (`run_distribution`), which made the
    /// points of the unweighted ring: setting `hash` alone does not rebuild it
    /// (docs/design/placement.md#what-each-behavior-sets).
    pub point_hash: HashKind,
    pub weighted: bool,
    pub sort_hosts: bool,
    /// The server list was sorted by a rebuild under `_sort_hosts`. libmemcached sorts its
    /// array in place and never puts it back, so it stays sorted when `_sort_hosts` is turned
    /// off (and in clones, which copy the array in its order).
    pub sorted: bool,
}

impl Default for RingSettings {
    fn default() -> Self {
        RingSettings {
            distribution: Distribution::Modula,
            key_hash: HashKind::Default,
            point_hash: HashKind::Default,
            weighted: false,
            sort_hosts: false,
            sorted: false,
        }
    }
}

impl RingSettings {
    /// `memcached_behavior_set_key_hash`: keys are hashed with `h` from now on, but the
    /// continuum keeps the points it has until the next rebuild.
    pub fn set_hash(&mut self, h: HashKind) {
        self.key_hash = h;
    }
    /// libmemcached's `run_distribution`: the continuum is built again, with the key hash of
    /// now. Run by every distribution change, `_sort_hosts`, a server added, a clone and an
    /// ejection or return; never by `hash` or `ketama_hash`.
    pub fn rebuild(&mut self) {
        self.point_hash = self.key_hash;
        self.sorted |= self.sort_hosts;
    }
    pub fn set_sort_hosts(&mut self, on: bool) {
        self.sort_hosts = on;
        self.rebuild();
    }
    pub fn set_ketama(&mut self, on: bool) {
        if on {
            self.distribution = Distribution::ConsistentKetama;
            self.weighted = false;
        } else {
            self.distribution = Distribution::Modula;
        }
        self.rebuild();
    }
    /// `true` also forces the MD5 key hash; `false` is libmemcached's "ketama on" quirk
    /// (docs/design/placement.md#what-each-behavior-sets).
    pub fn set_ketama_weighted(&mut self, on: bool) {
        if on {
            self.key_hash = HashKind::Md5;
            self.distribution = Distribution::ConsistentWeighted;
            self.weighted = true;
            self.rebuild();
        } else {
            self.set_ketama(true);
        }
    }
    pub fn set_distribution(&mut self, d: Distribution) {
        self.distribution = d;
        match d {
            Distribution::Consistent | Distribution::ConsistentKetama => self.weighted = false,
            Distribution::ConsistentWeighted => self.weighted = true,
            _ => {}
        }
        self.rebuild();
    }
    /// `memcached_server_add_with_weight`: a weight > 1 under a consistent distribution
    /// silently turns the weighted ring on (docs/design/placement.md#the-weighted-flag).
    pub fn note_server_added(&mut self, weight: u32) {
        if weight > 1 && self.distribution.is_consistent() {
            self.weighted = true;
        }
        self.rebuild();
    }
    /// `memcached_clone` does not copy the weighted flag; re-adding the servers sets it only if
    /// some weight is > 1 (docs/design/placement.md#clones-and-pools).
    pub fn after_clone(&self, servers: &[RingServer]) -> RingSettings {
        RingSettings {
            weighted: servers.iter().any(|s| s.weight > 1),
            point_hash: self.key_hash,
            ..*self
        }
    }
}

/// C `float` arithmetic for the weighted point count
/// (docs/design/placement.md#weighted-point-count).
fn weighted_points(weight: u32, total: u32, live: usize) -> u32 {
    let pct = weight as f32 / total as f32;
    let v = pct * 160.0f32;
    let v = v / 4.0f32;
    let v = v * live as f32;
    let v = v + 1e-10f32;
    (v.floor() as u32).wrapping_mul(4)
}

fn point_string(s: &RingServer, n: u32, spy: bool) -> String {
    if spy {
        format!("/{}:{}-{}", s.host, s.port, n)
    } else if s.port == 11211 {
        format!("{}-{}", s.host, n)
    } else {
        format!("{}:{}-{}", s.host, s.port, n)
    }
}

static RANDOM_STATE: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

#[derive(Clone, Debug)]
/// The key-to-server map for one set of live servers: modula, or a sorted continuum of
/// points for the consistent distributions. Built once per snapshot; lookups are pure.
pub struct Ring {
    settings: RingSettings,
    n: usize,
    /// internal position -> caller's index (identity unless `_sort_hosts`)
    order: Vec<usize>,
    /// sorted (value, internal position)
    continuum: Vec<(u32, usize)>,
}

impl Ring {
    pub fn build(settings: &RingSettings, servers: &[RingServer], live: &[bool]) -> Ring {
        let mut order: Vec<usize> = (0..servers.len()).collect();
        if settings.sort_hosts || settings.sorted {
            order.sort_by(|&a, &b| {
                (servers[a].host.as_bytes(), servers[a].port)
                    .cmp(&(servers[b].host.as_bytes(), servers[b].port))
            });
        }
        let mut continuum = Vec::new();
        if settings.distribution.is_consistent() {
            let spy = settings.distribution == Distribution::ConsistentKetamaSpy;
            let idx: Vec<usize> = (0..order.len())
                .filter(|&j| live.get(order[j]).copied().unwrap_or(true))
                .collect();
            let total: u32 = idx.iter().map(|&j| servers[order[j]].weight).sum();
            for &j in &idx {
                let s = &servers[order[j]];
                if settings.weighted {
                    let pps = weighted_points(s.weight, total.max(1), idx.len());
                    for n in 0..pps / 4 {
                        let d = md5_digest(point_string(s, n, spy).as_bytes());
                        for w in d.chunks_exact(4) {
                            continuum.push((le32(w), j));
                        }
                    }
                } else {
                    for n in 0..100 {
                        continuum.push((
                            hash(settings.point_hash, point_string(s, n, spy).as_bytes()),
                            j,
                        ));
                    }
                }
            }
            continuum.sort_unstable();
        }
        Ring {
            settings: *settings,
            n: servers.len(),
            order,
            continuum,
        }
    }

    /// Index into the caller's server list for this key.
    pub fn server_for(&self, key: &[u8]) -> usize {
        self.caller_index(self.internal_for(key))
    }

    /// The caller's index of the server at `internal` in libmemcached's list.
    fn caller_index(&self, internal: usize) -> usize {
        self.order.get(internal).copied().unwrap_or(0)
    }

    /// `server_for` of every key, in order (`key` gives a key's bytes): the same servers, with
    /// the default hash computed four keys at a time.
    pub fn servers_for<'a, K>(&self, keys: &[K], key: impl Fn(&K) -> &'a [u8]) -> Vec<u16> {
        let by_hash = self.n > 1
            && self.settings.key_hash == HashKind::Default
            && !matches!(
                self.settings.distribution,
                Distribution::Random | Distribution::VirtualBucket
            );
        if !by_hash {
            return keys
                .iter()
                .map(|k| self.server_for(key(k)) as u16)
                .collect();
        }
        let mut out = Vec::with_capacity(keys.len());
        let mut fours = keys.chunks_exact(4);
        for four in &mut fours {
            let hashes = hash::one_at_a_time_x4([
                key(&four[0]),
                key(&four[1]),
                key(&four[2]),
                key(&four[3]),
            ]);
            out.extend(hashes.map(|h| self.caller_index(self.internal_for_hash(h)) as u16));
        }
        out.extend(
            fours
                .remainder()
                .iter()
                .map(|k| self.server_for(key(k)) as u16),
        );
        out
    }

    /// `internal_for` of a key hashed with the ring's hash (`n > 1`, a distribution that
    /// hashes: neither random nor virtual buckets).
    fn internal_for_hash(&self, h: u32) -> usize {
        match self.settings.distribution {
            Distribution::Modula | Distribution::ConsistentMax => h as usize % self.n,
            _ => {
                if self.continuum.is_empty() {
                    return 0;
                }
                let pos = self.continuum.partition_point(|&(v, _)| v < h);
                let pos = if pos == self.continuum.len() { 0 } else { pos };
                self.continuum[pos].1
            }
        }
    }

    /// Index into libmemcached's own server list for this key (sorted with `_sort_hosts`):
    /// what pylibmc's `hash()` returns.
    pub fn internal_for(&self, key: &[u8]) -> usize {
        if self.n <= 1 {
            return 0;
        }
        match self.settings.distribution {
            Distribution::Random => {
                // xorshift64*: a different server per call, as libmemcached's random() gives.
                let mut x = RANDOM_STATE.load(Ordering::Relaxed);
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                RANDOM_STATE.store(x, Ordering::Relaxed);
                (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % self.n
            }
            Distribution::VirtualBucket => 0,
            _ => self.internal_for_hash(hash(self.settings.key_hash, key)),
        }
    }

    /// The server `steps` places after `server` (an index into the caller's list) in
    /// libmemcached's own list (sorted with `_sort_hosts`), wrapping at the end: where
    /// libmemcached puts a key's replicas (`num_replicas`) and reads them back from.
    pub fn successor(&self, server: usize, steps: usize) -> usize {
        if self.n == 0 {
            return server;
        }
        let pos = self.order.iter().position(|&s| s == server).unwrap_or(0);
        self.order
            .get((pos + steps % self.n) % self.n)
            .copied()
            .unwrap_or(server)
    }

    pub fn points_per_server(&self) -> Vec<u32> {
        if !self.settings.distribution.is_consistent() {
            return Vec::new();
        }
        let mut counts = vec![0u32; self.n];
        for &(_, j) in &self.continuum {
            counts[self.order[j]] += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests;
