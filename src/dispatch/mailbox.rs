//! Outcomes on their way from worker threads to an event loop's thread, and the file descriptor
//! that wakes that loop: a worker `post`s, and the loop, which watches `fd` (asyncio's
//! `add_reader`), `take`s everything posted so far. One byte is written per wake-up, not per
//! outcome: a hundred outcomes that arrive while the loop is busy cost one `write` and one
//! `read`. No interpreter is needed to post (the workers never take the GIL).
//!
//! Uses `rustix` (pipe, non-blocking read and write); owns no threads.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use rustix::io::{fcntl_setfd, ioctl_fionbio, FdFlags};

pub struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    /// A wake-up byte is in the pipe (or about to be): later posts need not write another.
    armed: AtomicBool,
    read: OwnedFd,
    write: OwnedFd,
}

impl<T> Mailbox<T> {
    pub fn new() -> std::io::Result<Mailbox<T>> {
        let (read, write) = rustix::pipe::pipe()?;
        for fd in [&read, &write] {
            ioctl_fionbio(fd, true)?;
            fcntl_setfd(fd, FdFlags::CLOEXEC)?;
        }
        Ok(Mailbox {
            items: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            read,
            write,
        })
    }

    /// The descriptor to watch for reading.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Hand `item` to the loop and wake it if it is not already woken.
    pub fn post(&self, item: T) {
        self.items.lock().push(item);
        if !self.armed.swap(true, Ordering::AcqRel) {
            // A full pipe already holds a wake-up byte: nothing is lost if this write fails.
            let _ = rustix::io::write(&self.write, &[1u8]);
        }
    }

    /// Everything posted so far. Clears the wake-up first, so that an item posted while this
    /// runs either is taken now or writes a new byte.
    pub fn take(&self) -> Vec<T> {
        let mut buf = [0u8; 64];
        while matches!(rustix::io::read(&self.read, &mut buf), Ok(n) if n > 0) {}
        self.armed.store(false, Ordering::Release);
        std::mem::take(&mut *self.items.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_post_is_taken_once_and_wakes_the_reader() {
        let mb = Arc::new(Mailbox::new().unwrap());
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let mb = mb.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        mb.post(t * 1000 + i);
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 4000 {
            let mut fds = [rustix::event::PollFd::new(
                &mb.read,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::event::Timespec {
                tv_sec: 5,
                tv_nsec: 0,
            };
            // Every item not yet taken has a wake-up byte behind it.
            assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1);
            got.extend(mb.take());
        }
        for w in writers {
            w.join().unwrap();
        }
        got.extend(mb.take());
        got.sort_unstable();
        assert_eq!(got, (0..4000).collect::<Vec<_>>());
    }
}
