//! libhashkit's hash functions (libmemcached 1.0.16), bit for bit: one-at-a-time, MD5, CRC,
//! FNV-1/1a (32 and 64), Hsieh, murmur2 and Jenkins (docs/design/placement.md#hash-functions).
//! Pure: depends on nothing but md-5.

use md5::{Digest, Md5};

/// libhashkit's hash functions, with their behavior codes.
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

pub(super) const HASH_KINDS: [HashKind; 10] = [
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
    oaat_finish(key.iter().fold(0, |h, &b| oaat_step(h, b)))
}

#[inline(always)]
fn oaat_step(h: u32, b: u8) -> u32 {
    let h = h.wrapping_add(sx(b));
    let h = h.wrapping_add(h << 10);
    h ^ (h >> 6)
}

#[inline(always)]
fn oaat_finish(h: u32) -> u32 {
    let h = h.wrapping_add(h << 3);
    let h = h ^ (h >> 11);
    h.wrapping_add(h << 15)
}

/// `hash(HashKind::Default, ..)` of four keys at once: one key's hash is a chain of dependent
/// steps, one per byte, so four chains in step let the CPU work on them side by side (about
/// three times the keys a second of one key at a time, for the keys of a large batch).
pub(super) fn one_at_a_time_x4(keys: [&[u8]; 4]) -> [u32; 4] {
    let common = keys.iter().map(|k| k.len()).min().unwrap_or(0);
    let [a, b, c, d] = keys.map(|k| &k[..common]);
    let mut h = [0u32; 4];
    for (((&a, &b), &c), &d) in a.iter().zip(b).zip(c).zip(d) {
        h = [
            oaat_step(h[0], a),
            oaat_step(h[1], b),
            oaat_step(h[2], c),
            oaat_step(h[3], d),
        ];
    }
    let mut out = [0u32; 4];
    for ((o, h), k) in out.iter_mut().zip(h).zip(keys) {
        *o = oaat_finish(k[common..].iter().fold(h, |h, &b| oaat_step(h, b)));
    }
    out
}

pub(super) fn md5_digest(data: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&Md5::digest(data));
    out
}

pub(super) fn le32(b: &[u8]) -> u32 {
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
