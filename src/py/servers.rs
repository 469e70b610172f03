//! Server lists as pylibmc takes them: `(type, host, port[, weight])` tuples and
//! libmemcached-style strings (`host[:port[:weight]]`, `[v6]:port`, `/path`), one transport per
//! client, no UDP; turned into the core's `ServerSpec`s. Conversion only, while attached. Uses
//! pyo3, `client::results::ServerSpec`, `connection::connect::Address` and `py::errors` for its
//! two pylibmc errors.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::errors::{plain_error, NotSupportedError};
use crate::client::results::ServerSpec;
use crate::connection::connect::Address;

const SERVER_TYPE_TCP: i64 = 1;
const SERVER_TYPE_UDP: i64 = 2;
const SERVER_TYPE_UNIX: i64 = 4;

/// The server list of `client(servers, ...)`: one transport, at least one server, no UDP.
pub fn parse_servers(servers: &Bound<'_, PyAny>) -> PyResult<Vec<ServerSpec>> {
    let mut specs = Vec::new();
    let mut kinds = Vec::new();
    for item in servers.try_iter()? {
        let (kind, spec) = parse_server(&item?)?;
        kinds.push(kind);
        specs.push(spec);
    }
    let Some(&first) = kinds.first() else {
        return Err(plain_error("empty server list"));
    };
    if kinds.iter().any(|&k| k != first) {
        return Err(PyValueError::new_err("can't mix transport types"));
    }
    if first == SERVER_TYPE_UDP {
        return Err(NotSupportedError::new_err(
            "fastmc does not support UDP servers (pylibmc cannot read over UDP either)",
        ));
    }
    Ok(specs)
}

fn parse_server(item: &Bound<'_, PyAny>) -> PyResult<(i64, ServerSpec)> {
    if let Ok(t) = item.cast::<PyTuple>() {
        if t.len() != 3 && t.len() != 4 {
            return Err(PyTypeError::new_err(
                "server tuples must be (type, host, port[, weight])",
            ));
        }
        let kind: i64 = t.get_item(0)?.extract()?;
        let host: String = t.get_item(1)?.extract()?;
        let port: i64 = t.get_item(2)?.extract()?;
        let weight: i64 = if t.len() == 4 {
            t.get_item(3)?.extract()?
        } else {
            1
        };
        let weight = (weight as u16).max(1) as u32;
        let address = match kind {
            SERVER_TYPE_UNIX => {
                if port != 0 {
                    return Err(PyValueError::new_err("can't set port on unix sockets"));
                }
                Address::Unix(host)
            }
            SERVER_TYPE_TCP | SERVER_TYPE_UDP => {
                let port = port as u16; // C "H" format: wraps
                Address::Tcp {
                    host,
                    port: if port == 0 { 11211 } else { port },
                }
            }
            _ => return Err(PyValueError::new_err(format!("bad server type: {kind}"))),
        };
        return Ok((kind, ServerSpec { address, weight }));
    }
    let spec: String = if let Ok(b) = item.cast::<PyBytes>() {
        String::from_utf8_lossy(b.as_bytes()).into_owned()
    } else {
        item.extract()?
    };
    parse_spec_string(&spec)
}

/// libmemcached-style `host[:port[:weight]]`, `[v6]:port`, `/path`.
pub fn parse_spec_string(spec: &str) -> PyResult<(i64, ServerSpec)> {
    let bad = || PyValueError::new_err(format!("bad server spec: {spec:?}"));
    if spec.starts_with('/') {
        return Ok((
            SERVER_TYPE_UNIX,
            ServerSpec {
                address: Address::Unix(spec.to_string()),
                weight: 1,
            },
        ));
    }
    let (host, rest) = if let Some(r) = spec.strip_prefix('[') {
        let end = r.find(']').ok_or_else(bad)?;
        (r[..end].to_string(), &r[end + 1..])
    } else {
        match spec.find(':') {
            Some(i) => (spec[..i].to_string(), &spec[i..]),
            None => (spec.to_string(), ""),
        }
    };
    let mut parts = rest.split(':').skip(1);
    let port = match parts.next() {
        Some(p) => p.parse::<u16>().map_err(|_| bad())?,
        None => 11211,
    };
    let weight = match parts.next() {
        Some(w) => w.parse::<u16>().map_err(|_| bad())? as u32,
        None => 1,
    };
    Ok((
        SERVER_TYPE_TCP,
        ServerSpec {
            address: Address::Tcp { host, port },
            weight: weight.max(1),
        },
    ))
}
