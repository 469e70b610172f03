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

/// How many spare byte buffers (`spare_bytes`) a thread keeps: one per server of a
/// three-server batch, and one more.
const BYTE_SPARES: usize = 4;
/// The largest byte buffer a thread keeps (bytes of capacity): at most 4 MiB in all.
const BYTE_SPARE_AT_MOST: usize = 1 << 20;

/// A `Keys`' buffers.
type KeyBufs = (Vec<u8>, Vec<usize>);

thread_local! {
    static SPARE: Spares<KeyBufs> = const { std::cell::RefCell::new(Vec::new()) };
    /// Byte buffers of one call (a batch's requests, a fetch's values) for the next call.
    static BYTES: Spares<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
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
    bufs: T,
) {
    if MAKER.try_with(|m| m.get()).unwrap_or(false) {
        keep_in(spares, most, bufs, SPARE_AT_MOST);
    }
}

/// A spare from `spares`, or new buffers; this thread keeps spares from now on.
pub(crate) fn spare_take<T: Reusable>(spares: &'static std::thread::LocalKey<Spares<T>>) -> T {
    let _ = MAKER.try_with(|m| m.set(true));
    take_from(spares)
}

/// `spare_keep` whatever the thread, for buffers of at most `largest` bytes.
fn keep_in<T: Reusable>(
    spares: &'static std::thread::LocalKey<Spares<T>>,
    most: usize,
    mut bufs: T,
    largest: usize,
) {
    let capacity = bufs.capacity();
    if capacity == 0 || capacity > largest {
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

/// A spare from `spares`, or new buffers.
fn take_from<T: Reusable>(spares: &'static std::thread::LocalKey<Spares<T>>) -> T {
    spares
        .try_with(|spares| spares.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

impl Reusable for Vec<u8> {
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }

    fn clear(&mut self) {
        Vec::clear(self)
    }
}

/// An empty byte buffer for one call's requests or values: a spare of this thread's, if any,
/// with the thread it was taken on. The buffers of a large call, allocated and freed per call,
/// were given back to the system by the allocator and faulted in again page by page on the next
/// call (a 10,000-key `set_multi` spent a sixth of its own time there, three servers a quarter).
pub(crate) fn spare_bytes() -> (Vec<u8>, Origin) {
    (take_from(&BYTES), Origin::here())
}

/// Keep `buf` for this thread's next `spare_bytes`, if it was taken on this thread (`origin`).
/// (Not `spare_keep`: its rule is for `Keys` and `Items`, which one thread makes and another
/// drops; a thread that takes a byte buffer does not start keeping those.)
pub(crate) fn spare_bytes_keep(buf: Vec<u8>, origin: Origin) {
    // (An empty buffer, a miss's, is not worth a look at the thread.)
    if buf.capacity() > 0 && origin == Origin::here() {
        keep_in(&BYTES, BYTE_SPARES, buf, BYTE_SPARE_AT_MOST);
    }
}

/// The thread a spare byte buffer was taken on: only that thread keeps it again. A buffer that
/// ends on another thread (the asyncio client plans its requests on the loop's thread, its
/// workers send them and make the fetches the loop's thread reads) is freed there, as any
/// buffer is; kept, it would move between threads' spares on every request. `default()` is no
/// thread's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Origin(usize);

thread_local! {
    /// Its address tells the threads alive apart.
    static HERE: u8 = const { 0 };
}

impl Origin {
    pub fn here() -> Origin {
        Origin(HERE.with(|h| h as *const u8 as usize))
    }
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

    #[test]
    fn a_dropped_batchs_request_buffer_serves_the_next_batch_empty() {
        use crate::client::batch::ServerBatch;
        std::thread::spawn(|| {
            let mut b = ServerBatch::new(0);
            b.wbuf.extend_from_slice(&[b'x'; 5000]);
            let (at, cap) = (b.wbuf.as_ptr(), b.wbuf.capacity());
            drop(b);
            let next = ServerBatch::new(1);
            assert!(next.wbuf.is_empty());
            assert_eq!((next.wbuf.as_ptr(), next.wbuf.capacity()), (at, cap));
            // the next one, with no spare left, starts with a buffer of its own
            let other = ServerBatch::new(2);
            assert_ne!(other.wbuf.as_ptr(), at);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_keeps_few_byte_buffers_and_none_too_large() {
        use super::{spare_bytes, spare_bytes_keep, BYTES, BYTE_SPARES, BYTE_SPARE_AT_MOST};
        std::thread::spawn(|| {
            let (_, here) = spare_bytes();
            spare_bytes_keep(Vec::with_capacity(BYTE_SPARE_AT_MOST + 1), here);
            assert!(BYTES.with(|s| s.borrow().is_empty()));
            for n in 1..=BYTE_SPARES + 2 {
                spare_bytes_keep(Vec::with_capacity(n * 1000), here);
            }
            // the largest are kept, no more than BYTE_SPARES
            let mut kept: Vec<usize> =
                BYTES.with(|s| s.borrow().iter().map(|b| b.capacity()).collect());
            kept.sort_unstable();
            assert_eq!(kept.len(), BYTE_SPARES);
            assert!(kept[0] >= 3000, "{kept:?}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_buffer_dropped_on_another_thread_is_not_kept_there() {
        use crate::client::batch::ServerBatch;
        let mut b = ServerBatch::new(0);
        b.wbuf
            .extend_from_slice(b"planned here, sent by another thread");
        std::thread::spawn(move || {
            let (_, here) = super::spare_bytes();
            super::spare_bytes_keep(Vec::with_capacity(10), here);
            drop(b);
            let kept: Vec<usize> =
                super::BYTES.with(|s| s.borrow().iter().map(|b| b.capacity()).collect());
            assert_eq!(kept, [10]);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn taking_a_byte_buffer_does_not_make_a_thread_keep_keys() {
        let keys = Keys::of(&[b"made on this thread".as_slice()]);
        std::thread::spawn(move || {
            let (buf, here) = super::spare_bytes();
            super::spare_bytes_keep(buf, here);
            drop(keys);
            assert!(super::SPARE.with(|s| s.borrow().is_empty()));
        })
        .join()
        .unwrap();
    }
}
