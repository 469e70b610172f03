//! The native client class's state, `PyClient` (`#[pyclass]`): the core handle, the protocol,
//! the pickle protocol, the serializer overrides, the value policy and what stores mirror of it,
//! the behavior flags mirrored without a core lock, the event listeners; and the little every
//! family needs of it (`core`, `flags`, `values`, `not_initialized`). Its method table is
//! `mod.rs`. Uses `py::values`, `py::events`, `py::errors` and the core `Client`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::prelude::*;

use crate::behaviors::Behaviors;
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
    #[inline(always)]
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

/// The behavior flags the methods need around their I/O, mirrored in the client object so that no
/// method reads the core's behaviors (a core lock, and a clone of them) while attached. Every
/// change of the core's behaviors goes through `init.rs` (`init`, `clone`, `set_behaviors`), which
/// stores the mirror from the `Behaviors` the core keeps; `set_behaviors` does it under the core's
/// lock, so concurrent calls leave the mirror as they leave the core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BehaviorFlags {
    /// `cas`: gets and cas are allowed.
    pub cas: bool,
    /// `verify_keys`: a key the core refuses is a failed store or delete, not an error.
    pub verify_keys: bool,
    /// fastmc's `get_multi_raise_on_error`.
    pub get_multi_raise_on_error: bool,
    /// `_noreply`: every write is a `noreply` one.
    pub noreply: bool,
}

impl BehaviorFlags {
    pub(in crate::py) fn of(b: &Behaviors) -> Self {
        BehaviorFlags {
            cas: b.cas,
            verify_keys: b.verify_keys,
            get_multi_raise_on_error: b.get_multi_raise_on_error,
            noreply: b.noreply,
        }
    }

    /// Packed for an atomic; bit 3 says the client is initialized (0 is "no flags yet").
    pub(in crate::py) fn bits(self) -> u8 {
        8 | u8::from(self.cas)
            | u8::from(self.verify_keys) << 1
            | u8::from(self.get_multi_raise_on_error) << 2
            | u8::from(self.noreply) << 4
    }

    /// `None` before the client was initialized.
    pub(in crate::py) fn from_bits(bits: u8) -> Option<Self> {
        (bits & 8 != 0).then_some(BehaviorFlags {
            cas: bits & 1 != 0,
            verify_keys: bits & 2 != 0,
            get_multi_raise_on_error: bits & 4 != 0,
            noreply: bits & 16 != 0,
        })
    }
}
