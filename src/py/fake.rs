//! `fastmc.testing`'s fake server as Python sees its brain (`crate::fake`): the clock
//! (`fake_clock`), one server's store and switches (`fake_core`), and one socket connection's
//! protocol state (`fake_session`), which `python/fastmc/testing/_server.py` feeds what its
//! loopback socket receives. Registering a core makes fastmc's own connections to its address
//! in-process.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::fake::session::Session;
use crate::fake::store::Clock;
use crate::fake::Fake;

/// The time fake servers live in (see `fastmc.testing.FakeClock`, which wraps it).
#[pyclass(name = "fake_clock", module = "_fastmc", frozen)]
pub struct PyFakeClock(Arc<Clock>);

#[pymethods]
impl PyFakeClock {
    #[new]
    #[pyo3(signature = (start=None, frozen=true))]
    fn new(start: Option<f64>, frozen: bool) -> Self {
        PyFakeClock(Arc::new(Clock::new(start, frozen)))
    }

    fn time(&self) -> f64 {
        self.0.time()
    }

    fn now(&self) -> i64 {
        self.0.now()
    }

    fn unix_now(&self) -> i64 {
        self.0.unix_now()
    }

    fn advance(&self, seconds: f64) -> PyResult<()> {
        if seconds.is_nan() || seconds < 0.0 {
            return Err(PyValueError::new_err("a clock only moves forward"));
        }
        self.0.advance(seconds);
        Ok(())
    }

    #[getter]
    fn get_frozen(&self) -> bool {
        self.0.frozen()
    }

    #[setter]
    fn set_frozen(&self, frozen: bool) {
        self.0.set_frozen(frozen);
    }
}

/// One fake server's store and failure switches.
#[pyclass(name = "fake_core", module = "_fastmc", frozen)]
pub struct PyFakeCore(Arc<Fake>);

#[pymethods]
impl PyFakeCore {
    #[new]
    fn new(clock: &PyFakeClock, item_size_max: usize, version: &str) -> Self {
        let fake = Fake::new(Arc::clone(&clock.0), item_size_max, version.as_bytes());
        PyFakeCore(Arc::new(fake))
    }

    /// A new connection's protocol state.
    fn session(&self) -> PyFakeSession {
        PyFakeSession {
            fake: Arc::clone(&self.0),
            session: Mutex::new(Session::new()),
        }
    }

    /// Serve fastmc's connections to `host:port` in-process.
    fn register(&self, host: &str, port: u16) {
        crate::fake::register(host, port, &self.0);
    }

    fn unregister(&self, host: &str, port: u16) {
        crate::fake::unregister(host, port);
    }

    /// Every live item: key -> (value, flags, seconds left or None for no expiry).
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let mut st = self.0.store();
        let now = st.t.now();
        let keys: Vec<Vec<u8>> = st.items.keys().cloned().collect();
        for k in keys {
            if let Some(it) = st.get(&k) {
                let ttl = (it.exptime != 0).then_some(it.exptime - now);
                let v = (PyBytes::new(py, &it.value), it.flags, ttl);
                out.set_item(PyBytes::new(py, &k), v)?;
            }
        }
        Ok(out)
    }

    /// Forget every item at once.
    fn flush(&self) {
        self.0.store().items.clear();
    }

    #[getter]
    fn get_out_of_memory(&self) -> bool {
        self.0.store().out_of_memory
    }

    #[setter]
    fn set_out_of_memory(&self, on: bool) {
        self.0.store().out_of_memory = on;
    }

    /// Hold every in-process reply `seconds` (infinite: never answer).
    fn slow(&self, seconds: f64) {
        self.0.set_delay(seconds);
    }

    /// Close every in-process connection and refuse new ones (`False`: accept them again).
    fn set_down(&self, down: bool) {
        self.0.set_down(down);
    }

    fn drop_connections(&self) {
        self.0.drop_connections();
    }

    /// In-process connections opened so far.
    #[getter]
    fn accepted(&self) -> u64 {
        self.0.accepted()
    }
}

/// One socket connection's protocol state.
#[pyclass(name = "fake_session", module = "_fastmc", frozen)]
pub struct PyFakeSession {
    fake: Arc<Fake>,
    session: Mutex<Session>,
}

#[pymethods]
impl PyFakeSession {
    /// The replies to every complete command after `data` is appended.
    fn feed<'py>(&self, py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
        let mut out = Vec::new();
        self.fake.handle(&mut self.session.lock(), data, &mut out);
        PyBytes::new(py, &out)
    }

    /// The connection is to be closed (`quit`, or not a request).
    #[getter]
    fn closing(&self) -> bool {
        self.session.lock().closing
    }
}
