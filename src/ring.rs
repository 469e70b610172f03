//! libmemcached 1.0.16's key-to-server placement, bit for bit: the libhashkit hash functions,
//! the modula and consistent (ketama, spy, weighted) distributions, and the behavior
//! transitions that decide which ring a client ends up with (distribution.md). Pure: depends on
//! nothing but md-5.

use std::sync::atomic::{AtomicU64, Ordering};

use md5::{Digest, Md5};

#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashKind {
    Default = 0,
    Md5 = 1,
    Crc = 2,
    Fnv1_64 = 3,
    Fnv1a_64 = 4,
    Fnv1_32 = 5,
    Fnv1a_32 = 6,
    Hsieh = 7,
    Murmur = 8,
    Jenkins = 9,
}

const HASH_KINDS: [HashKind; 10] = [
    HashKind::Default,
    HashKind::Md5,
    HashKind::Crc,
    HashKind::Fnv1_64,
    HashKind::Fnv1a_64,
    HashKind::Fnv1_32,
    HashKind::Fnv1a_32,
    HashKind::Hsieh,
    HashKind::Murmur,
    HashKind::Jenkins,
];

impl HashKind {
    pub fn from_code(c: i64) -> Option<Self> {
        usize::try_from(c)
            .ok()
            .and_then(|i| HASH_KINDS.get(i).copied())
    }
    pub fn code(self) -> i64 {
        self as i64
    }
    pub fn name(self) -> &'static str {
        match self {
            HashKind::Default => "default",
            HashKind::Md5 => "md5",
            HashKind::Crc => "crc",
            HashKind::Fnv1_64 => "fnv1_64",
            HashKind::Fnv1a_64 => "fnv1a_64",
            HashKind::Fnv1_32 => "fnv1_32",
            HashKind::Fnv1a_32 => "fnv1a_32",
            HashKind::Hsieh => "hsieh",
            HashKind::Murmur => "murmur",
            HashKind::Jenkins => "jenkins",
        }
    }
    /// Hsieh is not compiled into the libmemcached pylibmc ships; pylibmc rejects it.
    pub fn available(self) -> bool {
        self != HashKind::Hsieh
    }
}

/// `(uint32_t)(char)b` with x86's signed char.
fn sx(b: u8) -> u32 {
    b as i8 as i32 as u32
}

fn one_at_a_time(key: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &b in key {
        h = h.wrapping_add(sx(b));
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h.wrapping_add(h << 15)
}

fn md5_digest(data: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&Md5::digest(data));
    out
}

fn le32(b: &[u8]) -> u32 {
    let mut w = [0u8; 4];
    w[..b.len().min(4)].copy_from_slice(&b[..b.len().min(4)]);
    u32::from_le_bytes(w)
}

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC_TABLE: [u32; 256] = crc_table();

fn crc32(key: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in key {
        c = CRC_TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

fn murmur2(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let n = key.len() as u32;
    let seed = 0xdead_beefu32.wrapping_mul(n);
    let mut h = seed ^ n;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = le32(c).wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rem = chunks.remainder();
    if rem.len() == 3 {
        h ^= (rem[2] as u32) << 16;
    }
    if rem.len() >= 2 {
        h ^= (rem[1] as u32) << 8;
    }
    if !rem.is_empty() {
        h ^= rem[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

fn jenkins(key: &[u8]) -> u32 {
    let n = key.len();
    let init = 0xdead_beefu32.wrapping_add(n as u32).wrapping_add(13);
    let (mut a, mut b, mut c) = (init, init, init);
    if n == 0 {
        return c;
    }
    let mut i = 0;
    while n - i > 12 {
        a = a.wrapping_add(le32(&key[i..i + 4]));
        b = b.wrapping_add(le32(&key[i + 4..i + 8]));
        c = c.wrapping_add(le32(&key[i + 8..i + 12]));
        a = a.wrapping_sub(c) ^ c.rotate_left(4);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a) ^ a.rotate_left(6);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b) ^ b.rotate_left(8);
        b = b.wrapping_add(a);
        a = a.wrapping_sub(c) ^ c.rotate_left(16);
        c = c.wrapping_add(b);
        b = b.wrapping_sub(a) ^ a.rotate_left(19);
        a = a.wrapping_add(c);
        c = c.wrapping_sub(b) ^ b.rotate_left(4);
        b = b.wrapping_add(a);
        i += 12;
    }
    let mut tail = [0u8; 12];
    tail[..n - i].copy_from_slice(&key[i..]);
    a = a.wrapping_add(le32(&tail[0..4]));
    b = b.wrapping_add(le32(&tail[4..8]));
    c = c.wrapping_add(le32(&tail[8..12]));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c.wrapping_sub(b.rotate_left(24))
}

/// Paul Hsieh's SuperFastHash as libhashkit writes it (not selectable from pylibmc).
fn hsieh(key: &[u8]) -> u32 {
    if key.is_empty() {
        return 0;
    }
    let mut h = key.len() as u32;
    let get16 = |b: &[u8]| (b[0] as u32) | ((b[1] as u32) << 8);
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        h = h.wrapping_add(get16(&c[0..2]));
        let tmp = (get16(&c[2..4]) << 11) ^ h;
        h = (h << 16) ^ tmp;
        h = h.wrapping_add(h >> 11);
    }
    let rem = chunks.remainder();
    match rem.len() {
        3 => {
            h = h.wrapping_add(get16(&rem[0..2]));
            h ^= h << 16;
            h ^= (rem[2] as u32) << 18;
            h = h.wrapping_add(h >> 11);
        }
        2 => {
            h = h.wrapping_add(get16(&rem[0..2]));
            h ^= h << 11;
            h = h.wrapping_add(h >> 17);
        }
        1 => {
            h = h.wrapping_add(rem[0] as u32);
            h ^= h << 10;
            h = h.wrapping_add(h >> 1);
        }
        _ => {}
    }
    h ^= h << 3;
    h = h.wrapping_add(h >> 5);
    h ^= h << 4;
    h = h.wrapping_add(h >> 17);
    h ^= h << 25;
    h.wrapping_add(h >> 6)
}

/// The raw 32-bit libhashkit value of `key` under `kind`.
pub fn hash(kind: HashKind, key: &[u8]) -> u32 {
    match kind {
        HashKind::Default => one_at_a_time(key),
        HashKind::Md5 => le32(&md5_digest(key)[0..4]),
        HashKind::Crc => (crc32(key) >> 16) & 0x7fff,
        HashKind::Fnv1_64 => {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in key {
                h = h.wrapping_mul(0x100_0000_01b3);
                h ^= b as i8 as i64 as u64;
            }
            h as u32
        }
        HashKind::Fnv1a_64 => {
            let mut h: u32 = 0x8422_2325;
            for &b in key {
                h ^= sx(b);
                h = h.wrapping_mul(0x1b3);
            }
            h
        }
        HashKind::Fnv1_32 => {
            let mut h: u32 = 0x811c_9dc5;
            for &b in key {
                h = h.wrapping_mul(0x0100_0193);
                h ^= sx(b);
            }
            h
        }
        HashKind::Fnv1a_32 => {
            let mut h: u32 = 0x811c_9dc5;
            for &b in key {
                h ^= sx(b);
                h = h.wrapping_mul(0x0100_0193);
            }
            h
        }
        HashKind::Hsieh => hsieh(key),
        HashKind::Murmur => murmur2(key),
        HashKind::Jenkins => jenkins(key),
    }
}

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
    pub weighted: bool,
    pub sort_hosts: bool,
}

impl Default for RingSettings {
    fn default() -> Self {
        RingSettings {
            distribution: Distribution::Modula,
            key_hash: HashKind::Default,
            weighted: false,
            sort_hosts: false,
        }
    }
}

impl RingSettings {
    pub fn set_hash(&mut self, h: HashKind) {
        self.key_hash = h;
    }
    pub fn set_ketama(&mut self, on: bool) {
        if on {
            self.distribution = Distribution::ConsistentKetama;
            self.weighted = false;
        } else {
            self.distribution = Distribution::Modula;
        }
    }
    /// `true` also forces the MD5 key hash; `false` is libmemcached's "ketama on" quirk.
    pub fn set_ketama_weighted(&mut self, on: bool) {
        if on {
            self.key_hash = HashKind::Md5;
            self.distribution = Distribution::ConsistentWeighted;
            self.weighted = true;
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
    }
    /// `memcached_server_add_with_weight`: a weight > 1 under a consistent distribution
    /// silently turns the weighted ring on.
    pub fn note_server_added(&mut self, weight: u32) {
        if weight > 1 && self.distribution.is_consistent() {
            self.weighted = true;
        }
    }
    /// `memcached_clone` does not copy the weighted flag; re-adding the servers sets it only if
    /// some weight is > 1 (distribution.md section 10).
    pub fn after_clone(&self, servers: &[RingServer]) -> RingSettings {
        RingSettings {
            weighted: servers.iter().any(|s| s.weight > 1),
            ..*self
        }
    }
}

/// C `float` arithmetic for the weighted point count (distribution.md section 8.2).
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
        if settings.sort_hosts {
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
                            hash(settings.key_hash, point_string(s, n, spy).as_bytes()),
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
        if self.n <= 1 {
            return 0;
        }
        let internal = match self.settings.distribution {
            Distribution::Modula | Distribution::ConsistentMax => {
                hash(self.settings.key_hash, key) as usize % self.n
            }
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
            _ => {
                if self.continuum.is_empty() {
                    return 0;
                }
                let h = hash(self.settings.key_hash, key);
                let pos = self.continuum.partition_point(|&(v, _)| v < h);
                let pos = if pos == self.continuum.len() { 0 } else { pos };
                self.continuum[pos].1
            }
        };
        self.order.get(internal).copied().unwrap_or(0)
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
mod tests {
    use super::*;

    #[test]
    fn hello_values() {
        let want = [
            (HashKind::Default, 0xc8fd181b),
            (HashKind::Md5, 0x2a40415d),
            (HashKind::Crc, 0x3610),
            (HashKind::Fnv1_64, 0xbdbdd4c7),
            (HashKind::Fnv1a_64, 0x80aabd0b),
            (HashKind::Fnv1_32, 0xb6fa7167),
            (HashKind::Fnv1a_32, 0x4f9f2cab),
            (HashKind::Murmur, 0x521b0bff),
            (HashKind::Jenkins, 0x2e0cc8f3),
        ];
        for (k, v) in want {
            assert_eq!(hash(k, b"hello"), v, "{k:?}");
        }
        assert_eq!(hash(HashKind::Default, "café".as_bytes()), 0xd99c709e);
        assert_eq!(hash(HashKind::Jenkins, b""), 0xdeadbefc);
    }

    fn srv(host: &str, port: u16, weight: u32) -> RingServer {
        RingServer {
            host: host.into(),
            port,
            weight,
        }
    }

    #[test]
    fn worked_examples() {
        let servers = [srv("10.0.0.1", 11211, 1), srv("10.0.0.2", 11212, 1)];
        let mut s = RingSettings::default();
        s.set_ketama(true);
        let r = Ring::build(&s, &servers, &[true, true]);
        assert_eq!(hash(HashKind::Default, b"10.0.0.1-0"), 0xf618fafa);
        assert_eq!(r.points_per_server(), vec![100, 100]);
        assert_eq!(r.server_for(b"foo"), 1);
        let mut w = RingSettings::default();
        w.set_ketama_weighted(true);
        let r = Ring::build(&w, &servers, &[true, true]);
        assert_eq!(r.points_per_server(), vec![160, 160]);
        assert_eq!(r.server_for(b"foo"), 0);
    }

    #[test]
    fn float32_point_counts() {
        assert_eq!(weighted_points(1, 25, 25), 156);
        let w = [1, 3, 7, 7, 7];
        let got: Vec<u32> = w.iter().map(|&x| weighted_points(x, 25, 5)).collect();
        assert_eq!(got, vec![28, 92, 224, 224, 224]);
    }

    #[test]
    fn no_panic_on_edges() {
        let r = Ring::build(&RingSettings::default(), &[], &[]);
        assert_eq!(r.server_for(b""), 0);
        let mut s = RingSettings::default();
        s.set_ketama(true);
        let servers = [srv("a", 1, 1), srv("b", 2, 1)];
        let r = Ring::build(&s, &servers, &[false, false]);
        assert_eq!(r.server_for(b"x"), 0);
        for k in HASH_KINDS {
            let _ = hash(k, b"");
            let _ = hash(k, &[0xff; 13]);
        }
    }
}
