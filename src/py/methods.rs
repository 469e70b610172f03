//! The client's methods that make a request of the servers, one row each: its Python name and
//! its asyncio twin's, its signature, its arguments, what it returns, and the family type that
//! parses them (`py::client::method::Method`, declared in the family's file). From each row,
//! `methods!` makes both: the blocking client's method (`_fastmc.client`), which runs the call
//! at once, and the asyncio client's `_`-prefixed one (`_fastmc.aio_client`), which submits it
//! and returns a future. `fastmc.aio.Client` wraps each of those in a coroutine with the
//! blocking method's name and signature (its `_coroutine` table).
//!
//! `server_key` (after `;`) pins the call's keys to that group's server for its length
//! (`args::pin`). `let` bindings before the parse hold what the type borrows for the call (a
//! multi-key method's key objects). The storage commands' rows, alike but for their command,
//! are made by `stores!`. A row's result type is the method's `Value`, and its type's request
//! and finish share one operation: either mismatch fails to compile. Uses `py::client` (the
//! families, `method`) and `py::aio` (its class and `submit`).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::aio::PyAioClient;
use super::args::{pin, sized_items, uint_mask, MaybeArg};
use super::client::admin::{FlushAll, GetStats};
use super::client::method::{blocking, submitted};
use super::client::multi::delete::{delete_multi_items, DeleteMulti};
use super::client::multi::fetch::{fetch_items, Fetch};
use super::client::multi::incr::{incr_multi_items, IncrMulti};
use super::client::multi::store::{StoreMulti, StoreMultiArgs};
use super::client::multi::touch::{touch_multi_items, TouchMulti};
use super::client::single::store::StoreKey;
use super::client::state::PyClient;
use super::client::{lease, near, single};
use crate::protocol::StoreCmd;

/// Both methods of each row (see the module's text).
macro_rules! methods {
    ($(
        $(#[$($attr:tt)*])*
        fn $name:ident / $aio:ident ($slf:ident $(, $arg:ident: $ty:ty)* $(; $pin:ident)?)
            -> $value:ty = $(let $p:pat = $pe:expr;)* $parse:expr;
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
                    $(let $p = $pe;)*
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
                    $(let $p = $pe;)*
                    PyAioClient::submit(this, submitted(this.py(), $parse)?)
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

    /// Get multiple keys at once; misses are absent from the result.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', server_key=None)"
    )]
    fn get_multi / _get_multi(slf, keys: &Bound<'_, PyAny>, key_prefix: MaybeArg<'_, '_>;
                              server_key)
        -> Py<PyDict> = let (prefix, items) = fetch_items(keys, key_prefix, false)?;
                        Fetch::parse(&items, prefix, false, None);

    /// fastmc extension: `get_multi` with CAS tokens: `{key: (value, cas)}`.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', server_key=None)"
    )]
    fn gets_multi / _gets_multi(slf, keys: &Bound<'_, PyAny>, key_prefix: MaybeArg<'_, '_>;
                                server_key)
        -> Py<PyDict> = let (prefix, items) = fetch_items(keys, key_prefix, true)?;
                        Fetch::parse(&items, prefix, true, None);

    /// fastmc extension: `get_multi` that sets the expiry of the keys found.
    #[pyo3(
        signature = (keys, time, key_prefix=MaybeArg::Missing, *, server_key=None),
        text_signature = "($self, keys, time, key_prefix=b'', *, server_key=None)"
    )]
    fn gat_multi / _gat_multi(slf, keys: &Bound<'_, PyAny>, time: &Bound<'_, PyAny>,
                              key_prefix: MaybeArg<'_, '_>; server_key)
        -> Py<PyDict> = let exptime = uint_mask(time)?;
                        let (prefix, items) = fetch_items(keys, key_prefix, false)?;
                        Fetch::parse(&items, prefix, false, Some(exptime));

    /// Delete multiple keys at once; True only if every key was deleted.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', *, noreply=False, server_key=None)"
    )]
    fn delete_multi / _delete_multi(slf, keys: &Bound<'_, PyAny>, key_prefix: MaybeArg<'_, '_>,
                                    noreply: bool; server_key)
        -> bool = let (prefix, items, stopped) = delete_multi_items(keys, key_prefix)?;
                  DeleteMulti::parse(&items, &prefix, stopped, noreply);

    /// Increment multiple keys by a delta; returns None.
    #[pyo3(
        signature = (keys, key_prefix=MaybeArg::Missing, delta=MaybeArg::Missing, *, server_key=None),
        text_signature = "($self, keys, key_prefix=b'', delta=1, *, server_key=None)"
    )]
    fn incr_multi / _incr_multi(slf, keys: &Bound<'_, PyAny>, key_prefix: MaybeArg<'_, '_>,
                                delta: MaybeArg<'_, '_>; server_key)
        -> Py<PyAny> = let (prefix, delta, items) = incr_multi_items(keys, key_prefix, delta)?;
                       IncrMulti::parse(&items, &prefix, delta);

    /// fastmc extension: touch multiple keys; returns the keys that were not found.
    #[pyo3(
        signature = (keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing, *, noreply=false, server_key=None),
        text_signature = "($self, keys, time=0, key_prefix=b'', *, noreply=False, server_key=None)"
    )]
    fn touch_multi / _touch_multi(slf, keys: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                                  key_prefix: MaybeArg<'_, '_>, noreply: bool; server_key)
        -> Py<PyList> = let (exptime, prefix, items) = touch_multi_items(keys, time, key_prefix)?;
                        TouchMulti::parse(&items, exptime, &prefix, noreply);

    /// Flush all data on all servers.
    #[pyo3(signature = (time=MaybeArg::Missing), text_signature = "($self, time=0)")]
    fn flush_all / _flush_all(slf, time: MaybeArg<'_, '_>) -> bool = FlushAll::parse(time);

    /// Retrieve statistics from all memcached servers.
    #[pyo3(
        signature = (stat_args=MaybeArg::Missing, /),
        text_signature = "($self, stat_args=..., /)"
    )]
    fn get_stats / _get_stats(slf, stat_args: MaybeArg<'_, '_>)
        -> Py<PyList> = GetStats::parse(stat_args);

    /// The lease read of `get_or_set`: `(state, value, cas)`.
    #[pyo3(signature = (key, lease, recache, server_key=None))]
    fn _lease_get / _alease_get(slf, key: &Bound<'_, PyAny>, lease: u32, recache: u32; server_key)
        -> lease::LeaseRead = lease::LeaseGet::parse(key, lease, recache);

    /// Give back a lease `_lease_get` won, if the item is unchanged since (its `cas`).
    #[pyo3(signature = (key, cas, stale, server_key=None))]
    fn _lease_release / _alease_release(slf, key: &Bound<'_, PyAny>, cas: u64, stale: bool;
                                        server_key)
        -> bool = lease::LeaseRelease::parse(key, cas, stale);

    /// Mark keys stale in one request: `(every key found, [keys on servers without meta])`;
    /// `invalidate_multi` deletes the latter.
    #[pyo3(signature = (keys, stale_time=0, key_prefix=MaybeArg::Missing, server_key=None))]
    fn _invalidate_multi / _invalidate_multi(slf, keys: &Bound<'_, PyAny>, stale_time: u32,
                                             key_prefix: MaybeArg<'_, '_>; server_key)
        -> (bool, Py<PyList>) = let items = sized_items(keys)?;
                                lease::MarkStale::parse(&items, stale_time, key_prefix);

    /// The near cache's check of a value it holds with `cas`: `(state, value, cas, bytes)`.
    #[pyo3(signature = (key, cas, conditional, server_key=None))]
    fn _near_check / _anear_check(slf, key: &Bound<'_, PyAny>, cas: u64, conditional: bool;
                                  server_key)
        -> near::Check = near::NearCheck::parse(key, cas, conditional);

    /// The near cache's check of many held values by their CAS alone: each key's CAS.
    #[pyo3(signature = (keys, server_key=None))]
    fn _near_cas_multi / _anear_cas_multi(slf, keys: Vec<Bound<'_, PyAny>>; server_key)
        -> Vec<i64> = near::CasMulti::parse(&keys);
}

/// The storage commands' rows: one signature (pylibmc's, and `server_key`) and one type each
/// for the five single-key commands (`StoreKey`) and the three multi-key ones (`StoreMulti`).
macro_rules! stores {
    ($(#[doc = $doc:literal] fn $name:ident / $aio:ident = $cmd:ident;)*) => {
        methods! {
            $(
                #[doc = $doc]
                #[pyo3(
                    signature = (key, val, time=MaybeArg::Missing, min_compress_len=MaybeArg::Missing,
                                 compress_level=MaybeArg::Missing, *, noreply=false, server_key=None),
                    text_signature = "($self, key, val, time=0, min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
                )]
                #[allow(clippy::too_many_arguments)]
                fn $name / $aio(slf, key: &Bound<'_, PyAny>, val: &Bound<'_, PyAny>,
                                time: MaybeArg<'_, '_>, min_compress_len: MaybeArg<'_, '_>,
                                compress_level: MaybeArg<'_, '_>, noreply: bool; server_key)
                    -> bool = StoreKey::parse(slf, StoreCmd::$cmd, key, val, time,
                                              min_compress_len, compress_level, noreply);
            )*
        }
    };
    (multi: $(#[doc = $doc:literal] fn $name:ident / $aio:ident = $cmd:ident;)*) => {
        methods! {
            $(
                #[doc = $doc]
                #[pyo3(
                    signature = (keys, time=MaybeArg::Missing, key_prefix=MaybeArg::Missing,
                                 min_compress_len=MaybeArg::Missing, compress_level=MaybeArg::Missing, *,
                                 noreply=false, server_key=None),
                    text_signature = "($self, keys, time=0, key_prefix=b'', min_compress_len=0, compress_level=-1, *, noreply=False, server_key=None)"
                )]
                #[allow(clippy::too_many_arguments)]
                fn $name / $aio(slf, keys: &Bound<'_, PyAny>, time: MaybeArg<'_, '_>,
                                key_prefix: MaybeArg<'_, '_>, min_compress_len: MaybeArg<'_, '_>,
                                compress_level: MaybeArg<'_, '_>, noreply: bool; server_key)
                    -> Py<PyList> = let args = StoreMultiArgs::parse(keys, time, key_prefix,
                                        min_compress_len, compress_level, noreply)?;
                                    let pairs = args.pairs();
                                    StoreMulti::parse(slf, StoreCmd::$cmd, &args, &pairs);
            )*
        }
    };
}

stores! {
    /// Set a key unconditionally.
    fn set / _set = Set;
    /// Add a key if it does not exist.
    fn add / _add = Add;
    /// Replace a key if it exists.
    fn replace / _replace = Replace;
    /// Append data to a key.
    fn append / _append = Append;
    /// Prepend data to a key.
    fn prepend / _prepend = Prepend;
}

stores! {
    multi:
    /// Set multiple keys at once; returns the keys that were not stored.
    fn set_multi / _set_multi = Set;
    /// Add multiple keys at once; returns the keys that were not stored.
    fn add_multi / _add_multi = Add;
    /// fastmc extension: replace multiple keys at once; returns the keys that were not stored.
    fn replace_multi / _replace_multi = Replace;
}
