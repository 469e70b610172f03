//! The single-key methods, a file per family: get, gets and gat (`get`: `Get`, `Gets`), the
//! stores (set, add, replace, append, prepend and cas: `store::StoreKey`), `delete`
//! (`DeleteKey`), `touch` (`TouchKey`), and incr and decr (`arith::Count`). Each method is one
//! type implementing `py::client::method::Method`: its arguments parsed (`parse`), its request,
//! the finish of its outcome, and, where one key goes a shorter way, its own blocking `call`.
//! Each type is generic over its key: `&[u8]`, borrowed from the caller's object, for the
//! blocking call; `method::Kept` (inline when short) for an asyncio call's finish (`later`). Arguments are converted with `py::args`, values with `codec`, the core is
//! called through `io` and errors are built by `py::errors`.

pub(crate) mod arith;
pub(crate) mod delete;
pub(crate) mod get;
pub(crate) mod store;
pub(crate) mod touch;
