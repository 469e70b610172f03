//! touch_multi: the keys and time converted, the core's touches, the keys not touched; and the
//! asynchronous half.

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::client::op::touch::Touch;
use crate::py::args::*;
use crate::py::client::method::{bound, unbind, Finish, Method, Parsed};
use crate::py::client::state::PyClient;
use crate::py::errors::{self, Op};

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

/// touch_multi (`touch_multi(keys, time=0, key_prefix=b'', *, noreply=False)`): the keys
/// that were not found.
pub(crate) struct TouchMulti<'a, 'py> {
    keys: MultiKeys<'a, 'py>,
    op: Touch,
}

impl<'a, 'py> TouchMulti<'a, 'py> {
    /// `items`, `exptime` and `prefix` as `touch_multi_items` converted them.
    pub(crate) fn parse(
        items: &'a [Bound<'py, PyAny>],
        exptime: u32,
        prefix: &[u8],
        noreply: bool,
    ) -> PyResult<Parsed<Self>> {
        Ok(Parsed::Call(TouchMulti {
            keys: multi_keys(items, prefix, true)?,
            op: Touch { exptime, noreply },
        }))
    }
}

impl Finish for TouchMulti<'_, '_> {
    type Op = Touch;
    type Value = Py<PyList>;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<bool>>,
    ) -> PyResult<Py<PyList>> {
        touch_multi_reply(slf.py(), &self.keys.empty, &self.keys.objs, v)
    }
}

impl Method for TouchMulti<'_, '_> {
    type Later = TouchMultiLater;

    type Wire<'w>
        = Vec<&'w [u8]>
    where
        Self: 'w;

    fn op(&self) -> Touch {
        self.op
    }

    fn wire(&self) -> Vec<&[u8]> {
        self.keys.refs()
    }

    fn later(self) -> TouchMultiLater {
        TouchMultiLater {
            empty: unbind(&self.keys.empty),
            objs: unbind(&self.keys.objs),
        }
    }
}

/// A `TouchMulti` finished later: the key objects kept.
pub(crate) struct TouchMultiLater {
    empty: Vec<Py<PyAny>>,
    objs: Vec<Py<PyAny>>,
}

impl Finish for TouchMultiLater {
    type Op = Touch;
    type Value = Py<PyList>;

    fn finish(
        self,
        slf: &Bound<'_, PyClient>,
        v: Vec<crate::error::Result<bool>>,
    ) -> PyResult<Py<PyList>> {
        let py = slf.py();
        let (empty, objs) = (bound(py, self.empty), bound(py, self.objs));
        let e: Vec<&Bound<'_, PyAny>> = empty.iter().collect();
        let o: Vec<&Bound<'_, PyAny>> = objs.iter().collect();
        touch_multi_reply(py, &e, &o, v)
    }
}
