//! Whole-client methods: flush_all, get_stats (with libmemcached's 22 `STAT_KEYS`),
//! disconnect_all, hash, an item's metadata for operators (`debug`), and the native serialize/deserialize that subclasses may override. The
//! core is called through `io::detached`, errors are built by `py::errors`. Uses `py::args`,
//! `py::serde` and the core's `Error`.

use std::sync::atomic::Ordering;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::state::PyClient;
use crate::client::op::admin::{Flush, Stats};
use crate::client::op::meta::MetaVerb;
use crate::client::op::Kind;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::method::{Finish, Method, Parsed};
use crate::py::errors::{self, Op};
use crate::py::io::detached;
use crate::py::serde;
use crate::py::stored;

/// The 22 stats libmemcached parses (and so pylibmc returns), in its order.
const STAT_KEYS: [&str; 22] = [
    "pid",
    "uptime",
    "time",
    "version",
    "pointer_size",
    "rusage_user",
    "rusage_system",
    "curr_items",
    "total_items",
    "bytes",
    "curr_connections",
    "total_connections",
    "connection_structures",
    "cmd_get",
    "cmd_set",
    "get_hits",
    "get_misses",
    "evictions",
    "bytes_read",
    "bytes_written",
    "limit_maxbytes",
    "threads",
];

/// What libmemcached's stat struct makes of one of `STAT_KEYS` (and so what pylibmc returns):
/// one the server did not send keeps the struct's initial value (`pid` -1, `version` empty, the
/// `rusage_` times 0.0, the rest 0), as for a group (`stats items`) that has none of them; a
/// number that is not one (`stats settings`' `evictions on`) is what `strtoull` reads of it.
fn stat_value<'v>(name: &str, value: Option<&'v [u8]>) -> &'v [u8] {
    let Some(v) = value else {
        return match name {
            "pid" => b"-1",
            "version" => b"",
            "rusage_user" | "rusage_system" => b"0.0",
            _ => b"0",
        };
    };
    if matches!(name, "version" | "rusage_user" | "rusage_system") {
        return v;
    }
    let sign = usize::from(name == "pid" && v.first() == Some(&b'-'));
    let digits = v[sign..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        b"0"
    } else {
        &v[..sign + digits]
    }
}

/// flush_all's time, as pylibmc converts it.
pub(crate) fn flush_delay(time: MaybeArg<'_, '_>) -> PyResult<u32> {
    let delay = time.map_or(0, |t| exact_long(t, ArgPos::of("flush_all", 1)))?;
    Ok(delay.clamp(0, u32::MAX as i64) as u32)
}

/// What flush_all returns for the core's outcomes.
pub(crate) fn flush_reply(results: Vec<crate::error::Result<()>>) -> PyResult<bool> {
    if let Some(e) = results.into_iter().find_map(|r| r.err()) {
        return Err(errors::some_errors(Op::FlushAll, &e));
    }
    Ok(true)
}

/// The most connections `warm_up` opens per server: what a server's pool keeps idle.
const MOST_WARM: usize = 64;

/// Open and check `connections` connections to every server (`Client::warm_up`); the servers
/// that failed, by address, each with the exception its failure raises elsewhere.
pub(super) fn warm_up(slf: &Bound<'_, PyClient>, connections: usize) -> PyResult<Py<PyDict>> {
    if !(1..=MOST_WARM).contains(&connections) {
        return Err(PyValueError::new_err(format!(
            "connections must be between 1 and {MOST_WARM}"
        )));
    }
    let py = slf.py();
    let report = detached(py, slf.get(), |core| Ok(core.warm_up(connections)))?;
    let failed = PyDict::new(py);
    for (addr, r) in report {
        if let Err(e) = r {
            let exc = errors::op_error(Op::WarmUp, None, &e).into_value(py);
            failed.set_item(addr.display_name(), exc)?;
        }
    }
    Ok(failed.unbind())
}

/// Each server's answer to `stats [GROUP]`, with its address.
fn fetch_stats(
    slf: &Bound<'_, PyClient>,
    stat_args: MaybeArg<'_, '_>,
) -> PyResult<
    Vec<(
        crate::connection::connect::Address,
        crate::error::Result<crate::client::results::Stats>,
    )>,
> {
    let args = stats_args(stat_args)?;
    detached(slf.py(), slf.get(), |core| Ok(core.stats(&args)))
}

/// Every stat each server sent for the group, in its order, as `(label, [(name, value)])`
/// (the CLI's `stats GROUP`: `get_stats` keeps pylibmc's 22 fields, which a group has none of).
pub(super) fn stats_lines(
    slf: &Bound<'_, PyClient>,
    stat_args: MaybeArg<'_, '_>,
) -> PyResult<Py<PyList>> {
    let py = slf.py();
    let out = PyList::empty(py);
    for (i, (addr, r)) in fetch_stats(slf, stat_args)?.into_iter().enumerate() {
        let stats = stats_or_error(r)?;
        let lines = PyList::empty(py);
        for (name, value) in &stats {
            lines.append((PyBytes::new(py, name), PyBytes::new(py, value)))?;
        }
        let label = format!("{} ({i})", addr.display_name());
        out.append((PyBytes::new(py, label.as_bytes()), lines))?;
    }
    Ok(out.unbind())
}

/// A server's stats, or get_stats' error for them.
fn stats_or_error(
    r: crate::error::Result<crate::client::results::Stats>,
) -> PyResult<crate::client::results::Stats> {
    match r {
        Ok(s) => Ok(s),
        Err(CoreError::UnknownCommand) | Err(CoreError::ClientError(_)) => {
            Err(errors::invalid_arguments(Op::GetStats, None))
        }
        Err(e) => Err(errors::some_errors(Op::GetStats, &e)),
    }
}

/// get_stats's group, as pylibmc converts and checks it.
pub(crate) fn stats_args(stat_args: MaybeArg<'_, '_>) -> PyResult<Vec<u8>> {
    let args = stat_args.map_or(None, |a| {
        Ok(Some(
            c_str(a, ArgPos::of("get_stats", 1))?.as_bytes().to_vec(),
        ))
    })?;
    // libmemcached refuses an empty group given (no group at all is plain "stats").
    if args.as_ref().is_some_and(Vec::is_empty) {
        return Err(errors::bad_key(Op::GetStats, errors::BAD_KEY_DETAIL));
    }
    Ok(args.unwrap_or_default())
}

/// What get_stats returns for the core's outcomes, one per server address.
pub(crate) fn stats_reply(
    py: Python<'_>,
    results: Vec<(
        crate::connection::connect::Address,
        crate::error::Result<crate::client::results::Stats>,
    )>,
) -> PyResult<Py<PyList>> {
    let out = PyList::empty(py);
    for (i, (addr, r)) in results.into_iter().enumerate() {
        let stats = stats_or_error(r)?;
        let d = PyDict::new(py);
        for name in STAT_KEYS {
            let v = stats
                .iter()
                .find(|(n, _)| n.as_slice() == name.as_bytes())
                .map(|(_, v)| v.as_slice());
            d.set_item(name, PyBytes::new(py, stat_value(name, v)))?;
        }
        let label = format!("{} ({i})", addr.display_name());
        out.append((PyBytes::new(py, label.as_bytes()), d))?;
    }
    Ok(out.unbind())
}

/// Disconnect from all servers and reset their failure state.
pub(super) fn disconnect_all(slf: &Bound<'_, PyClient>) -> PyResult<()> {
    detached(slf.py(), slf.get(), |core| {
        core.disconnect_all();
        Ok(())
    })
}

/// The index of the server a key maps to.
pub(super) fn hash(slf: &Bound<'_, PyClient>, key: &Bound<'_, PyAny>) -> PyResult<usize> {
    let k = str_or_bytes(key, ArgPos::of("hash", 1))?;
    detached(slf.py(), slf.get(), |core| Ok(core.hash_index(k)))
}

/// fastmc extension: what the server holds of `key` (memcached's meta debug command, `me`):
/// `{"exp": ..., "la": ..., "cas": ..., "fetch": bool, "cls": ..., "size": ...}` as it reports
/// them (numbers as ints, `yes`/`no` as bools, anything else as str), or None for a missing key.
pub(super) fn debug(
    slf: &Bound<'_, PyClient>,
    key: &Bound<'_, PyAny>,
    server_key: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyDict>>> {
    let py = slf.py();
    let k = key_obj(key)?;
    check_key_len(k)?;
    let _pin = pin(server_key)?;
    let r = detached(py, slf.get(), |core| {
        Ok(core.meta_command(MetaVerb::Debug, &[k], b"").pop())
    })?;
    let out = match r {
        Some(Ok(out)) => out,
        Some(Err(e)) => return Err(errors::op_error(Op::Debug, Some(k), &e)),
        None => return Err(errors::no_result()),
    };
    match &out.code {
        b"EN" => return Ok(None),
        b"ME" => {}
        code => {
            let e = CoreError::Protocol(format!("{} to a debug command", ascii(code)));
            return Err(errors::op_error(Op::Debug, Some(k), &e));
        }
    }
    let d = PyDict::new(py);
    // The key comes first, then `name=value` fields.
    for field in out.flags.split(|&b| b == b' ').skip(1) {
        let Some(eq) = field.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (name, value) = (ascii(&field[..eq]), &field[eq + 1..]);
        let number = std::str::from_utf8(value)
            .ok()
            .and_then(|s| s.parse::<i64>().ok());
        match (value, number) {
            (b"yes", _) => d.set_item(name, true)?,
            (b"no", _) => d.set_item(name, false)?,
            (_, Some(n)) => d.set_item(name, n)?,
            (v, None) => d.set_item(name, ascii(v))?,
        }
    }
    Ok(Some(d.unbind()))
}

fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Serialize a value to (bytes, flags) the way pylibmc does (no compression).
pub(super) fn serialize(
    slf: &Bound<'_, PyClient>,
    value: &Bound<'_, PyAny>,
) -> PyResult<(Py<PyBytes>, u32)> {
    let py = slf.py();
    let this = slf.get();
    let protocol = this.pickle_protocol.load(Ordering::Relaxed);
    let (data, flags) = serde::serialize(py, value, &this.values(), protocol)?;
    Ok((PyBytes::new(py, &data).unbind(), flags))
}

/// Deserialize (bytes, flags) the way pylibmc does (no decompression).
pub(super) fn deserialize(
    slf: &Bound<'_, PyClient>,
    data: &Bound<'_, PyAny>,
    flags: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let flags = uint_mask(flags)?;
    if flags & stored::TYPE_MASK == 0 {
        return Ok(data.clone().unbind());
    }
    let bytes = data.cast::<PyBytes>().map_err(|_| {
        PyTypeError::new_err(format!(
            "a bytes-like object is required, not '{}'",
            type_name(data)
        ))
    })?;
    // The pickle mode and the allow list apply (no key here, so no signature).
    let this = slf.get();
    let max = this.max_inflate.load(Ordering::Relaxed);
    serde::deserialize(
        py,
        bytes.as_bytes(),
        flags,
        &this.values(),
        None,
        false,
        max,
    )
}

/// flush_all (`flush_all(time=0)`): whether every server flushed.
pub(crate) struct FlushAll {
    delay: u32,
}

impl FlushAll {
    pub(crate) fn parse(time: MaybeArg<'_, '_>) -> PyResult<Parsed<Self>> {
        Ok(Parsed::Call(FlushAll {
            delay: flush_delay(time)?,
        }))
    }
}

impl Finish for FlushAll {
    type Op = Flush;
    type Value = bool;

    fn finish(self, _: &Bound<'_, PyClient>, v: Vec<crate::error::Result<()>>) -> PyResult<bool> {
        flush_reply(v)
    }
}

impl Method for FlushAll {
    type Later = FlushAll;

    type Wire<'w> = ();

    fn op(&self) -> Flush {
        Flush { delay: self.delay }
    }

    fn wire(&self) {}

    fn later(self) -> FlushAll {
        self
    }
}

/// get_stats (`get_stats()` or `get_stats(group)`): `[(server, {name: value})]`.
pub(crate) struct GetStats {
    args: Vec<u8>,
}

impl GetStats {
    pub(crate) fn parse(stat_args: MaybeArg<'_, '_>) -> PyResult<Parsed<Self>> {
        Ok(Parsed::Call(GetStats {
            args: stats_args(stat_args)?,
        }))
    }
}

impl Finish for GetStats {
    type Op = Stats;
    type Value = Py<PyList>;

    fn finish(self, slf: &Bound<'_, PyClient>, v: <Stats as Kind>::Output) -> PyResult<Py<PyList>> {
        stats_reply(slf.py(), v)
    }
}

impl Method for GetStats {
    type Later = GetStats;

    type Wire<'w> = ();

    fn op(&self) -> Stats {
        Stats {
            args: self.args.as_slice().into(),
        }
    }

    fn wire(&self) {}

    fn later(self) -> GetStats {
        self
    }
}
