//! Fork detection without a system call per operation: a process-wide generation number that a
//! `pthread_atfork` child handler increments. A connection (or a worker set) records the
//! generation it was made in; a different generation means this process is a forked child and
//! must not touch it. The handler runs for every `fork()` made through the C library, which is
//! how CPython's `os.fork`, `multiprocessing` and uWSGI's plain C `fork()` all fork; Python's
//! `os.register_at_fork` hooks would miss the last.
//!
//! The registration below is one of the library's two `unsafe` blocks (the other is in
//! `py/aio/idle_wait.rs`); the test below has three more, for `fork` and its pipe. Uses `libc`
//! only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Runs in the child right after a fork: only an atomic add (async-signal-safe).
extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

#[allow(unsafe_code)]
fn register() {
    // SAFETY: `pthread_atfork` only stores the three function pointers; the one given is a
    // plain `extern "C" fn` that never unwinds and touches nothing but a static atomic, so it is
    // sound to call in a freshly forked child. Registration cannot be undone, and the handler
    // stays valid for the life of the process (it is a static function of this library, which
    // CPython never unloads). A failure (ENOMEM) leaves fork detection to the pid check below.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    if rc != 0 {
        FALLBACK_TO_PID.store(true, Ordering::Relaxed);
    }
}

/// Set when the handler could not be registered: then the generation is the process id.
static FALLBACK_TO_PID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This process's generation: equal for everything made since the last fork.
#[inline]
pub fn generation() -> u64 {
    REGISTER.call_once(register);
    if FALLBACK_TO_PID.load(Ordering::Relaxed) {
        return u64::from(std::process::id()) << 32;
    }
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_sees_a_new_generation() {
        let before = generation();
        assert_eq!(generation(), before);
        let mut fds = [0i32; 2];
        #[allow(unsafe_code)]
        // SAFETY: a test: pipe and fork from libc, the child only writes one byte and exits.
        let pid = unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            libc::fork()
        };
        if pid == 0 {
            let changed = u8::from(generation() != before);
            #[allow(unsafe_code)]
            // SAFETY: the child writes one byte to the pipe and exits without unwinding.
            unsafe {
                libc::write(fds[1], [changed].as_ptr().cast(), 1);
                libc::_exit(0);
            }
        }
        let mut got = [0u8; 1];
        #[allow(unsafe_code)]
        // SAFETY: reading one byte from the pipe the child writes, then reaping it.
        unsafe {
            assert_eq!(libc::read(fds[0], got.as_mut_ptr().cast(), 1), 1);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_eq!(got[0], 1);
        assert_eq!(generation(), before);
    }
}
