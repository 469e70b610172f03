//! Keys in one buffer: what a request that outlives its caller's arguments owns (the asyncio
//! client's requests, `dispatch::request`) and the wire keys a `direct` fetch matches hits
//! against. No I/O.

/// Keys in one buffer (one allocation however many keys).
#[derive(Clone, Debug, Default)]
pub struct Keys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    /// Room for `n` keys of `bytes` bytes in all.
    pub fn with_capacity(n: usize, bytes: usize) -> Keys {
        Keys {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        }
    }

    /// `keys`, copied.
    pub fn of<K: AsRef<[u8]>>(keys: &[K]) -> Keys {
        let bytes = keys.iter().map(|k| k.as_ref().len()).sum();
        let mut out = Keys::with_capacity(keys.len(), bytes);
        for k in keys {
            out.push(k.as_ref());
        }
        out
    }

    pub fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub fn refs(&self) -> Vec<&[u8]> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }
}
