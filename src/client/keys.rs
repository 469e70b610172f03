//! Keys in one buffer: what a request that outlives its caller's arguments owns (the asyncio
//! client's requests, `dispatch::request`) and the wire keys a `direct` fetch matches hits
//! against. No I/O.

/// Keys in one buffer (one allocation however many keys). When dropped, its buffers are kept
/// for the next `Keys` made on the same thread (`SPARE`): a large request's buffers, allocated
/// and freed per call, would otherwise be given back to the system by the allocator and
/// faulted in again page by page (a quarter of a 10,000-key `delete_multi`'s time).
#[derive(Debug, Default)]
pub struct Keys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// How many spare buffers a thread keeps, and how large they may be (bytes of capacity).
const SPARES: usize = 2;
pub(crate) const SPARE_AT_MOST: usize = 4 << 20;

thread_local! {
    static SPARE: std::cell::RefCell<Vec<(Vec<u8>, Vec<usize>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// Whether this thread makes `Keys` (or `Items`): only such a thread keeps spares. The
    /// threads that only drop them (the asyncio client's workers, which run requests the
    /// loop's thread made) would keep buffers nobody takes.
    static MAKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Note that this thread makes keys or items (see `MAKER`).
pub(crate) fn made_here() {
    let _ = MAKER.try_with(|m| m.set(true));
}

/// Whether a buffer dropped on this thread is kept (see `MAKER`).
pub(crate) fn keeps_spares() -> bool {
    MAKER.try_with(|m| m.get()).unwrap_or(false)
}

impl Drop for Keys {
    fn drop(&mut self) {
        if self.ends.capacity() == 0 || self.capacity() > SPARE_AT_MOST || !keeps_spares() {
            return;
        }
        let mut bufs = (
            std::mem::take(&mut self.bytes),
            std::mem::take(&mut self.ends),
        );
        bufs.0.clear();
        bufs.1.clear();
        // (`try_with`: not while the thread exits.)
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARES {
                spare.push(bufs);
            } else if let Some(small) = spare.iter_mut().min_by_key(|b| b.0.capacity()) {
                // The largest are kept.
                if small.0.capacity() < bufs.0.capacity() {
                    *small = bufs;
                }
            }
        });
    }
}

impl Clone for Keys {
    fn clone(&self) -> Keys {
        let mut out = Keys::with_capacity(self.len(), self.bytes.len());
        out.bytes.extend_from_slice(&self.bytes);
        out.ends.extend_from_slice(&self.ends);
        out
    }
}

impl Keys {
    /// Room for `n` keys of `bytes` bytes in all (in spare buffers of this thread, if any).
    pub fn with_capacity(n: usize, bytes: usize) -> Keys {
        made_here();
        let spare = SPARE
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten();
        let mut keys = match spare {
            Some((bytes, ends)) => Keys { bytes, ends },
            None => Keys::default(),
        };
        keys.reserve(n, bytes);
        keys
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

    /// Room for `n` more keys of `bytes` bytes in all.
    pub fn reserve(&mut self, n: usize, bytes: usize) {
        self.bytes.reserve(bytes);
        self.ends.reserve(n);
    }

    /// Bytes of capacity held.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
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

#[cfg(test)]
mod tests {
    use super::Keys;

    #[test]
    fn a_dropped_keys_buffers_serve_the_next_keys_empty() {
        let keys = Keys::of(&[b"abc".as_slice(), b"de"]);
        assert_eq!(keys.refs(), vec![b"abc".as_slice(), b"de"]);
        let at = keys.bytes.as_ptr();
        drop(keys);
        let mut next = Keys::with_capacity(1, 2);
        assert!(next.is_empty());
        assert_eq!(next.bytes.as_ptr(), at);
        next.push(b"xy");
        assert_eq!(next.refs(), vec![b"xy".as_slice()]);
        // a clone has its own buffers, with the same keys
        let copy = next.clone();
        assert_ne!(copy.bytes.as_ptr(), next.bytes.as_ptr());
        assert_eq!(copy.refs(), next.refs());
    }

    #[test]
    fn a_thread_that_makes_no_keys_keeps_no_spares() {
        let keys = Keys::of(&[b"made here".as_slice()]);
        std::thread::spawn(move || {
            drop(keys);
            assert!(super::SPARE.with(|s| s.borrow().is_empty()));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn buffers_too_large_are_not_kept() {
        let keys = Keys::with_capacity(1, super::SPARE_AT_MOST + 1);
        drop(keys);
        let next = Keys::with_capacity(1, 1);
        assert!(next.capacity() < super::SPARE_AT_MOST);
    }
}
