//! A lone request on the event loop's own thread. Handing a request to a worker and its outcome
//! back costs two cross-thread wake-ups, and on a VM a wake-up of an idle vCPU is slow: a lone
//! `get` through the workers took 45 to 85 µs on this machine, idle, against the blocking
//! client's 6.6 µs. So when nothing else is in flight, the loop's thread begins the request
//! itself (`Client::begin`: planned, written to idle pooled connections, never waiting), watches
//! its connections through one epoll descriptor that the loop watches like any other reader,
//! and ends it there. Whatever would wait (no idle connection, a reconnect, a stall or a
//! timeout, a read-back) goes to the blocking driver: at the start, the workers run the request
//! instead; once begun, a thread of its own completes it (`HandOff`), so the loop never waits
//! on a socket. One request at a time: those issued meanwhile go to the workers and are
//! batched there.
//!
//! Uses `client` (begin, advance, end, complete) and `rustix` (epoll, a timerfd for the
//! watchdog); owns no threads.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustix::event::{epoll, PollFlags};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
};

use super::request::Request;
use crate::client::drive::selector::Begun;
use crate::client::drive::selector::Step;
use crate::client::op::Outcome;
use crate::client::Client;
use crate::connection::to_timespec;

/// How many times `ready` looks again when the connections moved, before it lets the loop run.
const MAX_TURNS: usize = 64;

/// Where a direct request stands.
pub enum Progress<P> {
    /// Its connections are watched; the loop calls `ready` when the descriptor is readable.
    Waiting,
    /// Done: the payload and the outcome.
    Done(P, Outcome),
    /// To be completed on another thread (`HandOff::run`); nothing is watched any more.
    HandOff(Box<HandOff<P>>),
}

/// A begun request that needs the blocking driver.
pub struct HandOff<P> {
    begun: Box<Begun>,
    req: Request,
    payload: P,
}

impl<P> HandOff<P> {
    /// Complete it with the blocking driver (this may wait, up to the client's timeouts).
    pub fn run(self, client: &Client) -> (P, Outcome) {
        let HandOff {
            begun,
            req,
            payload,
        } = self;
        let out = req.with_args(|args| client.complete(*begun, args));
        (payload, out)
    }
}

impl<P: Send + 'static> HandOff<P> {
    /// Complete it on a thread of its own, then give `done` the payload and the outcome.
    /// `Err`: no thread could start; the payload comes back (the thread that did not start
    /// never took it), the request dropped unanswered.
    pub fn spawn(
        self,
        client: &Arc<Client>,
        done: impl FnOnce(P, Outcome) + Send + 'static,
    ) -> Result<(), (Option<P>, std::io::Error)> {
        // The thread owns the request; should it fail to start, the request is taken back.
        let slot = Arc::new(Mutex::new(Some(self)));
        let (theirs, client) = (slot.clone(), client.clone());
        super::spawn_thread("fastmc-direct", move || {
            if let Some(h) = theirs.lock().take() {
                let (payload, outcome) = h.run(&client);
                done(payload, outcome);
            }
        })
        .map_err(|e| (slot.lock().take().map(|h| h.payload), e))
    }
}

struct Running<P> {
    begun: Begun,
    req: Request,
    payload: P,
}

/// The epoll data of the watchdog timer (a connection's is its descriptor).
const TIMER: u64 = u64::MAX;

/// The direct request of one client on one event loop, and the epoll descriptor the loop
/// watches for it.
pub struct Direct<P> {
    epoll: OwnedFd,
    /// The watchdog: a timer in the same epoll set, for the request's hand-off time. A timer of
    /// the loop's own (`call_later`) would cost every turn of asyncio's loop a look at its
    /// clock (about 1 µs per lone `get` here).
    timer: OwnedFd,
    /// When the timer fires, if armed. Armed lazily: a timer set earlier than a new request's
    /// hand-off time is left as it is, and looks again when it fires.
    armed: Option<Instant>,
    running: Option<Running<P>>,
    /// The descriptors registered with `epoll`, and whether for writing too.
    watched: Vec<(RawFd, bool)>,
    /// Requests begun here, and how many of them were handed off (for tests and metrics).
    pub begun: u64,
    pub handed_off: u64,
    /// How the waits in a call (`wait_here`) ended: the request moved on (done or handed
    /// off), the loop had work, or the wait's time ran out (for tests).
    pub idle: IdleWaits,
}

/// See `Direct::idle`.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdleWaits {
    pub moved_on: u64,
    pub woken: u64,
    pub timed_out: u64,
}

/// What epoll reported for a connection, as `poll` would report it (`Begun::advance`).
fn as_poll_flags(flags: epoll::EventFlags) -> PollFlags {
    let mut events = PollFlags::empty();
    events.set(PollFlags::IN, flags.contains(epoll::EventFlags::IN));
    events.set(PollFlags::OUT, flags.contains(epoll::EventFlags::OUT));
    events.set(PollFlags::ERR, flags.contains(epoll::EventFlags::ERR));
    events.set(PollFlags::HUP, flags.contains(epoll::EventFlags::HUP));
    events
}

impl<P> Direct<P> {
    pub fn new() -> std::io::Result<Direct<P>> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let flags = TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC;
        let timer = timerfd_create(TimerfdClockId::Monotonic, flags)?;
        let data = epoll::EventData::new_u64(TIMER);
        epoll::add(&epoll, &timer, data, epoll::EventFlags::IN)?;
        Ok(Direct {
            epoll,
            timer,
            armed: None,
            running: None,
            watched: Vec::new(),
            begun: 0,
            handed_off: 0,
            idle: IdleWaits::default(),
        })
    }

    /// The descriptor the loop watches for reading.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Begin `req` on this thread. `Err` gives it back when the workers must run it (another
    /// request runs here, its kind waits for no reply, or `Client::begin` declined). `watch`:
    /// register what it waits on for the loop; else the caller goes on with `wait_here`.
    // The request comes back by value: boxing it would cost an allocation per request.
    #[allow(clippy::result_large_err)]
    pub fn start(
        &mut self,
        client: &Client,
        req: Request,
        payload: P,
        watch: bool,
    ) -> Result<Progress<P>, (Request, P)> {
        if self.running.is_some() {
            return Err((req, payload));
        }
        let pinned = crate::client::pin::pin_if_needed(&req.route);
        let begun = req.with_args(|args| client.begin(&req.op, args));
        drop(pinned);
        let Some(begun) = begun else {
            return Err((req, payload));
        };
        self.running = Some(Running {
            begun,
            req,
            payload,
        });
        self.begun += 1;
        Ok(self.settle(client, watch))
    }

    /// Wait for the request begun unwatched (`start`) on this thread, until `until` (or its
    /// hand-off time) at the latest, and only while `selector` (the loop's) has nothing ready:
    /// when the loop has work, the request is watched and left to the loop. No epoll
    /// registration, no turn of the loop for a reply that comes while the loop is idle.
    pub fn wait_here(
        &mut self,
        client: &Client,
        selector: BorrowedFd<'_>,
        until: Instant,
    ) -> Progress<P> {
        use rustix::event::{poll, PollFd};
        let mut counter = &mut self.idle.moved_on;
        while let Some(r) = self.running.as_mut() {
            let until = r.begun.hand_off_at().map_or(until, |h| h.min(until));
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                counter = &mut self.idle.timed_out;
                break;
            }
            let mut fds = r.begun.poll_fds();
            fds.push(PollFd::from_borrowed_fd(selector, PollFlags::IN));
            match poll(&mut fds, Some(&to_timespec(left))) {
                Ok(0) => continue, // the time is up: counted above
                Ok(_) => {}
                Err(_) => {
                    // a signal: the loop (Python) handles it
                    counter = &mut self.idle.woken;
                    break;
                }
            }
            let conns = fds.len() - 1;
            let loop_has_work = !fds[conns].revents().is_empty();
            let moved: Vec<(RawFd, PollFlags)> = fds[..conns]
                .iter()
                .filter(|f| !f.revents().is_empty())
                .map(|f| (f.as_fd().as_raw_fd(), f.revents()))
                .collect();
            if moved.is_empty() {
                counter = &mut self.idle.woken; // the loop has work
                break;
            }
            for (fd, ev) in moved {
                if r.begun.advance(fd, ev).is_some_and(|s| s != Step::Wait) {
                    break;
                }
            }
            if r.begun.step() != Step::Wait {
                break;
            }
            if loop_has_work {
                counter = &mut self.idle.woken;
                break;
            }
        }
        *counter += 1;
        self.settle(client, true)
    }

    /// Serve what the selector reports ready (the loop found the descriptor readable), and go
    /// on while the connections have more (a large request or reply moves many times per turn
    /// of the loop, each turn costing the loop's own bookkeeping).
    pub fn ready(&mut self, client: &Client) -> Progress<P> {
        // One connection waited on for reading (a request to one server, fully written): read
        // it without asking epoll first. When that ends the request, the look is saved (a
        // system call per request); else the loop below looks, which also consumes the
        // readiness of whatever else woke the loop (the watchdog's timer).
        if let ([(fd, false)], Some(r)) = (self.watched.as_slice(), self.running.as_mut()) {
            if r.begun
                .advance(*fd, PollFlags::IN)
                .is_some_and(|s| s != Step::Wait)
            {
                return self.settle(client, true);
            }
        }
        let mut events = Vec::with_capacity(8);
        let zero = to_timespec(Duration::ZERO);
        // Bounded: the connections may keep having more while the loop has other work.
        for _ in 0..MAX_TURNS {
            events.clear();
            let _ = epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&zero),
            );
            if events.iter().any(|ev| ev.data.u64() == TIMER) {
                return self.watchdog(client);
            }
            let Some(r) = self.running.as_mut() else {
                return Progress::Waiting;
            };
            let (mut step, mut served) = (r.begun.step(), false);
            for ev in &events {
                let flags = ev.flags;
                let fd = ev.data.u64() as RawFd;
                let moved = r.begun.advance(fd, as_poll_flags(flags));
                if let Some(s) = moved {
                    (step, served) = (s, true);
                    if step != Step::Wait {
                        break;
                    }
                }
            }
            if !served || step != Step::Wait {
                break;
            }
            // The writes that finished stop asking for writability before the next look.
            self.rewatch();
        }
        self.settle(client, true)
    }

    /// `watch` for the running request, if any.
    fn rewatch(&mut self) {
        if let Some(r) = self.running.take() {
            self.watch(&r.begun);
            self.running = Some(r);
        }
    }

    /// When the request must be handed off if it is still waiting then (see
    /// `Begun::hand_off_at`).
    fn hand_off_at(&self) -> Option<Instant> {
        self.running.as_ref().and_then(|r| r.begun.hand_off_at())
    }

    /// The timer fired: hand the request off if it has waited as long as the loop may let it,
    /// else serve it as usual (and the timer is armed again for it).
    fn watchdog(&mut self, client: &Client) -> Progress<P> {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.timer, &mut buf);
        self.armed = None;
        match self.hand_off_at() {
            Some(at) if at <= Instant::now() => match self.running.take() {
                Some(r) => self.hand_off(Box::new(r.begun), r.req, r.payload),
                None => Progress::Waiting,
            },
            _ => self.settle(client, true),
        }
    }

    /// Make sure the timer fires by `at`.
    fn arm(&mut self, at: Instant) {
        if self.armed.is_some_and(|t| t <= at) {
            return;
        }
        let left = at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_micros(1));
        let spec = Itimerspec {
            it_interval: to_timespec(Duration::ZERO),
            it_value: to_timespec(left),
        };
        if timerfd_settime(&self.timer, TimerfdTimerFlags::empty(), &spec).is_ok() {
            self.armed = Some(at);
        }
    }

    /// After the request moved: end it, hand it off, or (`watch`) watch what it waits on.
    fn settle(&mut self, client: &Client, watch: bool) -> Progress<P> {
        let Some(r) = self.running.take() else {
            return Progress::Waiting;
        };
        match r.begun.step() {
            Step::Wait => {
                let at = r.begun.hand_off_at();
                if watch {
                    self.watch(&r.begun);
                }
                self.running = Some(r);
                if let (Some(at), true) = (at, watch) {
                    self.arm(at);
                }
                Progress::Waiting
            }
            Step::Ready => {
                self.unwatch_all(&r.begun);
                let Running {
                    begun,
                    req,
                    payload,
                } = r;
                match client.end(begun) {
                    Ok(out) => Progress::Done(payload, out),
                    Err(begun) => self.hand_off(begun, req, payload),
                }
            }
            Step::HandOff => self.hand_off(Box::new(r.begun), r.req, r.payload),
        }
    }

    fn hand_off(&mut self, begun: Box<Begun>, req: Request, payload: P) -> Progress<P> {
        self.unwatch_all(&begun);
        self.handed_off += 1;
        Progress::HandOff(Box::new(HandOff {
            begun,
            req,
            payload,
        }))
    }

    /// Register what `begun` waits on, and only that.
    fn watch(&mut self, begun: &Begun) {
        let epfd = &self.epoll;
        self.watched.retain(|&(fd, _)| {
            let keep = begun.interest().any(|(w, _)| w.as_raw_fd() == fd);
            if let (false, Some(conn)) = (keep, begun.connection(fd)) {
                let _ = epoll::delete(epfd, conn);
            }
            keep
        });
        for (conn, out) in begun.interest() {
            let fd = conn.as_raw_fd();
            let mut flags = epoll::EventFlags::IN;
            if out {
                flags |= epoll::EventFlags::OUT;
            }
            let data = epoll::EventData::new_u64(fd as u64);
            match self.watched.iter_mut().find(|(w, _)| *w == fd) {
                Some(entry) if entry.1 == out => {}
                Some(entry) => {
                    let _ = epoll::modify(epfd, conn, data, flags);
                    entry.1 = out;
                }
                None => {
                    let _ = epoll::add(epfd, conn, data, flags);
                    self.watched.push((fd, out));
                }
            }
        }
    }

    /// Stop watching `begun`'s connections (before they go back to the pool or elsewhere).
    fn unwatch_all(&mut self, begun: &Begun) {
        for (fd, _) in self.watched.drain(..) {
            if let Some(conn) = begun.connection(fd) {
                let _ = epoll::delete(&self.epoll, conn);
            }
        }
    }
}
