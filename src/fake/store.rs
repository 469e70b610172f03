//! The fake server's items and clock: memcached 1.6's storage semantics, without any protocol.
//!
//! Modelled after memcached (and checked against it by tests/api/test_fake_diff.py): whole-second
//! time on an injectable clock, expiry times relative up to 30 days and absolute beyond, one CAS
//! counter per server, the item size limit counted as memcached counts an item, `flush_all` with a
//! delay, `incr`/`decr` parsing a value as `strtoull` does and writing a shorter result in place
//! padded with spaces; and how the protocols read a number (`parse_u64`, `py_int`) and the
//! longest key. Owns no I/O.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// memcached's largest relative expiry time (30 days); a larger one is a Unix time.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// memcached's default item size limit (`-I 1m`).
pub const DEFAULT_ITEM_SIZE_MAX: usize = 1024 * 1024;
/// sizeof(item) on a 64-bit build, and the 8 bytes of its CAS value.
const ITEM_HEADER: usize = 48 + 8;

/// The wall clock, in Unix seconds.
fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The state of a `Clock`.
#[derive(Debug)]
struct ClockState {
    frozen: bool,
    base: f64,
    wall0: f64,
    offset: f64,
}

/// The time fake servers live in: Unix seconds that move only when `advance` is called
/// (frozen), or that follow the wall clock plus what was advanced. Shared by several servers.
#[derive(Debug)]
pub struct Clock(Mutex<ClockState>);

impl Clock {
    /// A clock starting at `start` (Unix seconds; the wall clock's whole second if None).
    pub fn new(start: Option<f64>, frozen: bool) -> Clock {
        let now = wall();
        Clock(Mutex::new(ClockState {
            frozen,
            base: start.unwrap_or(now.trunc()),
            wall0: now,
            offset: 0.0,
        }))
    }

    /// The current time of this clock, in seconds.
    pub fn time(&self) -> f64 {
        let s = self.0.lock();
        let mut now = s.base + s.offset;
        if !s.frozen {
            now += wall() - s.wall0;
        }
        now
    }

    /// The current time in whole seconds, as memcached keeps it.
    pub fn now(&self) -> i64 {
        self.time() as i64
    }

    /// The Unix time an absolute expiry time is read against: the wall clock's while frozen,
    /// else this clock's.
    pub fn unix_now(&self) -> i64 {
        if self.frozen() {
            wall() as i64
        } else {
            self.now()
        }
    }

    pub fn frozen(&self) -> bool {
        self.0.lock().frozen
    }

    pub fn set_frozen(&self, frozen: bool) {
        self.0.lock().frozen = frozen;
    }

    /// Move the clock forward (the caller refuses a negative `seconds`).
    pub fn advance(&self, seconds: f64) {
        self.0.lock().offset += seconds;
    }
}

/// One stored item: value, client flags, expiry (0 = never), CAS value, when it was last
/// stored (for `flush_all`), and the meta protocol's stale and win marks.
#[derive(Clone, Debug)]
pub struct Item {
    pub value: Vec<u8>,
    pub flags: u64,
    pub exptime: i64,
    pub cas: u64,
    pub time: i64,
    pub stale: bool,
    pub token_sent: bool,
}

/// The longest key memcached takes.
pub const KEY_MAX: usize = 250;

/// `tok` read as Python's `int()` reads bytes: white space around, a sign, digits with single
/// underscores between them. Values far out of any range saturate.
pub fn py_int(tok: &[u8]) -> Option<i128> {
    let tok = tok.trim_ascii();
    let (neg, digits) = match tok.first() {
        Some(b'-') => (true, &tok[1..]),
        Some(b'+') => (false, &tok[1..]),
        _ => (false, tok),
    };
    if digits.is_empty() || digits.first() == Some(&b'_') || digits.last() == Some(&b'_') {
        return None;
    }
    let mut n: i128 = 0;
    let mut prev_underscore = false;
    for &c in digits {
        if c == b'_' {
            if prev_underscore {
                return None;
            }
            prev_underscore = true;
            continue;
        }
        if !c.is_ascii_digit() {
            return None;
        }
        prev_underscore = false;
        n = (n * 10 + i128::from(c - b'0')).min(1 << 100);
    }
    Some(if neg { -n } else { n })
}

/// `data` read as memcached's `safe_strtoull` reads a value: leading white space, an optional
/// sign, decimal digits, then white space or the end (a NUL ends C's string too); None if it
/// is not a number, out of range, or negative.
pub fn parse_u64(data: &[u8]) -> Option<u64> {
    let space = |c: u8| b" \t\n\x0b\x0c\r".contains(&c);
    let mut i = 0;
    while i < data.len() && space(data[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < data.len() && (data[i] == b'+' || data[i] == b'-') {
        neg = data[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut value: Option<u64> = Some(0);
    while i < data.len() && data[i].is_ascii_digit() {
        value = value
            .and_then(|v| v.checked_mul(10))
            .and_then(|v| v.checked_add(u64::from(data[i] - b'0')));
        i += 1;
    }
    if i == start || (i < data.len() && !space(data[i]) && data[i] != 0) {
        return None;
    }
    let value = value?; // ERANGE
    if neg {
        let v = value.wrapping_neg();
        return (v < 1 << 63).then_some(v);
    }
    Some(value)
}

/// The outcome of a storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    NoMemory,
}

/// How a storage command stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The outcome of `incr`/`decr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    Value(u64),
    NotFound,
    NonNumeric,
}

/// The server's time: its clock and when it started.
#[derive(Debug)]
pub struct Times {
    pub clock: Arc<Clock>,
    pub started: i64,
}

impl Times {
    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// An expiry time as sent to the absolute time it ends at (0: never; 1: at once).
    pub fn realtime(&self, exptime: i64) -> i64 {
        if exptime == 0 {
            return 0;
        }
        let exptime = if exptime < 0 {
            REALTIME_MAXDELTA + 1 // memcached: a negative time is long past
        } else {
            exptime
        };
        if exptime > REALTIME_MAXDELTA {
            if exptime <= self.started {
                return 1;
            }
            return self.clock.now() + exptime - self.clock.unix_now();
        }
        self.clock.now() + exptime
    }
}

/// The few counters `stats` shows.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub cmd_get: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub cmd_set: u64,
    pub total_items: u64,
}

/// The items of one fake server, with memcached's rules.
#[derive(Debug)]
pub struct Store {
    pub items: HashMap<Vec<u8>, Item>,
    pub t: Times,
    pub item_size_max: usize,
    pub out_of_memory: bool,
    /// The memcached release it answers as, and whether that is older than 1.6.45 (whose
    /// answers to malformed commands differ: 1.6.18's are copied).
    pub version: Vec<u8>,
    pub legacy: bool,
    pub stats: Counters,
    cas: u64,
    oldest_live: i64,
    oldest_cas: u64,
}

/// Whether `version` ("1.6.18") is older than 1.6.45.
fn is_legacy(version: &[u8]) -> bool {
    let parts: Vec<u64> = version
        .split(|&c| c == b'.')
        .take(3)
        .map(|p| std::str::from_utf8(p).ok().and_then(|s| s.parse().ok()))
        .collect::<Option<_>>()
        .unwrap_or_default();
    parts < vec![1, 6, 45] && !parts.is_empty()
}

impl Store {
    pub fn new(clock: Arc<Clock>, item_size_max: usize, version: &[u8]) -> Store {
        let started = clock.unix_now() - 62; // as memcached: a minute and 2 s before now
        Store {
            items: HashMap::new(),
            t: Times { clock, started },
            item_size_max,
            out_of_memory: false,
            version: version.to_vec(),
            legacy: is_legacy(version),
            stats: Counters::default(),
            cas: 0,
            oldest_live: 0,
            oldest_cas: 0,
        }
    }

    pub fn next_cas(&mut self) -> u64 {
        self.cas += 1;
        self.cas
    }

    fn flushed(&self, it: &Item, now: i64) -> bool {
        let live = self.oldest_live;
        if live == 0 || live > now {
            return false;
        }
        it.time <= live || (self.oldest_cas != 0 && it.cas < self.oldest_cas)
    }

    /// The live item under `key` (an expired or flushed one is removed).
    pub fn get(&mut self, key: &[u8]) -> Option<&mut Item> {
        let now = self.t.now();
        let it = self.items.get(key)?;
        if (it.exptime != 0 && it.exptime <= now) || self.flushed(it, now) {
            self.items.remove(key);
            return None;
        }
        self.items.get_mut(key)
    }

    /// Whether a live item is under `key`.
    pub fn live(&mut self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }

    /// Whether an item of this size fits under the item size limit, counted as memcached
    /// counts it: header and CAS, key and its NUL, 4 bytes of flags unless 0, value and CRLF.
    pub fn fits(&self, key: &[u8], flags: u64, length: usize) -> bool {
        let total = ITEM_HEADER + key.len() + 1 + if flags != 0 { 4 } else { 0 } + length + 2;
        total <= self.item_size_max
    }

    /// Store a new item under `key` (exptime already absolute), with a new CAS value unless
    /// `cas` is one.
    pub fn link(&mut self, key: &[u8], value: Vec<u8>, flags: u64, exptime: i64, cas: u64) {
        let cas = if cas != 0 { cas } else { self.next_cas() };
        let it = Item {
            value,
            flags,
            exptime,
            cas,
            time: self.t.now(),
            stale: false,
            token_sent: false,
        };
        self.items.insert(key.to_vec(), it);
        self.stats.total_items += 1;
    }

    /// set/add/replace/append/prepend/cas. `exptime` is as sent; `cas` (for `Cas`) the token.
    pub fn store(
        &mut self,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        flags: u64,
        exptime: i64,
        cas: u64,
    ) -> Stored {
        self.stats.cmd_set += 1;
        let fits = self.fits(key, flags, value.len());
        if !fits || self.out_of_memory {
            if mode == Mode::Set {
                self.items.remove(key); // memcached drops the old value of a refused set
            }
            return if fits {
                Stored::NoMemory
            } else {
                Stored::TooLarge
            };
        }
        let old = self.get(key).map(|it| (it.cas, it.flags, it.exptime));
        match (mode, &old) {
            (Mode::Cas, None) => return Stored::NotFound,
            (Mode::Cas, Some((c, ..))) if *c != cas => return Stored::Exists,
            (Mode::Add, Some(_)) => return Stored::NotStored,
            (Mode::Replace | Mode::Append | Mode::Prepend, None) => return Stored::NotStored,
            _ => {}
        }
        if let (Mode::Append | Mode::Prepend, Some((_, oflags, oexp))) = (mode, old) {
            let ovalue = self.items.get(key).map_or(&[][..], |it| &it.value);
            let joined = if mode == Mode::Append {
                [ovalue, value].concat()
            } else {
                [value, ovalue].concat()
            };
            if !self.fits(key, oflags, joined.len()) {
                return Stored::NotStored;
            }
            self.link(key, joined, oflags, oexp, 0);
            return Stored::Stored;
        }
        let exp = self.t.realtime(exptime);
        self.link(key, value.to_vec(), flags, exp, 0);
        Stored::Stored
    }

    /// incr/decr: the new value, `NotFound` or `NonNumeric`.
    pub fn delta(&mut self, key: &[u8], incr: bool, delta: u64) -> Delta {
        let Some(it) = self.get(key) else {
            return Delta::NotFound;
        };
        let parsed = if it.value.is_empty() {
            None
        } else {
            parse_u64(&it.value)
        };
        let Some(n) = parsed else {
            return Delta::NonNumeric;
        };
        let n = if incr {
            n.wrapping_add(delta)
        } else {
            n.saturating_sub(delta)
        };
        let digits = n.to_string().into_bytes();
        if digits.len() <= it.value.len() {
            // memcached writes a result that fits over the old one, padded with spaces
            let pad = it.value.len() - digits.len();
            it.value = digits;
            it.value.resize(it.value.len() + pad, b' ');
            let cas = self.next_cas();
            if let Some(it) = self.items.get_mut(key) {
                it.cas = cas;
            }
        } else {
            let (flags, exptime) = (it.flags, it.exptime);
            self.link(key, digits, flags, exptime, 0);
        }
        Delta::Value(n)
    }

    /// A new expiry time for a live item (None if there is none).
    pub fn touch(&mut self, key: &[u8], exptime: i64) -> Option<&mut Item> {
        let exp = self.t.realtime(exptime);
        let it = self.get(key)?;
        it.exptime = exp;
        Some(it)
    }

    pub fn delete(&mut self, key: &[u8]) -> bool {
        self.live(key) && self.items.remove(key).is_some()
    }

    pub fn flush_all(&mut self, delay: i64) {
        let now = self.t.now();
        let new_oldest = if delay > 0 {
            self.t.realtime(delay)
        } else {
            now
        };
        self.oldest_live = new_oldest - 1;
        if self.oldest_live <= now {
            self.oldest_cas = self.next_cas();
            self.items.clear();
        }
    }

    /// The number of live items (expired ones are removed on the way).
    pub fn curr_items(&mut self) -> usize {
        let keys: Vec<Vec<u8>> = self.items.keys().cloned().collect();
        keys.iter().filter(|k| self.live(k)).count()
    }
}
