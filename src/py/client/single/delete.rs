//! delete: the key converted and checked, the core's delete (a lone `noreply` one without
//! releasing the interpreter), the answer; and the asynchronous half.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::client::op::delete::Delete;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::finish::{one, Finish, Prepared};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::{detached, noreply_write};

/// Delete a key.
pub(crate) fn delete(
    slf: &Bound<'_, PyClient>,
    key: Borrowed<'_, '_, PyAny>,
    noreply: bool,
) -> PyResult<bool> {
    let py = slf.py();
    let this = slf.get();
    let k = delete_key(&key)?;
    if k.is_empty() {
        return Ok(false);
    }
    let r = if noreply || this.flags()?.noreply {
        noreply_write(
            py,
            this,
            |core| core.delete_now(k),
            |core| core.delete_one(k, true),
        )?
    } else {
        detached(py, this, |core| Ok(core.delete_one(k, false)))?
    };
    delete_reply(this, k, r)
}

/// delete's key, converted and checked.
#[inline(always)]
pub(crate) fn delete_key<'k>(key: &'k Bound<'_, PyAny>) -> PyResult<&'k [u8]> {
    let k = str_or_bytes(key, ArgPos::of("delete", 1))?;
    check_key_len(k)?;
    Ok(k)
}

/// What `delete` returns for the core's outcome `r`.
#[inline(always)]
pub(crate) fn delete_reply(
    this: &PyClient,
    k: &[u8],
    r: Option<Result<bool, CoreError>>,
) -> PyResult<bool> {
    match r {
        Some(Ok(d)) => Ok(d),
        Some(Err(CoreError::BadKey(_))) if this.flags()?.verify_keys => Ok(false),
        Some(Err(e)) => Err(errors::op_error(Op::Delete, Some(k), &e)),
        None => Ok(false),
    }
}

/// The asynchronous `delete`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_delete(
    key: &Bound<'_, PyAny>,
    noreply: bool,
) -> PyResult<Prepared<DeleteFinish>> {
    let k = delete_key(key)?;
    if k.is_empty() {
        return Ok(Prepared::Ready(false.into_py_any(key.py())?));
    }
    let finish = DeleteFinish { key: k.to_vec() };
    Ok(Prepared::keys(Delete { noreply }, one(k), finish))
}

/// `delete`: whether the key was there.
pub(crate) struct DeleteFinish {
    pub key: Vec<u8>,
}

impl Finish for DeleteFinish {
    type Op = crate::client::op::delete::Delete;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<bool, CoreError>>,
    ) -> PyResult<Py<PyAny>> {
        delete_reply(slf.get(), &self.key, v.pop())?.into_py_any(slf.py())
    }
}
