//! The multi-key methods, a file per family: get_multi, gets_multi and gat_multi
//! (`fetch::Fetch`), the stores (set, add and replace_multi: `store::StoreMulti`),
//! `delete_multi` (`DeleteMulti`), `incr_multi` (`IncrMulti`) and `touch_multi`
//! (`TouchMulti`), with pylibmc's rules for empty keys, str/bytes twins and failed keys. Each
//! method is one type implementing `py::client::method::Method`, borrowing the key objects the
//! table's row gathered (`fetch_items`, ...) for the blocking call; what its finish needs past
//! an asyncio call is a `*Later` type beside it (the key objects kept). Arguments are converted
//! with `py::args`, values with `codec`, the core is called through `io::detached` and errors
//! are built by `py::errors`.

pub(crate) mod delete;
pub(crate) mod fetch;
pub(crate) mod incr;
pub(crate) mod store;
pub(crate) mod touch;
