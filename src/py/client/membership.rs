//! `set_servers`: a new server list, converted as the constructor converts it (attached), then
//! applied by the core detached (`Client::set_servers`: one atomic swap, no I/O). The
//! `server_added`/`server_removed` events it notes are delivered by `io::detached` once the
//! core call has returned. Uses `py::servers`, `py::errors`, `py::io`.

use pyo3::prelude::*;

use super::state::PyClient;
use crate::client::topology::Membership;
use crate::py::errors::{self, Op};
use crate::py::io::detached;
use crate::py::servers::parse_servers;

/// `(added, removed)` as `host:port` names, in list order.
pub(crate) type Change = (Vec<String>, Vec<String>);

/// fastmc extension: replace the server list; returns the servers added and removed.
pub(crate) fn set_servers(
    slf: &Bound<'_, PyClient>,
    servers: &Bound<'_, PyAny>,
) -> PyResult<Change> {
    let specs = parse_servers(servers)?;
    let change: Membership = detached(slf.py(), slf.get(), |core| {
        core.set_servers(specs)
            .map_err(|e| errors::op_error(Op::ServerAdd, None, &e))
    })?;
    let names =
        |v: Vec<crate::connection::connect::Address>| v.iter().map(|a| a.display_name()).collect();
    Ok((names(change.added), names(change.removed)))
}
