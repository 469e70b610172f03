//! The multi-key methods, a file per family: get_multi and gets_multi (`fetch`), the stores
//! (set, add and replace_multi: `store`), `delete_multi`, `incr_multi` and `touch_multi`, with
//! pylibmc's rules for empty keys, str/bytes twins and failed keys. Each file holds its methods'
//! blocking body, their argument conversion and reply function, and their asynchronous half:
//! the call prepared (`prepare_*`) and its `Finish` (see `py::client::finish`). Arguments are
//! converted with `py::args`, values with `codec`, the core is called through `io::detached` and
//! errors are built by `py::errors`.

pub(crate) mod delete;
pub(crate) mod fetch;
pub(crate) mod incr;
pub(crate) mod store;
pub(crate) mod touch;
