//! A monotonic clock read cheaply: `Tick`, nanoseconds on the system's monotonic clock (libc's
//! `clock_gettime`, a vDSO read, no system call), compared and subtracted as plain integers. What a single call does
//! with time (its latency, when its connection last answered) costs a few instructions this
//! way, where `std::time::Instant` normalises a seconds-and-nanoseconds pair on every
//! subtraction. Deadlines and waits keep `Instant`; `Tick::instant` converts. No I/O.

use std::time::{Duration, Instant};

use nix::time::{clock_gettime, ClockId};

/// A point on the monotonic clock, in nanoseconds since an arbitrary start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(u64);

impl Tick {
    /// Now.
    #[inline]
    pub fn now() -> Tick {
        // The monotonic clock is always there and never reads negative (seconds since boot):
        // the casts are exact, and the sum wraps after 584 years of uptime.
        let Ok(t) = clock_gettime(ClockId::CLOCK_MONOTONIC) else {
            return Tick(0);
        };
        Tick(
            (t.tv_sec() as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(t.tv_nsec() as u64),
        )
    }

    /// Nanoseconds from `earlier` to this tick (0 if `earlier` is later).
    #[inline]
    pub fn nanos_since(self, earlier: Tick) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Whether less than `d` passed from `earlier` to this tick (false if `earlier` is later:
    /// a tick another thread took after this one says nothing about this one).
    #[inline]
    pub fn within(self, earlier: Tick, d: Duration) -> bool {
        earlier <= self && self.0 - earlier.0 < nanos(d)
    }

    /// The same moment as an `Instant`, for a deadline that counts from it.
    pub fn instant(self) -> Instant {
        let ago = Duration::from_nanos(Tick::now().nanos_since(self));
        let now = Instant::now();
        now.checked_sub(ago).unwrap_or(now)
    }
}

/// `d` in nanoseconds (`u64::MAX` past 584 years).
#[inline]
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_move_forward_and_measure_what_passed() {
        let a = Tick::now();
        std::thread::sleep(Duration::from_millis(2));
        let b = Tick::now();
        assert!(b > a);
        assert!(b.nanos_since(a) >= 2_000_000);
        assert_eq!(a.nanos_since(b), 0);
        assert!(b.within(a, Duration::from_secs(5)));
        assert!(!b.within(a, Duration::from_millis(1)));
        assert!(
            !a.within(b, Duration::from_secs(5)),
            "a later tick says nothing"
        );
    }

    #[test]
    fn a_tick_converts_to_the_same_moment_as_an_instant() {
        let t = Tick::now();
        let i = Instant::now();
        std::thread::sleep(Duration::from_millis(3));
        let back = t.instant();
        let gap = back.max(i) - back.min(i);
        assert!(gap < Duration::from_millis(2), "{gap:?}");
    }
}
