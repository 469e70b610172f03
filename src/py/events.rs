//! Server state changes handed to Python: logged on the `fastmc` logger and passed to the
//! callbacks registered with `Client.on`. Delivered by `io::detached` after the core call
//! returns (and by the asyncio client's `drain`), attached, with no core lock held and never on
//! a worker or I/O path: a slow or failing callback delays only the call that delivers it, and
//! its exception is logged and swallowed. Uses `client::{EventKind, ServerEvent}`.

use parking_lot::Mutex;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::client::{Client, EventKind, ServerEvent};

/// The event names `Client.on` takes.
pub const NAMES: [(&str, EventKind); 6] = [
    ("server_down", EventKind::Down),
    ("server_up", EventKind::Up),
    ("server_ejected", EventKind::Ejected),
    ("server_rejoined", EventKind::Rejoined),
    ("server_added", EventKind::Added),
    ("server_removed", EventKind::Removed),
];

fn name_of(kind: EventKind) -> &'static str {
    NAMES
        .iter()
        .find(|(_, k)| *k == kind)
        .map_or("server_event", |(n, _)| *n)
}

/// Registered callbacks.
#[derive(Default)]
pub struct Listeners(Mutex<Vec<(EventKind, Py<PyAny>)>>);

impl Listeners {
    pub fn add(&self, kind: EventKind, callback: Py<PyAny>) {
        self.0.lock().push((kind, callback));
    }

    /// Remove `callback` from `kind`; whether it was registered.
    pub fn remove(&self, py: Python<'_>, kind: EventKind, callback: &Bound<'_, PyAny>) -> bool {
        let mut l = self.0.lock();
        let before = l.len();
        l.retain(|(k, cb)| !(*k == kind && cb.bind(py).is(callback)));
        l.len() != before
    }

    fn for_kind(&self, py: Python<'_>, kind: EventKind) -> Vec<Py<PyAny>> {
        self.0
            .lock()
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, cb)| cb.clone_ref(py))
            .collect()
    }
}

/// Log the core's pending events and call their listeners. Never fails: a problem here (a
/// callback that raises, logging that fails) is logged if possible and swallowed.
#[inline(always)]
pub fn deliver(py: Python<'_>, listeners: &Listeners, core: &Client) {
    if !core.events_pending() {
        return;
    }
    let events = core.take_events();
    if events.is_empty() {
        return;
    }
    let _ = deliver_all(py, listeners, events);
}

/// The "fastmc" logger: `fastmc._log`'s, which adds the library's `NullHandler` when it is
/// first imported (here, at the first event: `import fastmc` does not import logging); a
/// build imported under another package name gets the logger alone.
fn logger(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    match py.import("fastmc._log") {
        Ok(m) => m.getattr(intern!(py, "LOGGER")),
        Err(_) => py
            .import("logging")?
            .call_method1(intern!(py, "getLogger"), ("fastmc",)),
    }
}

fn deliver_all(py: Python<'_>, listeners: &Listeners, events: Vec<ServerEvent>) -> PyResult<()> {
    let logger = logger(py)?;
    for ev in events {
        let name = name_of(ev.kind);
        let server = ev.address.display_name();
        let (level, text) = match ev.kind {
            EventKind::Down => (30, format!("server {server} marked down")),
            EventKind::Ejected => (30, format!("server {server} ejected from the ring")),
            EventKind::Up => (20, format!("server {server} is answering again")),
            EventKind::Rejoined => (20, format!("server {server} is back in the ring")),
            EventKind::Added => (20, format!("server {server} added to the server list")),
            EventKind::Removed => (20, format!("server {server} removed from the server list")),
        };
        let text = match &ev.detail {
            Some(d) => format!("{text}: {d}"),
            None => text,
        };
        logger.call_method1(intern!(py, "log"), (level, text))?;
        for cb in listeners.for_kind(py, ev.kind) {
            if let Err(e) = cb
                .bind(py)
                .call1((server.as_str(), name, ev.detail.as_deref()))
            {
                let kw = PyDict::new(py);
                kw.set_item("exc_info", e.into_value(py))?;
                logger.call_method(
                    intern!(py, "error"),
                    (format!("fastmc {name} callback raised"),),
                    Some(&kw),
                )?;
            }
        }
    }
    Ok(())
}
