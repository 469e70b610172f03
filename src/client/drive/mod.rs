//! The drivers: what moves an operation's batches over their connections. `blocking` waits
//! (one blocking exchange, or one `poll` loop over every batch); `selector` never waits, an
//! event loop's selector reports the connections ready and whatever would wait is left to the
//! blocking driver on another thread; `lone` is the short path of a lone request of one key
//! that waits for its reply, `noreply` that of a lone `noreply` write. All of them use the same
//! `steps` (checkout with health, launch, serve, finish), and drive whatever `op::Operation`
//! planned (the short paths hand what they do not finish to the blocking driver).

mod blocking;
pub mod lone;
pub mod noreply;
pub mod selector;
mod steps;

/// After this many unwaited `noreply` writes on a connection, the next one waits for the server
/// to catch up (`ServerBatch::prepend_sync`): what it may owe stays bounded. memcached answers a
/// `noreply` command only when it cannot parse it, so the debt is rarely more than a count. The
/// wait is rare too: a wait every 1,024 writes cost a loop of `noreply` writes on one CPU with
/// its server a third more time (each wait hands the CPU to the server, and the scheduler then
/// keeps preempting the client), more than the write itself costs in the client.
const MAX_UNSYNCED: u32 = 1 << 16;
