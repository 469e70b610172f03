//! fastmc: a memcached client with a pure-Rust core and a thin PyO3 binding.
//!
//! Core modules (`error`, `protocol`, `ring`, `behaviors`, `compress`, `connection`, `server`,
//! `client`, `dispatch`, `fork`, `clock`) never touch Python; `py` is the only module that uses
//! pyo3.
//!
//! `unsafe` is denied crate-wide, with two audited blocks in the library, each with its safety
//! argument beside it: the `pthread_atfork` registration in `fork`, and the borrow of the asyncio
//! loop's selector descriptor in `py::aio::idle_wait`; and three in `fork`'s test (libc `pipe`
//! and `fork`, the child's `write` and `_exit`, the parent's `read` and `waitpid`).
#![deny(unsafe_code)]

pub mod behaviors;
pub mod client;
pub mod clock;
pub mod compress;
pub mod connection;
pub mod dispatch;
pub mod error;
pub mod fake;
pub mod fork;
pub mod metrics;
pub mod pickle_scan;
pub mod protocol;
pub mod py;
pub mod random;
pub mod ring;
pub mod security;
pub mod server;
pub mod signing;
pub mod structured_scan;
