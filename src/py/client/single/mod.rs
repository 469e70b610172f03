//! The single-key methods, a file per family: get and gets (`get`), the stores (set, add,
//! replace, append, prepend and cas, through one `store` and its `StoreArgs`), `delete`,
//! `touch`, and incr and decr (`arith`). Each file holds its methods' blocking body, their
//! argument conversion and reply function, and their asynchronous half: the call prepared
//! (`prepare_*`) and its `Finish` (see `py::client::finish`). Arguments are converted with
//! `py::args`, values with `codec`, the core is called through `io::detached` and errors are
//! built by `py::errors`.

pub(crate) mod arith;
pub(crate) mod delete;
pub(crate) mod get;
pub(crate) mod store;
pub(crate) mod touch;
