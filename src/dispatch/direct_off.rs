//! `dispatch::direct` where the loop's thread drives no request itself (every system but
//! Linux): the same interface as `direct.rs`, but `start` always gives the request back, so
//! every request of the asyncio client goes to the workers (`dispatch::Dispatcher`).
//!
//! Why: `direct.rs` watches a request's connections through an epoll descriptor with a timerfd
//! in it, both Linux's. macOS's counterpart, kqueue with an `EVFILT_TIMER`, is reached through
//! rustix's `kevent`, an `unsafe fn`, and the library allows only two audited `unsafe` blocks
//! (CONTRIBUTING).
//! A lone request on an idle loop then costs two cross-thread wake-ups more (docs/aio.md);
//! the results are the same.
//!
//! Uses `request` only; owns no descriptor and no thread.

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use super::request::Request;
use crate::client::op::Outcome;
use crate::client::Client;

/// As in `direct.rs`; only `Waiting` is ever made here.
pub enum Progress<P> {
    Waiting,
    Done(P, Outcome),
    HandOff(Box<HandOff<P>>),
}

/// As in `direct.rs`; never made here (it cannot be: it holds an `Infallible`).
pub struct HandOff<P> {
    never: std::convert::Infallible,
    _payload: PhantomData<P>,
}

impl<P: Send + 'static> HandOff<P> {
    pub fn spawn(
        self,
        _client: &std::sync::Arc<Client>,
        _done: impl FnOnce(P, Outcome) + Send + 'static,
    ) -> Result<(), (Option<P>, std::io::Error)> {
        match self.never {}
    }
}

/// As in `direct.rs` (the counts stay zero).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdleWaits {
    pub moved_on: u64,
    pub woken: u64,
    pub timed_out: u64,
}

/// No descriptor: `fileno()` is -1, which `fastmc.aio.Client._attach_loop` leaves unwatched.
pub struct NoFd;

impl AsRawFd for NoFd {
    fn as_raw_fd(&self) -> RawFd {
        -1
    }
}

/// A direct request that never starts.
pub struct Direct<P> {
    pub begun: u64,
    pub handed_off: u64,
    pub idle: IdleWaits,
    _payload: PhantomData<P>,
}

impl<P> Direct<P> {
    pub fn new() -> std::io::Result<Direct<P>> {
        Ok(Direct {
            begun: 0,
            handed_off: 0,
            idle: IdleWaits::default(),
            _payload: PhantomData,
        })
    }

    pub fn fd(&self) -> NoFd {
        NoFd
    }

    /// Always `Err`: the workers run it.
    // As on Linux: the request comes back by value (boxing it would cost an allocation).
    #[allow(clippy::result_large_err)]
    pub fn start(
        &mut self,
        _client: &Client,
        req: Request,
        payload: P,
        _watch: bool,
    ) -> Result<Progress<P>, (Request, P)> {
        Err((req, payload))
    }

    /// Never reached (nothing starts); nothing to wait for.
    pub fn wait_here(
        &mut self,
        _client: &Client,
        _selector: std::os::fd::BorrowedFd<'_>,
        _until: Instant,
    ) -> Progress<P> {
        Progress::Waiting
    }

    /// Never called (no descriptor is watched).
    pub fn ready(&mut self, _client: &Client) -> Progress<P> {
        Progress::Waiting
    }
}
