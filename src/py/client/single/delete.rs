//! delete: the key converted and checked, the core's delete (a lone `noreply` one without
//! releasing the interpreter), the answer; and the asynchronous half.

use std::ops::Deref;

use pyo3::prelude::*;

use crate::client::op::delete::Delete;
use crate::error::Error as CoreError;
use crate::py::args::*;
use crate::py::client::method::{Finish, Kept, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::{detached, noreply_write};

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

/// `delete(key, *, noreply=False)`: whether the key was there.
pub(crate) struct DeleteKey<K> {
    key: K,
    noreply: bool,
}

impl<'k> DeleteKey<&'k [u8]> {
    #[inline(always)]
    pub(crate) fn parse(key: &'k Bound<'_, PyAny>, noreply: bool) -> PyResult<Parsed<Self>> {
        let k = delete_key(key)?;
        if k.is_empty() {
            return Ok(Parsed::Ready(false));
        }
        Ok(Parsed::Call(DeleteKey { key: k, noreply }))
    }
}

impl<K: Deref<Target = [u8]>> Finish for DeleteKey<K> {
    type Op = Delete;
    type Value = bool;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        mut v: Vec<Result<bool, CoreError>>,
    ) -> PyResult<bool> {
        delete_reply(slf.get(), &self.key, v.pop())
    }
}

impl Method for DeleteKey<&[u8]> {
    type Later = DeleteKey<Kept>;

    type Wire<'w>
        = [&'w [u8]; 1]
    where
        Self: 'w;

    fn op(&self) -> Delete {
        Delete {
            noreply: self.noreply,
        }
    }

    fn wire(&self) -> [&[u8]; 1] {
        [self.key]
    }

    fn later(self) -> DeleteKey<Kept> {
        DeleteKey {
            key: Kept::from_slice(self.key),
            noreply: self.noreply,
        }
    }

    /// One key's own call: a `noreply` delete sent at once when it can be
    /// (`io::noreply_write`), else `Client::delete_one`.
    #[inline(always)]
    fn call(self, slf: &Bound<'_, PyClient>) -> PyResult<bool> {
        let (py, this, k) = (slf.py(), slf.get(), self.key);
        let r = if self.noreply || this.flags()?.noreply {
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
}
