//! A call's way through the asyncio client: `submit` makes its future and sends its request,
//! in its keys' order (`order`), to the loop's own thread when it is alone (`dispatch::direct`,
//! waiting inside the call while the loop is idle: `idle_wait`) or to the workers; `progress`,
//! `drain` and `resolve` turn outcomes into results with `finish` and settle the futures.
//!
//! Uses `dispatch`, `order`, `finish`, `future` and `py::io` (the idle wait, detached).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use pyo3::prelude::*;

use super::future::{self, PyAioFuture};
use super::idle_wait::IdleWait;
use super::order;
use super::PyAioClient;
use crate::client::op::Outcome;
use crate::dispatch::direct::Direct;
use crate::dispatch::direct::Progress;
use crate::dispatch::mailbox::Mailbox;
use crate::dispatch::request::Request;
use crate::dispatch::Done;
use crate::py::client::method::{Finishing, Submitted};
use crate::py::errors;

/// A request on its way: the future to resolve and how to build its result.
pub(super) struct Pending {
    fut: Py<PyAioFuture>,
    finish: Box<dyn Finishing>,
    /// Its place in the per-key order, given up when it is dropped (`order`).
    ticket: Option<Ticket>,
}

/// The per-key order of a client's requests, a request waiting in it, and a place in it.
pub(super) type Order = Mutex<order::KeyOrder<(Request, Pending)>>;
pub(super) type Ticket = order::Ticket<(Request, Pending)>;

pub(super) type Delivery = (Pending, Option<Outcome>);

pub(super) type Loopside = Arc<Mutex<Direct<Pending>>>;

/// A binding's parts a call uses: the mailbox, the direct request and its idle wait.
pub(super) type Sides = (Arc<Mailbox<Delivery>>, Loopside, Option<Arc<IdleWait>>);

impl PyAioClient {
    /// The future for a call (`py::methods`: each asyncio method's body).
    pub(crate) fn submit(slf: &Bound<'_, Self>, prepared: Submitted) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (running, (mailbox, direct, idle)) = Self::future(slf)?;
        let fut = match prepared {
            Submitted::Ready(v) => future::ready(py, running.unbind(), v)?,
            Submitted::Submit(req, finish) => {
                let fut = Bound::new(py, PyAioFuture::new(running.clone().unbind()))?;
                let dispatch = Self::dispatcher(slf)?;
                let pending = Pending {
                    fut: fut.clone().unbind(),
                    finish,
                    ticket: None,
                };
                // After an earlier request of one of its keys: it waits for that one's outcome.
                let (hashes, access) = order::keys_of(&req);
                let this = slf.get();
                let admitted = this.order.lock().admit(hashes, access, (req, pending));
                let (req, pending) = match admitted {
                    order::Admitted::Parked => {
                        this.pending.fetch_add(1, Ordering::Relaxed);
                        return Ok(fut.into_any().unbind());
                    }
                    order::Admitted::Go(id, (req, mut pending)) => {
                        pending.ticket = this.ticket(id);
                        (req, pending)
                    }
                };
                // While the loop is idle, a lone call waits for the reply itself (`idle_wait`),
                // until a deadline taken now; a loop whose internals are not as expected is
                // waited on as usual. (Before the count below: nothing here may leave it
                // raised.)
                let idle = idle
                    .filter(|_| slf.get().pending.load(Ordering::Relaxed) == 0)
                    .and_then(|q| Some((Instant::now() + q.budget(&running).ok()??, q)));
                // Alone: on this thread (see `dispatch::direct`); else to the workers, where
                // it travels with the others.
                let alone = slf.get().pending.fetch_add(1, Ordering::Relaxed) == 0;
                let idle = idle.filter(|_| alone);
                let core = dispatch.client();
                // Its own statement: the lock is let go before `progress` (which may call
                // listeners, which may call this client).
                let started = if alone {
                    direct.lock().start(core, req, pending, idle.is_none())
                } else {
                    Err((req, pending))
                };
                match (started, idle) {
                    (Ok(Progress::Waiting), Some((until, idle))) => {
                        let progress = crate::py::io::released(py, || {
                            direct.lock().wait_here(core, idle.selector(), until)
                        });
                        Self::progress(slf, core, &mailbox, progress, false)?
                    }
                    (Ok(progress), _) => Self::progress(slf, core, &mailbox, progress, false)?,
                    (Err((req, pending)), _) => {
                        dispatch.submit(req, Done::new(move |o| mailbox.post((pending, o))))
                    }
                }
                fut
            }
        };
        Ok(fut.into_any().unbind())
    }

    /// Act on where the direct request stands: resolve it, or hand it to a thread of its own.
    /// `inline`: called from the loop's reader callback (see `future`).
    pub(super) fn progress(
        slf: &Bound<'_, Self>,
        core: &Arc<crate::client::Client>,
        mailbox: &Arc<Mailbox<Delivery>>,
        progress: Progress<Pending>,
        inline: bool,
    ) -> PyResult<()> {
        match progress {
            Progress::Waiting => Ok(()),
            Progress::Done(pending, outcome) => {
                let woken = Self::resolve(slf, pending, Some(outcome));
                Self::pump(slf, mailbox);
                let r = future::wake(slf.py(), woken.into_iter().collect(), inline);
                let base = slf.as_super().get();
                crate::py::events::deliver(slf.py(), &base.listeners, core);
                r
            }
            Progress::HandOff(h) => {
                let theirs = mailbox.clone();
                let started = h.spawn(core, move |pending, outcome| {
                    theirs.post((pending, Some(outcome)));
                });
                // A future is never left waiting: without a thread, it gets the error.
                if let Err((Some(pending), e)) = started {
                    let err = errors::plain_error(format!("cannot start an I/O thread: {e}"));
                    slf.get().pending.fetch_sub(1, Ordering::Relaxed);
                    let woken = PyAioFuture::settle(pending.fut.bind(slf.py()), Err(err));
                    drop(pending);
                    Self::pump(slf, mailbox);
                    future::wake(slf.py(), woken.into_iter().collect(), inline)?;
                }
                Ok(())
            }
        }
    }

    /// A ticket in this client's order.
    pub(super) fn ticket(&self, id: u64) -> Option<Ticket> {
        order::Ticket::new(&self.order, id)
    }

    /// Send the requests whose turn came (their earlier requests of the same keys were
    /// resolved) to the workers. Called on the loop's thread after outcomes are resolved.
    pub(super) fn pump(slf: &Bound<'_, Self>, mailbox: &Arc<Mailbox<Delivery>>) {
        let this = slf.get();
        loop {
            let ready = this.order.lock().take_ready();
            if ready.is_empty() {
                return;
            }
            let dispatch = Self::dispatcher(slf).ok();
            for (id, (req, mut pending)) in ready {
                pending.ticket = this.ticket(id);
                let mailbox = mailbox.clone();
                let done = Done::new(move |o| mailbox.post((pending, o)));
                match &dispatch {
                    Some(d) => d.submit(req, done),
                    // Closed: the request is answered as unanswered (`Done`'s drop).
                    None => drop(done),
                }
            }
        }
    }

    /// Resolve one future with its outcome, unless it was cancelled meanwhile: what to wake
    /// (`future::wake`).
    pub(super) fn resolve<'py>(
        slf: &Bound<'py, Self>,
        p: Pending,
        outcome: Option<Outcome>,
    ) -> Option<future::Woken<'py>> {
        let py = slf.py();
        slf.get().pending.fetch_sub(1, Ordering::Relaxed);
        let fut = p.fut.bind(py);
        if fut.get().is_done() {
            return None;
        }
        let r = match outcome {
            Some(o) => p.finish.reply(slf.as_super(), o),
            None => Err(errors::plain_error(
                "the client was closed before this request ran",
            )),
        };
        PyAioFuture::settle(fut, r)
    }

    /// `f` of the direct request's state (`T::default()` before the first loop), read without
    /// the interpreter: the loop's thread may hold the lock while it waits in a call.
    pub(super) fn read_direct<T: Default + Send>(
        slf: &Bound<'_, Self>,
        f: impl FnOnce(&Direct<Pending>) -> T + Send,
    ) -> T {
        let direct = slf.get().binding.lock().as_ref().map(|b| b.direct.clone());
        direct.map_or_else(T::default, |d| {
            crate::py::io::released(slf.py(), || f(&d.lock()))
        })
    }

    /// Serve the direct request's connections (its `PyReader`: the epoll descriptor is
    /// readable).
    pub(super) fn direct_ready(slf: &Bound<'_, Self>) -> PyResult<()> {
        let bound = slf
            .get()
            .binding
            .lock()
            .as_ref()
            .map(|b| (b.direct.clone(), b.mailbox.clone()));
        let Some((direct, mailbox)) = bound else {
            return Ok(());
        };
        let core = slf.as_super().get().core()?;
        let progress = direct.lock().ready(&core);
        Self::progress(slf, &core, &mailbox, progress, true)
    }

    /// Resolve the futures whose outcomes arrived (its `PyReader`: the mailbox's descriptor is
    /// readable). A future whose result cannot be built gets the exception.
    pub(super) fn drain(slf: &Bound<'_, Self>) -> PyResult<()> {
        let mailbox = slf.get().binding.lock().as_ref().map(|b| b.mailbox.clone());
        let Some(mailbox) = mailbox else {
            return Ok(());
        };
        let woken = mailbox
            .take()
            .into_iter()
            .filter_map(|(p, o)| Self::resolve(slf, p, o))
            .collect();
        Self::pump(slf, &mailbox);
        let r = future::wake(slf.py(), woken, true);
        // Server state changes the workers' calls noted: logged and called back here, on the
        // loop's thread.
        let base = slf.as_super().get();
        if let Ok(core) = base.core() {
            crate::py::events::deliver(slf.py(), &base.listeners, &core);
        }
        r
    }
}
