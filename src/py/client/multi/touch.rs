//! touch_multi: the keys and time converted, the core's touches, the keys not touched; and the
//! asynchronous half.

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::client::keys::Keys;
use crate::client::op::touch::Touch;
use crate::py::args::*;
use crate::py::client::finish::{bound, unbind, Finish, Prepared};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};
use crate::py::io::detached;

/// fastmc extension: touch multiple keys; returns the keys that were not found.
pub(crate) fn touch_multi(
    slf: &Bound<'_, PyClient>,
    keys: &Bound<'_, PyAny>,
    time: MaybeArg<'_, '_>,
    key_prefix: MaybeArg<'_, '_>,
    noreply: bool,
) -> PyResult<Py<PyList>> {
    let py = slf.py();
    let this = slf.get();
    let (exptime, prefix, items) = touch_multi_items(keys, time, key_prefix)?;
    let keys = multi_keys(&items, &prefix, true)?;
    let refs = keys.refs();
    let results = detached(py, this, |core| {
        Ok(core.touch_multi(&refs, exptime, noreply))
    })?;
    touch_multi_reply(py, &keys.empty, &keys.objs, results)
}

/// touch_multi's time, prefix and keys, converted as set_multi converts its arguments: the time
/// (`I`), the prefix (`s#`), then the keys.
pub(crate) fn touch_multi_items<'py>(
    keys: &Bound<'py, PyAny>,
    time: MaybeArg<'_, '_>,
    key_prefix: MaybeArg<'_, '_>,
) -> PyResult<(u32, Vec<u8>, Vec<Bound<'py, PyAny>>)> {
    let exptime = time.map_or(0, uint_mask)?;
    let prefix = prefix_bytes(key_prefix, ArgPos::nth(3))?;
    Ok((exptime, prefix, sized_items(keys)?))
}

/// What touch_multi returns for the core's outcomes (`empty`: keys never sent).
pub(crate) fn touch_multi_reply(
    py: Python<'_>,
    empty: &[&Bound<'_, PyAny>],
    objs: &[&Bound<'_, PyAny>],
    results: Vec<crate::error::Result<bool>>,
) -> PyResult<Py<PyList>> {
    let failed = PyList::empty(py);
    for e in empty {
        failed.append(e)?;
    }
    let mut first_err = None;
    for (obj, r) in objs.iter().zip(results) {
        match r {
            Ok(true) => {}
            Ok(false) => failed.append(obj)?,
            Err(e) => {
                failed.append(obj)?;
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        let err = errors::op_error(Op::TouchMulti, None, &e);
        return Err(errors::with_failed_keys(py, err, &failed));
    }
    Ok(failed.unbind())
}

/// The asynchronous `touch_multi`: its arguments converted as the blocking method converts them,
/// into a request and its finish (or its answer, when no I/O is needed).
pub(crate) fn prepare_touch_multi(
    keys: &Bound<'_, PyAny>,
    time: MaybeArg<'_, '_>,
    key_prefix: MaybeArg<'_, '_>,
    noreply: bool,
) -> PyResult<Prepared<TouchMultiFinish>> {
    let (exptime, prefix, items) = touch_multi_items(keys, time, key_prefix)?;
    let keys = multi_keys(&items, &prefix, true)?;
    let finish = TouchMultiFinish {
        empty: unbind(&keys.empty),
        objs: unbind(&keys.objs),
    };
    let op = Touch { exptime, noreply };
    Ok(Prepared::keys(op, Keys::of(&keys.full), finish))
}

/// `touch_multi`: the keys not touched.
pub(crate) struct TouchMultiFinish {
    pub empty: Vec<Py<PyAny>>,
    pub objs: Vec<Py<PyAny>>,
}

impl Finish for TouchMultiFinish {
    type Op = crate::client::op::touch::Touch;
    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<bool>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (empty, objs) = (bound(py, self.empty), bound(py, self.objs));
        let e: Vec<&Bound<'_, PyAny>> = empty.iter().collect();
        let o: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
        Ok(touch_multi_reply(py, &e, &o, v)?.into_any())
    }
}
