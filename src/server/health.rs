//! The failure policy, read top to bottom: what a failed exchange costs its server (`verdict`),
//! what counting a failure does to the server's health record (`Health`: failure count, retry
//! window, ejection, recovery), and the knobs both follow, taken from the behaviors
//! (`FailurePolicy`). Pure: no socket, no lock, no clock (the caller passes the time). `Server`
//! keeps a `Health` under its lock; `Client::server_failed` acts on a verdict (events, the
//! ejection counter, the ring rebuild). What users are promised is docs/failures.md.
//!
//! Depends on `error` and `behaviors`.

use std::time::{Duration, Instant};

use crate::behaviors::Behaviors;
use crate::error::{Error, Result};

/// libmemcached's failure policy, from the behaviors, and whether a stall is checked on a
/// fresh connection before it counts against the server (docs/failures.md#lossy-links).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailurePolicy {
    /// How long a failed server is skipped (`ServerDown`) before it is tried again.
    pub retry_timeout: Duration,
    /// Eject the server after this many failures in a row (`auto_eject` / `remove_failed`).
    pub auto_eject: bool,
    pub failure_limit: u32,
    /// How long an ejected server stays out of the ring before it is retried.
    pub dead_timeout: Duration,
    /// Check a stalled request on a fresh connection before its timeout counts against the
    /// server (off with the behavior `mark_down_at_once`, libmemcached's way).
    pub check_stalls: bool,
}

impl From<&Behaviors> for FailurePolicy {
    fn from(b: &Behaviors) -> Self {
        FailurePolicy {
            retry_timeout: b.retry_timeout(),
            auto_eject: b.auto_eject,
            failure_limit: b.failure_limit,
            dead_timeout: b.dead_timeout(),
            check_stalls: !b.mark_down_at_once,
        }
    }
}

/// What the failed exchange knew besides its error.
#[derive(Clone, Copy, Debug, Default)]
pub struct FailureContext {
    /// While the request stalled, the server answered a ping on a fresh connection (a stall
    /// check: docs/failures.md#lossy-links).
    pub answered_elsewhere: bool,
    /// The server had sent an error line for this batch before the failure.
    pub after_error_reply: bool,
    /// The batch held only a key-less admin command (`flush_all`).
    pub keyless_admin: bool,
}

/// What a failure costs its server. The failed connection is dropped in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The server failed: the failure is counted (retry window, perhaps ejection).
    CountsAgainstServer,
    /// Nothing is counted: only the connection is lost, or the error says nothing of the
    /// server's health.
    ConnectionOnly,
    /// A stall the check showed to be the connection's: counted as a transient failure only.
    Transient,
}

/// What failure `e` costs the server, given what else the exchange saw.
pub fn verdict(e: &Error, ctx: FailureContext) -> Verdict {
    // A timeout while the server answered a ping on a fresh connection is this connection's
    // (a lost packet), not the server's: it raises, nothing more.
    if ctx.answered_elsewhere && matches!(e, Error::Timeout) {
        return Verdict::Transient;
    }
    // A server that answered with an error line and then closed the connection (twemproxy,
    // after a backend failed a multi-key get) is alive: only this connection is gone, and the
    // next request opens another.
    if ctx.after_error_reply && e.is_stale_connection() {
        return Verdict::ConnectionOnly;
    }
    // A peer that hangs up on a `flush_all` refuses the command, as proxies that route only
    // keyed commands do (twemproxy, memcached's proxy): the call fails, and the server, which
    // serves every keyed request, is not marked down for every caller (docs/proxies.md).
    if ctx.keyless_admin && e.is_stale_connection() {
        return Verdict::ConnectionOnly;
    }
    // Otherwise the error's kind says (`Error::kind`): a failure to reach or hear the server
    // counts against it; a reply to one request, a key or a configuration refused, the client's
    // own memory, or a server skipped already does not.
    if e.kind().blames_server {
        Verdict::CountsAgainstServer
    } else {
        Verdict::ConnectionOnly
    }
}

/// One server's health record: failures in a row, the retry window, the ejection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    failures: u32,
    retry_at: Option<Instant>,
    ejected_until: Option<Instant>,
}

/// What counting one failure did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The server was healthy: it is marked down now (its retry window opens).
    pub marked_down: bool,
    /// The failure ejected the server (`auto_eject` and `failure_limit` reached).
    pub ejected: bool,
}

impl Health {
    /// No failure since the last success (or reset).
    pub fn is_clean(&self) -> bool {
        self.failures == 0 && self.retry_at.is_none() && self.ejected_until.is_none()
    }

    /// `ServerDead` while ejected, `ServerDown` while in the retry window: the server is skipped.
    pub fn check(&self, now: Instant) -> Result<()> {
        if self.is_ejected(now) {
            return Err(Error::ServerDead);
        }
        if self.retry_at.is_some_and(|t| now < t) {
            return Err(Error::ServerDown);
        }
        Ok(())
    }

    /// Whether the server is out of the ring at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until.is_some_and(|t| now < t)
    }

    /// Count a failure at `now`: the retry window opens again, and with `auto_eject` the
    /// `failure_limit`-th failure in a row ejects the server for `dead_timeout` (or
    /// `retry_timeout` when that is 0). An ejected server that fails again once back is
    /// ejected again at once, as libmemcached does (its count stays one short of the limit).
    pub fn record_failure(&mut self, now: Instant, policy: &FailurePolicy) -> Counted {
        let marked_down = self.is_clean();
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + policy.retry_timeout);
        let ejected = policy.auto_eject && self.failures >= policy.failure_limit.max(1);
        if ejected {
            let wait = if policy.dead_timeout.is_zero() {
                policy.retry_timeout
            } else {
                policy.dead_timeout
            };
            self.ejected_until = Some(now + wait);
            self.failures = policy.failure_limit.saturating_sub(1);
        }
        Counted {
            marked_down,
            ejected,
        }
    }

    /// A clean exchange clears the record; true if the server had failed (it is up again).
    pub fn record_success(&mut self) -> bool {
        let had_failed = !self.is_clean();
        *self = Health::default();
        had_failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::IoFailure;
    use std::io;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The default behaviors' policy, with `auto_eject` after `limit` failures if given.
    fn policy(limit: Option<u32>) -> FailurePolicy {
        let mut b = Behaviors::default();
        if let Some(n) = limit {
            assert!(b.set("remove_failed", i64::from(n), false).is_ok());
        }
        FailurePolicy::from(&b)
    }

    fn io(kind: io::ErrorKind) -> IoFailure {
        IoFailure {
            kind,
            detail: "x".into(),
        }
    }

    const NOTHING: FailureContext = FailureContext {
        answered_elsewhere: false,
        after_error_reply: false,
        keyless_admin: false,
    };
    const ANSWERED: FailureContext = FailureContext {
        answered_elsewhere: true,
        after_error_reply: false,
        keyless_admin: false,
    };
    const AFTER_ERROR: FailureContext = FailureContext {
        answered_elsewhere: false,
        after_error_reply: true,
        keyless_admin: false,
    };
    const FLUSH: FailureContext = FailureContext {
        keyless_admin: true,
        ..NOTHING
    };

    #[test]
    fn the_policy_follows_the_behaviors() {
        let p = policy(None);
        assert_eq!(
            p,
            FailurePolicy {
                retry_timeout: secs(2),
                auto_eject: false,
                failure_limit: 5,
                dead_timeout: Duration::ZERO,
                check_stalls: true,
            }
        );
        let mut b = Behaviors::default();
        for (name, value) in [
            ("remove_failed", 3),
            ("retry_timeout", -1),
            ("dead_timeout", 30),
            ("mark_down_at_once", 1),
        ] {
            assert!(b.set(name, value, false).is_ok());
        }
        let p = FailurePolicy::from(&b);
        assert!(p.auto_eject && !p.check_stalls);
        assert_eq!(p.failure_limit, 3);
        // -1 disables the retry window.
        assert_eq!(p.retry_timeout, Duration::ZERO);
        assert_eq!(p.dead_timeout, secs(30));
    }

    #[test]
    fn the_failures_of_the_server_count_and_nothing_else_does() {
        let closed = Error::Read(IoFailure::closed());
        let counts = [
            Error::HostLookup("x".into()),
            Error::Connect("x".into()),
            Error::Write(io(io::ErrorKind::BrokenPipe)),
            closed.clone(),
            Error::Read(io(io::ErrorKind::TimedOut)),
            Error::Timeout,
            Error::Protocol("x".into()),
        ];
        for e in &counts {
            assert_eq!(verdict(e, NOTHING), Verdict::CountsAgainstServer, "{e:?}");
        }
        let spared = [
            Error::ServerDown,
            Error::ServerDead,
            Error::ClientError("x".into()),
            Error::ServerError("x".into()),
            Error::TooBig,
            Error::OutOfMemory,
            Error::UnknownCommand,
            Error::BadKey("x".into()),
            Error::NotSupported("x".into()),
            Error::NoServers,
            Error::Auth("x".into()),
            Error::UnknownStatus("x".into()),
            Error::Alloc("x".into()),
        ];
        for e in &spared {
            for ctx in [NOTHING, ANSWERED, AFTER_ERROR] {
                assert_eq!(verdict(e, ctx), Verdict::ConnectionOnly, "{e:?} {ctx:?}");
            }
        }
    }

    #[test]
    fn only_a_timeout_with_the_server_alive_elsewhere_is_transient() {
        assert_eq!(verdict(&Error::Timeout, ANSWERED), Verdict::Transient);
        let both = FailureContext {
            answered_elsewhere: true,
            after_error_reply: true,
            keyless_admin: false,
        };
        assert_eq!(verdict(&Error::Timeout, both), Verdict::Transient);
        // Anything but a timeout still counts, answered ping or not.
        for e in [
            Error::Protocol("x".into()),
            Error::Read(IoFailure::closed()),
            Error::Connect("x".into()),
        ] {
            assert_eq!(verdict(&e, ANSWERED), Verdict::CountsAgainstServer, "{e:?}");
        }
    }

    #[test]
    fn a_hang_up_on_flush_all_costs_only_the_connection() {
        for kind in [io::ErrorKind::UnexpectedEof, io::ErrorKind::ConnectionReset] {
            let e = Error::Read(io(kind));
            assert_eq!(verdict(&e, FLUSH), Verdict::ConnectionOnly, "{e:?}");
        }
        // A flush that times out, or cannot connect, still counts: the server is not answering.
        for e in [Error::Timeout, Error::Connect("x".into())] {
            assert_eq!(verdict(&e, FLUSH), Verdict::CountsAgainstServer, "{e:?}");
        }
    }

    #[test]
    fn a_connection_closed_after_an_error_line_costs_only_the_connection() {
        for kind in [
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::BrokenPipe,
        ] {
            for e in [Error::Read(io(kind)), Error::Write(io(kind))] {
                assert_eq!(verdict(&e, AFTER_ERROR), Verdict::ConnectionOnly, "{e:?}");
                assert_eq!(verdict(&e, NOTHING), Verdict::CountsAgainstServer, "{e:?}");
            }
        }
        // Not a closed connection: the error line does not excuse it.
        for e in [
            Error::Timeout,
            Error::Protocol("x".into()),
            Error::Read(io(io::ErrorKind::TimedOut)),
        ] {
            assert_eq!(
                verdict(&e, AFTER_ERROR),
                Verdict::CountsAgainstServer,
                "{e:?}"
            );
        }
    }

    #[test]
    fn a_failure_opens_the_retry_window_and_only_the_first_marks_down() {
        let p = policy(None);
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(h.is_clean() && h.check(t0).is_ok());
        let c = h.record_failure(t0, &p);
        assert_eq!(
            c,
            Counted {
                marked_down: true,
                ejected: false
            }
        );
        assert_eq!(h.check(t0), Err(Error::ServerDown));
        assert_eq!(h.check(t0 + ms(1999)), Err(Error::ServerDown));
        assert_eq!(h.check(t0 + secs(2)), Ok(()));
        // Tried again after the window and failed: down already, the window opens again.
        let t1 = t0 + secs(3);
        assert!(!h.record_failure(t1, &p).marked_down);
        assert_eq!(h.check(t1 + secs(1)), Err(Error::ServerDown));
        assert!(!h.is_clean());
    }

    #[test]
    fn without_a_retry_window_a_failed_server_is_tried_at_once() {
        let mut b = Behaviors::default();
        assert!(b.set("retry_timeout", -1, false).is_ok());
        let p = FailurePolicy::from(&b);
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(h.record_failure(t0, &p).marked_down);
        assert_eq!(h.check(t0), Ok(()));
        // Still a failed server: the next failure is not a new mark-down, a success is news.
        assert!(!h.record_failure(t0, &p).marked_down);
        assert!(h.record_success());
    }

    #[test]
    fn without_auto_eject_no_count_of_failures_ejects() {
        let p = policy(None);
        let t0 = Instant::now();
        let mut h = Health::default();
        for i in 0..100 {
            assert!(!h.record_failure(t0 + secs(3 * i), &p).ejected);
        }
        assert!(!h.is_ejected(t0 + secs(300)));
        assert_eq!(h.check(t0 + secs(298)), Err(Error::ServerDown));
    }

    #[test]
    fn the_limit_th_failure_ejects_for_the_dead_timeout() {
        let mut b = Behaviors::default();
        assert!(b.set("remove_failed", 3, false).is_ok());
        assert!(b.set("dead_timeout", 10, false).is_ok());
        let p = FailurePolicy::from(&b);
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(!h.record_failure(t0, &p).ejected);
        assert!(!h.record_failure(t0 + secs(2), &p).ejected);
        let t2 = t0 + secs(4);
        let c = h.record_failure(t2, &p);
        assert!(c.ejected && !c.marked_down);
        // Dead (not merely down) for the dead timeout, then tried again.
        assert_eq!(h.check(t2), Err(Error::ServerDead));
        assert_eq!(h.check(t2 + secs(9)), Err(Error::ServerDead));
        assert!(h.is_ejected(t2 + ms(9999)));
        assert!(!h.is_ejected(t2 + secs(10)));
        assert_eq!(h.check(t2 + secs(10)), Ok(()));
        // Back, it fails once more: ejected again at once.
        let t3 = t2 + secs(11);
        assert!(h.record_failure(t3, &p).ejected);
        assert_eq!(h.check(t3 + secs(5)), Err(Error::ServerDead));
    }

    #[test]
    fn a_dead_timeout_of_zero_ejects_for_the_retry_timeout() {
        let p = policy(Some(2));
        let t0 = Instant::now();
        let mut h = Health::default();
        h.record_failure(t0, &p);
        assert!(h.record_failure(t0 + secs(2), &p).ejected);
        assert!(h.is_ejected(t0 + secs(3)));
        assert!(!h.is_ejected(t0 + secs(4)));
        assert_eq!(h.check(t0 + secs(4)), Ok(()));
    }

    #[test]
    fn a_failure_limit_of_zero_ejects_at_the_first_failure() {
        let mut b = Behaviors::default();
        assert!(b.set("auto_eject", 1, false).is_ok());
        assert!(b.set("failure_limit", 0, false).is_ok());
        let p = FailurePolicy::from(&b);
        let t0 = Instant::now();
        let mut h = Health::default();
        let c = h.record_failure(t0, &p);
        assert!(c.ejected && c.marked_down);
        // Its count is back at 0, yet it has failed: ejected again, not marked down again.
        let c = h.record_failure(t0 + secs(3), &p);
        assert!(c.ejected && !c.marked_down);
    }

    #[test]
    fn a_success_clears_the_record_and_the_count() {
        let p = policy(Some(3));
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(!h.record_success());
        h.record_failure(t0, &p);
        h.record_failure(t0 + secs(2), &p);
        assert!(h.record_success());
        assert!(h.is_clean() && h.check(t0 + secs(3)).is_ok());
        assert!(!h.record_success());
        // The count starts over: two more failures do not eject, the first marks down again.
        let t1 = t0 + secs(5);
        assert!(h.record_failure(t1, &p).marked_down);
        assert!(!h.record_failure(t1 + secs(2), &p).ejected);
        assert!(h.record_failure(t1 + secs(4), &p).ejected);
        // Even an ejected server is back once it answers.
        assert!(h.record_success());
        assert!(!h.is_ejected(t1 + secs(4)));
    }
}
