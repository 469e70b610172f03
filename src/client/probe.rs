//! Whether a server speaks the meta protocol. A bare `mn` is answered `MN` by memcached 1.6 and
//! `ERROR` by a server without the meta commands, but a proxy may hang up on it (twemproxy
//! does, dropping whatever else was in flight on that connection) or ignore it: so it never
//! rides with a request. It is asked once a write batch has been answered in full, on the
//! connection that carried it, which then owes nothing; a hang-up or silence costs that
//! connection only. The answer is remembered per server until the server fails (it may come
//! back as another program). Whatever happens to the probe, it is not a failure of the server.
//!
//! Uses `connection` and `protocol`; called by the driver after a write batch that went out
//! with classic commands because the server's protocols were unknown.

use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::connection::to_timespec;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::protocol::{meta, parse_text_reply, Parsed, Reply, ReplyKind};
use crate::server::{MetaSupport, Server};

/// The longest a probe waits for its answer. A server or proxy that stays silent on `mn` costs
/// this once (and the connection), and is then known not to speak meta.
const PROBE_WAIT: Duration = Duration::from_millis(500);

/// Ask server `s` on `conn`, which owes nothing, whether it speaks the meta protocol (unless
/// that is known already). Returns the connection when it is still fit for the pool.
pub(super) fn probe_meta(s: &Server, mut conn: Box<Connection>) -> Option<Box<Connection>> {
    if s.meta_support() != MetaSupport::Unknown {
        return Some(conn);
    }
    match ask_meta(&mut conn) {
        Ok(yes) => {
            s.set_meta_support(yes);
            conn.is_idle_clean().then_some(conn)
        }
        Err(_) => {
            s.set_meta_support(false);
            None
        }
    }
}

/// Send a bare `mn` and read its answer: `MN` (true) or an error line (false). A hang-up,
/// silence for `PROBE_WAIT` or anything else is an error.
fn ask_meta(conn: &mut Connection) -> Result<bool> {
    let mut req = Vec::with_capacity(4);
    meta::encode_noop(&mut req);
    conn.write_all_blocking(&req)?;
    let deadline = Instant::now() + PROBE_WAIT;
    loop {
        if let Parsed::Done(reply, used) = parse_text_reply(ReplyKind::MetaProbe, conn.unread())? {
            let yes = matches!(reply, Reply::MetaNoop);
            conn.consume(used);
            return Ok(yes);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout);
        }
        let ts = to_timespec(left);
        let mut fds = [PollFd::from_borrowed_fd(conn.fd(), PollFlags::IN)];
        let _ = rustix::event::poll(&mut fds, Some(&ts));
        conn.recv_nonblocking()?;
    }
}
