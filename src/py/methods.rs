//! The client's methods that make a request of the servers, one row each: its Python name and
//! its asyncio twin's, its signature, its arguments, what it returns, and the family type that
//! parses them (`py::client::method::Method`, declared in the family's file). From each row,
//! `methods!` makes both: the blocking client's method (`_fastmc.client`), which runs the call
//! at once, and the asyncio client's `_`-prefixed one (`_fastmc.aio_client`), which submits it
//! and returns a future. `fastmc.aio.Client` wraps each of those in a coroutine with the
//! blocking method's name and signature (its `_coroutine` table).
//!
//! `server_key` (after `;`) pins the call's keys to that group's server for its length
//! (`args::pin`). Uses `py::client` (the families, `method`) and `py::aio` (its class and
//! `submit_any`).

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::aio::PyAioClient;
use super::args::{pin, MaybeArg};
use super::client::method::{blocking, submitted};
use super::client::single;
use super::client::single::store::StoreKey;
use super::client::state::PyClient;
use crate::protocol::StoreCmd;

/// Both methods of each row (see the module's text).
macro_rules! methods {
    ($(
        $(#[$($attr:tt)*])*
        fn $name:ident / $aio:ident ($slf:ident $(, $arg:ident: $ty:ty)* $(; $pin:ident)?)
            -> $value:ty = $parse:expr;
    )*) => {
        #[pymethods]
        impl PyClient {
            $(
                $(#[$($attr)*])*
                fn $name(
                    this: &Bound<'_, Self>,
                    $($arg: $ty,)*
                    $($pin: Option<&Bound<'_, PyAny>>,)?
                ) -> PyResult<$value> {
                    $(let _pin = pin($pin)?;)?
                    #[allow(unused_variables)]
                    let $slf = this;
                    blocking(this, $parse)
                }
            )*
        }

        #[pymethods]
        impl PyAioClient {
            $(
                $(#[$($attr)*])*
                fn $aio(
                    this: &Bound<'_, Self>,
                    $($arg: $ty,)*
                    $($pin: Option<&Bound<'_, PyAny>>,)?
                ) -> PyResult<Py<PyAny>> {
                    $(let _pin = pin($pin)?;)?
                    #[allow(unused_variables)]
                    let $slf = this.as_super();
                    PyAioClient::submit_any(this, submitted(this.py(), $parse)?)
                }
            )*
        }
    };
}

methods! {
    /// Retrieve a key from a memcached.
    #[pyo3(signature = (key, default=None, /, server_key=None))]
    fn get / _get(slf, key: &Bound<'_, PyAny>, default: Option<Py<PyAny>>; server_key)
        -> Py<PyAny> = single::get::Get::parse(key, default);

    /// Retrieve a key and cas_id from a memcached.
    #[pyo3(signature = (key, /, server_key=None))]
    fn gets / _gets(slf, key: &Bound<'_, PyAny>; server_key)
        -> (Py<PyAny>, Py<PyAny>) = single::get::Gets::parse(slf, key);

    /// Set a key unconditionally.
    #[pyo3(
        signature = (key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                     compress_level=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, key, val, time=0, min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn set / _set(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                 min_compress_len: MaybeArg<'_, '_>, compress_level: MaybeArg<'_, '_>,
                 noreply: bool; server_key)
        -> bool = StoreKey::parse(slf, StoreCmd::Set, key, val, time, min_compress_len,
                                  compress_level, noreply);

    /// Add a key if it does not exist.
    #[pyo3(
        signature = (key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                     compress_level=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, key, val, time=0, min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn add / _add(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                 min_compress_len: MaybeArg<'_, '_>, compress_level: MaybeArg<'_, '_>,
                 noreply: bool; server_key)
        -> bool = StoreKey::parse(slf, StoreCmd::Add, key, val, time, min_compress_len,
                                  compress_level, noreply);

    /// Replace a key if it exists.
    #[pyo3(
        signature = (key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                     compress_level=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, key, val, time=0, min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn replace / _replace(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                 min_compress_len: MaybeArg<'_, '_>, compress_level: MaybeArg<'_, '_>,
                 noreply: bool; server_key)
        -> bool = StoreKey::parse(slf, StoreCmd::Replace, key, val, time, min_compress_len,
                                  compress_level, noreply);

    /// Append data to a key.
    #[pyo3(
        signature = (key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                     compress_level=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, key, val, time=0, min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn append / _append(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                 min_compress_len: MaybeArg<'_, '_>, compress_level: MaybeArg<'_, '_>,
                 noreply: bool; server_key)
        -> bool = StoreKey::parse(slf, StoreCmd::Append, key, val, time, min_compress_len,
                                  compress_level, noreply);

    /// Prepend data to a key.
    #[pyo3(
        signature = (key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                     compress_level=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, key, val, time=0, min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
    )]
    // Python's signature, as pylibmc's (and `server_key`)
    #[allow(clippy::too_many_arguments)]
    fn prepend / _prepend(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                 min_compress_len: MaybeArg<'_, '_>, compress_level: MaybeArg<'_, '_>,
                 noreply: bool; server_key)
        -> bool = StoreKey::parse(slf, StoreCmd::Prepend, key, val, time, min_compress_len,
                                  compress_level, noreply);

    /// Attempt to compare-and-store a key by CAS ID.
    #[pyo3(
        signature = (key, val, cas, time=MaybeArg::Missing, *, server_key=None),
        text_signature = "($self, key, val, cas, time=0, *, server_key=None)"
    )]
    fn cas / _cas(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>, cas: &Bound<'_, PyAny>,
                  time: MaybeArg<'_, '_>; server_key)
        -> bool = StoreKey::parse_cas(slf, key, val, cas, time);

    /// Delete a key.
    /// The rest of the positional arguments is gathered only for pylibmc's message ("delete()
    /// takes exactly 1 argument (N given)"): with one argument no tuple is built.
    #[pyo3(
        signature = (key = MaybeArg::Missing, /, *rest, noreply=false, server_key=None),
        text_signature = "($self, key, /, *, noreply=False, server_key=None)"
    )]
    fn delete / _delete(slf, key: MaybeArg<'_, '_>, rest: &Bound<'_, PyTuple>, noreply: bool;
                        server_key)
        -> bool = single::delete::DeleteKey::parse(&*key.exactly_one(rest, "delete")?, noreply);

    /// Change the expiry time of a key.
    #[pyo3(signature = (key, time, /, *, noreply=false, server_key=None))]
    fn touch / _touch(slf, key: &Bound<'_, PyAny>, time: &Bound<'_, PyAny>, noreply: bool;
                      server_key)
        -> bool = single::touch::TouchKey::parse(key, time, noreply);

    /// Increment a key by a delta; with `initial=`, a missing key is created at that value (which
    /// is returned) with expiry `time`, in one round trip where the server speaks meta.
    #[pyo3(
        signature = (key, delta=MaybeArg::Missing, /, *, initial=None, time=MaybeArg::Missing, server_key=None),
        text_signature = "($self, key, delta=1, /, *, initial=None, time=0, server_key=None)"
    )]
    fn incr / _incr(slf, key: &Bound<'_, PyAny>, delta: MaybeArg<'_, '_>,
                    initial: Option<&Bound<'_, PyAny>>, time: MaybeArg<'_, '_>; server_key)
        -> u64 = single::arith::Count::parse(true, key, delta, initial, time);

    /// Decrement a key by a delta; with `initial=`, a missing key is created at that value (which
    /// is returned) with expiry `time`, in one round trip where the server speaks meta.
    #[pyo3(
        signature = (key, delta=MaybeArg::Missing, /, *, initial=None, time=MaybeArg::Missing, server_key=None),
        text_signature = "($self, key, delta=1, /, *, initial=None, time=0, server_key=None)"
    )]
    fn decr / _decr(slf, key: &Bound<'_, PyAny>, delta: MaybeArg<'_, '_>,
                    initial: Option<&Bound<'_, PyAny>>, time: MaybeArg<'_, '_>; server_key)
        -> u64 = single::arith::Count::parse(false, key, delta, initial, time);

    /// fastmc extension: get a key and set its expiry in one round trip.
    #[pyo3(signature = (key, time, default=None, *, server_key=None))]
    fn gat / _gat(slf, key: &Bound<'_, PyAny>, time: &Bound<'_, PyAny>,
                  default: Option<Py<PyAny>>; server_key)
        -> Py<PyAny> = single::get::Get::parse_gat(key, time, default);
}
