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

/// How many spare buffers a thread keeps of `Keys`.
const SPARES: usize = 2;
/// The largest buffers a thread keeps (bytes of capacity).
const SPARE_AT_MOST: usize = 4 << 20;

/// A `Keys`' buffers.
type KeyBufs = (Vec<u8>, Vec<usize>);

thread_local! {
    static SPARE: Spares<KeyBufs> = const { std::cell::RefCell::new(Vec::new()) };
    /// Whether this thread makes `Keys` (or `Items`): only such a thread keeps spares. The
    /// threads that only drop them (the asyncio client's workers, which run requests the
    /// loop's thread made) would keep buffers nobody takes.
    static MAKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Buffers a thread keeps for its next request (`Keys`, `Items`' values).
pub(crate) trait Reusable: Default {
    /// Bytes of capacity held.
    fn capacity(&self) -> usize;
    fn clear(&mut self);
}

/// A thread's spare buffers of one kind.
pub(crate) type Spares<T> = std::cell::RefCell<Vec<T>>;

/// Keep `bufs`, cleared, among `spares` (at most `most`, the largest), if this thread makes
/// such buffers and they are not too large.
pub(crate) fn spare_keep<T: Reusable>(
    spares: &'static std::thread::LocalKey<Spares<T>>,
    most: usize,
    mut bufs: T,
) {
    let capacity = bufs.capacity();
    if capacity == 0 || capacity > SPARE_AT_MOST || !MAKER.try_with(|m| m.get()).unwrap_or(false) {
        return;
    }
    bufs.clear();
    // (`try_with`: not while the thread exits.)
    let _ = spares.try_with(|spares| {
        let mut spares = spares.borrow_mut();
        if spares.len() < most {
            spares.push(bufs);
        } else if let Some(small) = spares.iter_mut().min_by_key(|b| b.capacity()) {
            if small.capacity() < capacity {
                *small = bufs;
            }
        }
    });
}

/// A spare from `spares`, or new buffers; this thread keeps spares from now on.
pub(crate) fn spare_take<T: Reusable>(spares: &'static std::thread::LocalKey<Spares<T>>) -> T {
    let _ = MAKER.try_with(|m| m.set(true));
    spares
        .try_with(|spares| spares.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

impl Reusable for KeyBufs {
    fn capacity(&self) -> usize {
        self.0.capacity() + self.1.capacity() * std::mem::size_of::<usize>()
    }

    fn clear(&mut self) {
        self.0.clear();
        self.1.clear();
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let bufs = (
            std::mem::take(&mut self.bytes),
            std::mem::take(&mut self.ends),
        );
        spare_keep(&SPARE, SPARES, bufs);
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
        let (bytes_buf, ends) = spare_take(&SPARE);
        let mut keys = Keys {
            bytes: bytes_buf,
            ends,
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
        assert!(next.bytes.capacity() < super::SPARE_AT_MOST);
    }
}
