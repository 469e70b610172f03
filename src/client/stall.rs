//! Whether a stalled request is its connection's fault or its server's. On a lossy link one lost
//! packet stalls a TCP connection for the kernel's retransmit timeout (200 ms at least, doubled
//! at each further loss), long enough for a short timeout to run out although the server is
//! fine. libmemcached then marks the server down for `retry_timeout`, and every request to it
//! fails with `ServerDown`. Here, once a batch has made no progress for half its timeout (the
//! check point), a fresh connection is opened within what is left of the timeout:
//! - a read none of whose reply has arrived is sent again on it (reads are safe to repeat), and
//!   the old connection is closed: if the fresh one answers, the call succeeds;
//! - anything else (a write, which is never sent twice, or a read half answered) stays on its
//!   connection, and the fresh one carries a ping (`version`, binary NOOP): if the server answers
//!   it, a timeout of the batch still raises but does not count against the server.
//!
//! A server that cannot be connected to or does not answer the fresh connection either is failed
//! exactly as before. The call's deadline does not move: the check runs inside the timeout.
//!
//! Owns `Check`, when a batch is due (`due`) and the ping. Uses `connection` and `protocol`; the
//! blocking driver's poll loop starts the checks (`Client::start_checks`).

use std::time::{Duration, Instant};

use crate::connection::connect::SocketOptions;
use crate::connection::Connection;
use crate::error::Result;
use crate::protocol::{binary, parse_text_reply, text, Parsed, ReplyKind};

/// The shortest wait before a check: a timeout below 2 ms is checked at its end, never.
const MIN_CHECK_AFTER: Duration = Duration::from_millis(1);

/// How long a batch may make no progress before it is checked: half its timeout.
pub(super) fn check_after(limit: Duration) -> Duration {
    (limit / 2).max(MIN_CHECK_AFTER).min(limit)
}

/// Whether a batch that last made progress at `last_progress` is due for its check at `now`,
/// and still has time left before its deadline (`limit` after the last progress).
pub(super) fn due(last_progress: Instant, limit: Duration, now: Instant) -> bool {
    now >= last_progress + check_after(limit) && now < last_progress + limit
}

/// The check of one stalled batch.
#[derive(Default)]
pub(super) enum Check {
    /// Not stalled so far (or checks are off).
    #[default]
    None,
    /// Moved to a fresh connection and sent again (a read with no reply byte yet). Until a reply
    /// byte arrives there, the batch's deadline stays this one (sending the request again is
    /// not progress).
    Replayed(Instant),
    /// A ping waits for its answer on a fresh connection (boxed: a batch in flight carries a
    /// `Check`, and is moved whole on every call; a ping is rare).
    Pinging(Box<Connection>),
    /// The server answered the ping: it is alive.
    Alive,
    /// No fresh connection could be opened, or the ping could not be sent or failed.
    Failed,
}

impl Check {
    pub fn started(&self) -> bool {
        !matches!(self, Check::None)
    }

    /// The connection a ping waits on, to be polled with the batch's own.
    pub fn ping(&self) -> Option<&Connection> {
        match self {
            Check::Pinging(c) => Some(c),
            _ => None,
        }
    }

    /// The deadline of a batch that last made progress at `last_progress`; `answered`: whether
    /// a reply byte arrived on its connection.
    pub fn deadline(&self, last_progress: Instant, limit: Duration, answered: bool) -> Instant {
        match self {
            Check::Replayed(until) if !answered => (last_progress + limit).min(*until),
            _ => last_progress + limit,
        }
    }

    /// Whether the server answered the ping on a fresh connection (`health::verdict` then
    /// spares it a timeout of the batch).
    pub fn server_answered(&self) -> bool {
        matches!(self, Check::Alive)
    }

    /// Read what the ping connection has (poll said so): `Alive` once a whole reply arrived,
    /// `Failed` if the connection failed or sent what is not the protocol.
    pub fn serve_ping(&mut self, binary: bool) {
        let Check::Pinging(conn) = self else {
            return;
        };
        match read_ping(conn, binary) {
            Ok(false) => {}
            Ok(true) => *self = Check::Alive,
            Err(_) => *self = Check::Failed,
        }
    }
}

/// The socket options of a check's connection: nothing in it (connect, TLS handshake, SASL) may
/// wait longer than the `left` of the batch's timeout.
pub(super) fn bounded(opts: &SocketOptions, left: Duration) -> SocketOptions {
    let left = left.max(MIN_CHECK_AFTER);
    let mut o = opts.clone();
    o.connect_timeout = o.connect_timeout.min(left);
    o.read_timeout = o.read_timeout.min(left);
    o.write_timeout = o.write_timeout.min(left);
    o.recv_wait = o.recv_wait.min(left);
    o
}

/// The ping: `version` (text) or a NOOP (binary), both answered by any memcached (also what
/// `warm_up` checks a connection with).
pub(super) fn ping_request(binary: bool) -> Vec<u8> {
    let mut req = Vec::with_capacity(binary::HEADER_LEN);
    if binary {
        binary::encode_noop(&mut req, binary::NOOP_OPAQUE);
    } else {
        text::encode_version(&mut req);
    }
    req
}

/// How many bytes of `unread` the ping's whole reply takes, once it has arrived.
pub(super) fn ping_reply(unread: &[u8], binary: bool) -> Result<Option<usize>> {
    let parsed = if binary {
        match binary::parse_response(unread)? {
            Parsed::Done(_, used) => Some(used),
            Parsed::NeedMore => None,
        }
    } else {
        match parse_text_reply(ReplyKind::Version, unread)? {
            Parsed::Done(_, used) => Some(used),
            Parsed::NeedMore => None,
        }
    };
    Ok(parsed)
}

/// Send the ping on a fresh connection. The connection is new, so its buffer takes the few
/// bytes at once.
pub(super) fn start_ping(mut conn: Box<Connection>, binary: bool) -> Check {
    let req = ping_request(binary);
    match conn.send_nonblocking(&req) {
        Ok(n) if n == req.len() && !conn.pending_write() => Check::Pinging(conn),
        _ => Check::Failed,
    }
}

/// Whether a whole reply to the ping has arrived.
fn read_ping(conn: &mut Connection, binary: bool) -> Result<bool> {
    conn.recv_nonblocking()?;
    Ok(ping_reply(conn.unread(), binary)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_point_is_half_the_timeout_and_inside_it() {
        let ms = Duration::from_millis;
        assert_eq!(check_after(ms(500)), ms(250));
        assert_eq!(check_after(ms(1)), ms(1));
        assert_eq!(
            check_after(Duration::from_micros(300)),
            Duration::from_micros(300)
        );
        let t0 = Instant::now();
        assert!(!due(t0, ms(500), t0 + ms(249)));
        assert!(due(t0, ms(500), t0 + ms(250)));
        assert!(due(t0, ms(500), t0 + ms(499)));
        // At the deadline it is too late: the batch times out instead.
        assert!(!due(t0, ms(500), t0 + ms(500)));
    }

    #[test]
    fn a_check_waits_no_longer_than_what_is_left() {
        let ms = Duration::from_millis;
        let opts = SocketOptions {
            read_timeout: ms(500),
            write_timeout: ms(5000),
            ..SocketOptions::for_tests()
        };
        let o = bounded(&opts, ms(200));
        let waits = [
            o.connect_timeout,
            o.read_timeout,
            o.write_timeout,
            o.recv_wait,
        ];
        assert_eq!(waits, [ms(200); 4]);
        assert_eq!(bounded(&opts, ms(300)).recv_wait, ms(250));
        // Never a zero wait (a socket refuses a zero timeout).
        assert_eq!(bounded(&opts, Duration::ZERO).read_timeout, MIN_CHECK_AFTER);
    }

    #[test]
    fn only_an_answered_ping_says_the_server_is_alive() {
        assert!(Check::Alive.server_answered());
        let t0 = Instant::now();
        for c in [Check::None, Check::Replayed(t0), Check::Failed] {
            assert!(!c.server_answered());
            assert!(c.ping().is_none());
        }
        assert!(!Check::None.started() && Check::Failed.started());
    }

    #[test]
    fn a_replay_keeps_the_deadline_until_its_reply_begins() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let replayed = Check::Replayed(t0 + ms(500));
        // Writing the request again moved the last progress: the deadline does not move.
        assert_eq!(
            replayed.deadline(t0 + ms(300), ms(500), false),
            t0 + ms(500)
        );
        // Once the reply has begun, progress is progress again.
        assert_eq!(replayed.deadline(t0 + ms(300), ms(500), true), t0 + ms(800));
        assert_eq!(Check::None.deadline(t0, ms(500), false), t0 + ms(500));
    }
}
