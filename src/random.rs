//! A cheap per-thread random source for decisions that need no cryptographic quality: TTL
//! jitter's share (`behaviors::Jitter`) and hot-key sampling (`metrics::hot`, `one_in`). Never
//! Python.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

thread_local! {
    /// xorshift64* state, seeded from the standard library's per-process random hasher keys.
    static STATE: Cell<u64> = Cell::new({
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(0);
        h.finish() | 1
    });
}

/// A uniform 32-bit number: a fraction in 2^-32ths.
#[inline]
pub fn unit() -> u32 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    })
}

thread_local! {
    /// Calls `one_in` lets pass before its next `true`.
    static SKIP: Cell<u32> = const { Cell::new(0) };
}

/// True about once in `n` calls (always for `n` ≤ 1): after each `true` a random number of
/// calls, uniform in 0 to 2n-2, answer false, so a sample follows no period of the caller's
/// (as a fixed stride would) and a call costs a decrement, not a random draw.
#[inline]
pub fn one_in(n: u32) -> bool {
    first_of(n, 1).is_some()
}

/// `one_in(n)` for `items` calls at once: the offset of the first that answers true, the calls
/// after it not yet drawn; `None` when none of them does (drawn, all of them).
#[inline]
pub fn first_of(n: u32, items: usize) -> Option<usize> {
    if n <= 1 {
        return (items > 0).then_some(0);
    }
    SKIP.with(|skip| {
        let left = skip.get() as usize;
        if left >= items {
            skip.set((left - items) as u32);
            return None;
        }
        skip.set(unit() % (2 * n - 1));
        Some(left)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_in_n_is_about_one_in_n() {
        let hits = (0..160_000).filter(|_| super::one_in(16)).count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        // no period: a key in every 16th place is sampled about one time in 16 too
        let every_16th = (0..160_000)
            .filter(|i| super::one_in(16) && i % 16 == 0)
            .count();
        assert!((400..900).contains(&every_16th), "{every_16th}");
        // drawn a call at a time or many at once, the same rate
        let (mut picked, mut calls) = (0, 0);
        while calls < 160_000 {
            let mut rest = 10;
            while let Some(at) = super::first_of(16, rest) {
                picked += 1;
                rest -= at + 1;
            }
            calls += 10;
        }
        assert!((9_000..11_000).contains(&picked), "{picked}");
        assert_eq!(super::first_of(1, 3), Some(0));
        assert_eq!(super::first_of(1, 0), None);
        assert!((0..100).all(|_| super::one_in(1) && super::one_in(0)));
    }
}
