//! The descriptor an in-process connection (`wire`) shows the poll loops, which wait on
//! descriptors: readable whenever the connection has something for `recv` (replies, the end of
//! the stream), which is almost always, since a write is answered at once.
//!
//! On Linux it is a timerfd, armed to have expired (readable) by default. While `slow` holds a
//! reply, a `recv` that finds nothing arms it for when the reply is due, or `RECHECK` at most
//! (a switch thrown meanwhile, `slow(0)` or `down()`, is seen within that): a poll loop sleeps
//! instead of spinning, and the event loop stays free. Elsewhere it is a pipe holding one byte,
//! always readable, and `recv` naps instead (`NAPS`). No system call on the usual path: the
//! timer is armed only when what it says changes.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// The longest a poll loop sleeps before it looks at a connection with nothing to read again.
pub const RECHECK: Duration = Duration::from_millis(5);

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use super::*;
    use rustix::time::{
        timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags,
        TimerfdTimerFlags, Timespec,
    };

    /// Whether `recv` naps while nothing is due (no: the timer wakes the poll loops).
    pub const NAPS: bool = false;

    pub struct Token {
        timer: OwnedFd,
        /// Armed to have expired (readable until re-armed).
        ready: bool,
    }

    impl Token {
        pub fn new() -> io::Result<Token> {
            let flags = TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK;
            let timer = timerfd_create(TimerfdClockId::Monotonic, flags)?;
            let mut t = Token {
                timer,
                ready: false,
            };
            t.arm(Duration::ZERO)?;
            t.ready = true;
            Ok(t)
        }

        fn arm(&self, after: Duration) -> io::Result<()> {
            let after = after.max(Duration::from_nanos(1)); // zero would disarm it
            let spec = Itimerspec {
                it_interval: Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                // (Written out: the fake depends on nothing else in the crate.)
                it_value: Timespec {
                    tv_sec: after.as_secs() as _,
                    tv_nsec: after.subsec_nanos() as _,
                },
            };
            timerfd_settime(&self.timer, TimerfdTimerFlags::empty(), &spec)?;
            Ok(())
        }

        /// Readable from now on.
        pub fn set_ready(&mut self) {
            if !self.ready {
                self.ready = self.arm(Duration::ZERO).is_ok();
            }
        }

        /// Readable after `d`, not before (a failure leaves it readable: a spin, not a hang).
        pub fn wake_in(&mut self, d: Duration) {
            self.ready = self.arm(d.min(RECHECK)).is_err();
        }

        pub fn fd(&self) -> BorrowedFd<'_> {
            self.timer.as_fd()
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use super::*;

    /// Whether `recv` naps while nothing is due (yes: the pipe is always readable).
    pub const NAPS: bool = true;

    pub struct Token {
        read: OwnedFd,
        _write: OwnedFd,
    }

    impl Token {
        pub fn new() -> io::Result<Token> {
            let (read, write) = rustix::pipe::pipe()?;
            for fd in [&read, &write] {
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
            }
            rustix::io::write(&write, b"x")?;
            Ok(Token {
                read,
                _write: write,
            })
        }

        pub fn set_ready(&mut self) {}

        pub fn wake_in(&mut self, _d: Duration) {}

        pub fn fd(&self) -> BorrowedFd<'_> {
            self.read.as_fd()
        }
    }
}

pub use imp::{Token, NAPS};
