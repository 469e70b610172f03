//! The native client class's state, `PyClient` (`#[pyclass]`): the core handle, the protocol,
//! the pickle protocol, the serializer overrides, the value policy and what stores mirror of it,
//! the behavior flags mirrored without a core lock, the event listeners; and the little every
//! family needs of it (`core`, `flags`, `values`, `not_initialized`). Its method table is
//! `mod.rs`. Uses `py::values`, `py::events`, `py::errors` and the core `Client`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::prelude::*;

use super::init::BehaviorFlags;
use crate::client::Client;
use crate::py::errors::plain_error;
use crate::py::values::ValuePolicy;

#[pyclass(name = "client", module = "_pylibmc", subclass, frozen, dict, weakref)]
pub struct PyClient {
    pub(in crate::py) core: RwLock<Option<Arc<Client>>>,
    pub(in crate::py) binary: AtomicBool,
    pub(in crate::py) pickle_protocol: AtomicI64,
    pub(in crate::py) user_serialize: AtomicBool,
    pub(in crate::py) user_deserialize: AtomicBool,
    /// What the codec does with pickles (`py::values`), set by `__init__` and `clone`.
    pub(in crate::py) values: RwLock<Arc<ValuePolicy>>,
    /// The policy's `compression.write_zstd` and `min_len`, mirrored by `set_values` so that a
    /// store looks the policy up only when it compresses with zstd.
    pub(in crate::py) write_zstd: AtomicBool,
    pub(in crate::py) zstd_min_len: AtomicU32,
    /// Behavior `max_inflate` (`usize::MAX`: no limit), applied before any deserializer.
    pub(in crate::py) max_inflate: AtomicUsize,
    /// `BehaviorFlags` bits, mirrored from the core's behaviors by `init` whenever they change.
    flags: AtomicU8,
    /// Callbacks for server state changes (`on`).
    pub(crate) listeners: crate::py::events::Listeners,
}

impl PyClient {
    /// The core handle. Its slot lock is held only to clone the `Arc` (see `io`).
    pub(in crate::py) fn core(&self) -> PyResult<Arc<Client>> {
        self.core.read().clone().ok_or_else(not_initialized)
    }

    /// The behavior flags as last set (see `BehaviorFlags`), without a core lock.
    pub(crate) fn flags(&self) -> PyResult<BehaviorFlags> {
        BehaviorFlags::from_bits(self.flags.load(Ordering::Relaxed)).ok_or_else(not_initialized)
    }

    pub(super) fn set_flags(&self, flags: BehaviorFlags) {
        self.flags.store(flags.bits(), Ordering::Relaxed);
    }

    /// The value policy (a shared handle: its lock is held only to clone the `Arc`).
    pub(crate) fn values(&self) -> Arc<ValuePolicy> {
        self.values.read().clone()
    }

    /// Set the value policy (`__init__`, `clone`) and mirror what stores read of it.
    pub(in crate::py) fn set_values(&self, policy: ValuePolicy) {
        let c = &policy.compression;
        self.write_zstd.store(c.write_zstd, Ordering::Relaxed);
        self.zstd_min_len.store(c.min_len, Ordering::Relaxed);
        *self.values.write() = Arc::new(policy);
    }
}

impl PyClient {
    /// `on`: call `callback` on `event` (a name in `py::events::NAMES`).
    pub(super) fn add_listener(&self, event: &str, callback: Py<PyAny>) -> PyResult<()> {
        self.listeners.add(event_kind(event)?, callback);
        Ok(())
    }

    /// `off`: stop calling `callback` on `event`; whether it was registered.
    pub(super) fn remove_listener(
        &self,
        py: Python<'_>,
        event: &str,
        callback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        Ok(self.listeners.remove(py, event_kind(event)?, callback))
    }

    /// A client before `__init__`.
    pub(crate) fn empty() -> PyClient {
        PyClient {
            core: RwLock::new(None),
            binary: AtomicBool::new(false),
            pickle_protocol: AtomicI64::new(-1),
            user_serialize: AtomicBool::new(false),
            user_deserialize: AtomicBool::new(false),
            values: RwLock::new(Arc::new(ValuePolicy::default())),
            write_zstd: AtomicBool::new(false),
            zstd_min_len: AtomicU32::new(0),
            max_inflate: AtomicUsize::new(DEFAULT_MAX_INFLATE),
            flags: AtomicU8::new(0),
            listeners: Default::default(),
        }
    }
}

fn event_kind(event: &str) -> PyResult<crate::client::EventKind> {
    crate::py::events::NAMES
        .iter()
        .find(|(n, _)| *n == event)
        .map(|(_, k)| *k)
        .ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "unknown event {event:?}: use server_down, server_up, server_ejected, \
                 server_rejoined, server_added or server_removed"
            ))
        })
}

/// What a compressed value may inflate to by default: 64 MiB. memcached's items are 1 MiB by
/// default (1 GiB at most with `-I`), zlib inflates at most about 1,000 times, and real cached
/// text and pickles inflate 2 to 20 times; a value past this is a bomb more likely than a page.
pub(crate) const DEFAULT_MAX_INFLATE: usize = 64 << 20;

pub(in crate::py) fn not_initialized() -> PyErr {
    plain_error("client is not initialized (call __init__ first)")
}
