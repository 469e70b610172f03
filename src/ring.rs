//! TEMPORARY stub (the real module is being written); same API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashKind { Default = 0, Md5 = 1, Crc = 2, Fnv1_64 = 3, Fnv1a_64 = 4, Fnv1_32 = 5, Fnv1a_32 = 6, Hsieh = 7, Murmur = 8, Jenkins = 9 }
const HK: [HashKind; 10] = [HashKind::Default, HashKind::Md5, HashKind::Crc, HashKind::Fnv1_64, HashKind::Fnv1a_64, HashKind::Fnv1_32, HashKind::Fnv1a_32, HashKind::Hsieh, HashKind::Murmur, HashKind::Jenkins];
impl HashKind {
    pub fn from_code(c: i64) -> Option<Self> { usize::try_from(c).ok().and_then(|i| HK.get(i).copied()) }
    pub fn code(self) -> i64 { self as i64 }
    pub fn name(self) -> &'static str { ["default","md5","crc","fnv1_64","fnv1a_64","fnv1_32","fnv1a_32","hsieh","murmur","jenkins"][self as usize] }
    pub fn available(self) -> bool { self != HashKind::Hsieh }
}
pub fn hash(_kind: HashKind, key: &[u8]) -> u32 { let mut h: u32 = 0; for &b in key { h = h.wrapping_add(b as i8 as i32 as u32); h = h.wrapping_add(h << 10); h ^= h >> 6; } h = h.wrapping_add(h << 3); h ^= h >> 11; h.wrapping_add(h << 15) }
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution { Modula = 0, Consistent = 1, ConsistentKetama = 2, Random = 3, ConsistentKetamaSpy = 4, ConsistentWeighted = 5, VirtualBucket = 6, ConsistentMax = 7 }
const D: [Distribution; 8] = [Distribution::Modula, Distribution::Consistent, Distribution::ConsistentKetama, Distribution::Random, Distribution::ConsistentKetamaSpy, Distribution::ConsistentWeighted, Distribution::VirtualBucket, Distribution::ConsistentMax];
impl Distribution {
    pub fn from_code(c: i64) -> Option<Self> { usize::try_from(c).ok().and_then(|i| D.get(i).copied()) }
    pub fn code(self) -> i64 { self as i64 }
    pub fn name(self) -> &'static str { ["modula","consistent","consistent ketama","random","consistent ketama spy","consistent weighted","virtual bucket","consistent max"][self as usize] }
    pub fn is_consistent(self) -> bool { matches!(self, Distribution::Consistent | Distribution::ConsistentKetama | Distribution::ConsistentKetamaSpy | Distribution::ConsistentWeighted) }
}
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingServer { pub host: String, pub port: u16, pub weight: u32 }
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingSettings { pub distribution: Distribution, pub key_hash: HashKind, pub weighted: bool, pub sort_hosts: bool }
impl Default for RingSettings { fn default() -> Self { RingSettings { distribution: Distribution::Modula, key_hash: HashKind::Default, weighted: false, sort_hosts: false } } }
impl RingSettings {
    pub fn set_hash(&mut self, h: HashKind) { self.key_hash = h }
    pub fn set_ketama(&mut self, on: bool) { self.distribution = if on { Distribution::ConsistentKetama } else { Distribution::Modula }; self.weighted = false }
    pub fn set_ketama_weighted(&mut self, on: bool) { if on { self.key_hash = HashKind::Md5; self.distribution = Distribution::ConsistentWeighted; self.weighted = true } else { self.set_ketama(true) } }
    pub fn set_distribution(&mut self, d: Distribution) { self.distribution = d }
    pub fn note_server_added(&mut self, _weight: u32) {}
    pub fn after_clone(&self, _servers: &[RingServer]) -> RingSettings { *self }
}
#[derive(Clone, Debug)]
pub struct Ring { n: usize, h: HashKind }
impl Ring {
    pub fn build(settings: &RingSettings, servers: &[RingServer], _live: &[bool]) -> Ring { Ring { n: servers.len(), h: settings.key_hash } }
    pub fn server_for(&self, key: &[u8]) -> usize { if self.n <= 1 { 0 } else { hash(self.h, key) as usize % self.n } }
    pub fn points_per_server(&self) -> Vec<u32> { Vec::new() }
}
