//! Placement by a group key (`server_key=`, libmemcached's `*_by_key` functions): while a call
//! runs with a group key pinned on its thread, every key it plans goes to the server the group
//! key maps to (with the namespace when `_hash_with_prefix_key` is on, as for any key), not to
//! its own. The binding pins the group for the length of a method (`pin`); the asyncio client's
//! requests carry it (`current`) to the worker that runs them, which pins it again there.
//! `Client::snapshot` hands such a call a snapshot pinned to that server (`Snapshot::pinned`).
//! No I/O.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// How many `Pinned` with a group key live in the process, on any thread: while none does, no
/// call asks its thread (a thread-local costs a library a function call to find).
static PINNED_ANYWHERE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static GROUP: RefCell<Option<Arc<[u8]>>> = const { RefCell::new(None) };
    /// Whether `GROUP` holds a key: what every call asks, in a cell with nothing to drop (the
    /// cheapest thread-local there is), so that a call without a group pays one load.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// The group key pinned on this thread while it lives; the one before comes back when it is
/// dropped (a value's pickling may run another call of the client on the same thread).
pub struct Pinned {
    before: Option<Arc<[u8]>>,
    /// Whether this pin holds a group (counted in `PINNED_ANYWHERE` while it lives).
    counted: bool,
}

/// Pin `group` on this thread (`None`, or an empty key: no group, each key placed by itself).
pub fn pin(group: Option<Arc<[u8]>>) -> Pinned {
    let group = group.filter(|g| !g.is_empty());
    let counted = group.is_some();
    if counted {
        PINNED_ANYWHERE.fetch_add(1, Ordering::Relaxed);
    }
    ACTIVE.with(|a| a.set(counted));
    let before = GROUP.with(|g| g.replace(group));
    Pinned { before, counted }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let before = self.before.take();
        ACTIVE.with(|a| a.set(before.is_some()));
        GROUP.with(|g| *g.borrow_mut() = before);
        if self.counted {
            PINNED_ANYWHERE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// `pin(group)` where it changes anything: a group to pin, or one pinned already to take off
/// (nothing to do, and nothing to undo, for the usual request without either).
#[inline]
pub fn pin_if_needed(group: &Option<Arc<[u8]>>) -> Option<Pinned> {
    (group.is_some() || pinned()).then(|| pin(group.clone()))
}

/// The group key pinned on this thread, if any.
#[inline]
pub fn current() -> Option<Arc<[u8]>> {
    if !pinned() {
        return None;
    }
    GROUP.with(|g| g.borrow().clone())
}

/// Whether a group key is pinned on this thread.
#[inline]
pub fn pinned() -> bool {
    // A group pinned on this thread is counted there before `ACTIVE` is set, by this thread:
    // this thread's own load sees it.
    PINNED_ANYWHERE.load(Ordering::Relaxed) != 0 && active_here()
}

/// `ACTIVE` of this thread. Not inlined: the compiler would find the thread-local's address
/// (a call, in a library) before the test that makes it unneeded.
#[inline(never)]
fn active_here() -> bool {
    ACTIVE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_nests_and_comes_off_in_order() {
        assert!(current().is_none());
        {
            let _a = pin(Some(b"user:1".as_slice().into()));
            assert_eq!(current().as_deref(), Some(b"user:1".as_slice()));
            {
                let _b = pin(None);
                assert!(!pinned());
                let _c = pin(Some(b"".as_slice().into()));
                assert!(!pinned());
            }
            assert_eq!(current().as_deref(), Some(b"user:1".as_slice()));
        }
        assert!(!pinned());
    }

    #[test]
    fn a_pin_on_another_thread_is_not_this_threads() {
        let _a = pin(Some(b"user:1".as_slice().into()));
        std::thread::spawn(|| {
            assert!(!pinned());
            assert!(current().is_none());
            let _b = pin(Some(b"user:2".as_slice().into()));
            assert_eq!(current().as_deref(), Some(b"user:2".as_slice()));
        })
        .join()
        .unwrap();
        assert_eq!(current().as_deref(), Some(b"user:1".as_slice()));
    }
}
