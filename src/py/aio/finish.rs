//! What an asynchronous call does with its outcome once it comes back: `Finish` keeps what the
//! conversion needs (the caller's key objects, the default, the command), and `reply` builds
//! the same value or exception the blocking method builds, through the very same functions of
//! `py::client::{single, multi, admin}`. Attached only; no I/O.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::client::keys::Keys;
use crate::client::op::Outcome;
use crate::error::Error as CoreError;
use crate::protocol::StoreCmd;
use crate::py::args::{join_key, key_obj};
use crate::py::client::state::PyClient;
use crate::py::client::{admin, lease, multi, near, single};
use crate::py::errors::{self, Op};
use pyo3::types::PyList;

pub(super) enum Finish {
    Get {
        key: Vec<u8>,
        default: Py<PyAny>,
    },
    Gets {
        key: Vec<u8>,
    },
    Store {
        cmd: StoreCmd,
        key: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    Touch {
        key: Vec<u8>,
    },
    Arith,
    Fetch {
        objs: Vec<Py<PyAny>>,
        /// The key prefix: a value is decoded for its full key (signed values are bound to it).
        prefix: Vec<u8>,
        with_cas: bool,
    },
    StoreMulti {
        cmd: StoreCmd,
        /// Every key of the mapping, in its order.
        keys: Vec<Py<PyAny>>,
        /// The positions of the keys sent, in the order of the request.
        sent: Vec<usize>,
        /// The positions that failed before anything was sent.
        failed_at: Vec<bool>,
    },
    DeleteMulti {
        keys: Keys,
        prefix_len: usize,
        all: bool,
        /// The error pylibmc raises after deleting the keys before it.
        stopped: Option<PyErr>,
    },
    IncrMulti {
        /// Per key, whether pylibmc refuses it too (`multi::refused_by_length`).
        by_length: Vec<bool>,
    },
    TouchMulti {
        empty: Vec<Py<PyAny>>,
        objs: Vec<Py<PyAny>>,
    },
    Flush,
    Stats,
    LeaseGet {
        key: Vec<u8>,
    },
    LeaseRelease {
        key: Vec<u8>,
    },
    NearCheck {
        key: Vec<u8>,
        cas: u64,
    },
    NearCasMulti,
    /// invalidate_multi: the keys sent (for messages) and their objects; the reply is
    /// `(every key found, [keys whose server has no meta protocol])`.
    Invalidate {
        keys: Keys,
        objs: Vec<Py<PyAny>>,
        all: bool,
    },
}

fn bound<'py>(py: Python<'py>, objs: Vec<Py<PyAny>>) -> Vec<Bound<'py, PyAny>> {
    objs.into_iter().map(|o| o.into_bound(py)).collect()
}

impl Finish {
    /// The method's return value (or exception) for `outcome`.
    pub(super) fn reply(self, slf: &Bound<'_, PyClient>, outcome: Outcome) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        match (self, outcome) {
            (Finish::Get { key, default }, Outcome::Get(f)) => {
                single::get_reply(slf, &key, default, f)
            }
            (Finish::Gets { key }, Outcome::Get(f)) => {
                single::gets_reply(slf, &key, f)?.into_py_any(py)
            }
            (Finish::Store { cmd, key }, Outcome::Store(mut v)) => {
                single::store_reply(this, cmd, &key, v.pop())?.into_py_any(py)
            }
            (Finish::Delete { key }, Outcome::Delete(mut v)) => {
                single::delete_reply(this, &key, v.pop())?.into_py_any(py)
            }
            (Finish::Touch { key }, Outcome::Touch(mut v)) => {
                single::touch_reply(&key, v.pop())?.into_py_any(py)
            }
            (Finish::Arith, Outcome::Arith(mut v)) => single::arith_reply(v.pop())?.into_py_any(py),
            (
                Finish::Fetch {
                    objs,
                    prefix,
                    with_cas,
                },
                Outcome::Get(f),
            ) => {
                let objs = bound(py, objs);
                let refs: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
                let full = objs
                    .iter()
                    .map(|o| Ok(join_key(&prefix, key_obj(o)?)))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(multi::fetch_reply(slf, &refs, &full, f, with_cas)?.into_any())
            }
            (
                Finish::StoreMulti {
                    cmd,
                    keys,
                    sent,
                    failed_at,
                },
                Outcome::Store(v),
            ) => {
                let keys = bound(py, keys);
                let k: Vec<&Bound<'_, PyAny>> = keys.iter().collect();
                Ok(
                    multi::store::store_multi_reply(py, this, cmd, &k, &sent, failed_at, v)?
                        .into_any(),
                )
            }
            (
                Finish::DeleteMulti {
                    keys,
                    prefix_len,
                    all,
                    stopped,
                },
                Outcome::Delete(v),
            ) => {
                let refs = keys.refs();
                multi::delete_multi_reply(this, &refs, prefix_len, v, all, stopped)?.into_py_any(py)
            }
            (Finish::IncrMulti { by_length }, Outcome::Arith(v)) => {
                multi::report_arith(v, &by_length, this.flags()?.verify_keys)?;
                Ok(py.None())
            }
            (Finish::TouchMulti { empty, objs }, Outcome::Touch(v)) => {
                let empty = bound(py, empty);
                let objs = bound(py, objs);
                let e: Vec<&Bound<'_, PyAny>> = empty.iter().collect();
                let o: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
                Ok(multi::touch_multi_reply(py, &e, &o, v)?.into_any())
            }
            (Finish::Flush, Outcome::Flush(v)) => admin::flush_reply(v)?.into_py_any(py),
            (Finish::Stats, Outcome::Stats(v)) => Ok(admin::stats_reply(py, v)?.into_any()),
            (Finish::LeaseGet { key }, Outcome::Meta(mut v)) => {
                lease::lease_reply(slf, &key, v.pop())?.into_py_any(py)
            }
            (Finish::LeaseRelease { key }, Outcome::Meta(mut v)) => {
                lease::release_reply(&key, v.pop())?.into_py_any(py)
            }
            (Finish::NearCheck { key, cas }, Outcome::Meta(mut v)) => {
                near::check_reply(slf, &key, cas, v.pop())?.into_py_any(py)
            }
            (Finish::NearCasMulti, Outcome::Meta(v)) => near::cas_reply(v).into_py_any(py),
            (Finish::Invalidate { keys, objs, all }, Outcome::Meta(v)) => {
                let mut all = all;
                let unsupported = PyList::empty(py);
                for ((r, obj), k) in v.into_iter().zip(objs).zip(keys.refs()) {
                    match r {
                        Ok(out) => all &= out.code == *b"HD",
                        Err(CoreError::NotSupported(_)) => unsupported.append(obj)?,
                        Err(e) => return Err(errors::op_error(Op::Delete, Some(k), &e)),
                    }
                }
                (all, unsupported).into_py_any(py)
            }
            _ => Err(errors::no_result()),
        }
    }
}
