"""The clients in front of a near cache (``fastmc.NearCache``, docs/near-cache.md).

``near_class`` and ``near_aio_class`` make, from a client class, a subclass whose reads ask the
near cache first and whose writes drop what it holds, before they start and again once they
end (so a fetch that overlapped a write keeps nothing). A client without a near cache is not
touched: its class stays the plain one, so its calls cost what they did.

A read is written once, as a generator of the I/O steps it needs (``_read``): a plain get, a
check, a batch fetch. The blocking client runs the steps with its methods, the asyncio client
awaits them; a near hit is answered before any step, so on the asyncio client it never
suspends. A check is one ``mg <key> C<cas> v f c`` where the server has memcached 1.6.40's
conditional fetch (the value comes back only if it changed), ``mg <key> c`` (the CAS alone,
then a fetch if it changed) on an older server, and a ``gets`` where the server has no meta
protocol (twemproxy, the binary protocol). The native half is ``src/py/client/near.rs``.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, Callable

from ._keyargs import METHODS, READS, call_keys
from ._steps import adrive, drive
from .near import _IMMUTABLE, CHECK, FILL, HIT, PASS, NearCache, _Entry, near_key, unreachable

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    # A step of a read: its name and arguments; what it returns is sent back.
    _Step: TypeAlias = tuple[Any, ...]
    _Steps: TypeAlias = Generator[_Step, Any, Any]

# The writes: every key method that changes items (gat and touch change an expiry, invalidate
# a stale mark). get_or_set's lease rows are wrapped as writes too, by each client.
WRITES = tuple(name for name in METHODS if name not in READS and name != "flush_all")
# Calls after which nothing held may be right: forget everything.
CLEARING = ("flush_all", "set_servers", "set_behaviors")


def written_keys(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, list[bytes]]:
    """The keys a write names (as ``near_key`` gives them), and its first argument, made a list
    if it was a one-time iterator (so the native method still sees every key; one passed by
    name is replaced in ``kwargs``). A call that names no keys drops none (it raises)."""
    try:
        keys, prefix = call_keys(name, args, kwargs)
    except (KeyError, IndexError):
        return (args[0] if args else None), []
    if not isinstance(keys, (Mapping, list, tuple, set, frozenset)):
        try:
            keys = list(keys)
        except TypeError:
            return keys, []
        if not args:
            kwargs["keys"] = keys
    p = near_key(prefix) or b""
    out = []
    for k in keys:
        nk = near_key(k)
        if nk is not None:
            out.append(p + nk)
    return (keys[0] if METHODS[name][1] < 0 else keys), out


# -- a read, written once ------------------------------------------------------------------------


def _read(near: NearCache, key: Any, nk: bytes, kind: str, e: Any, default: Any, sk: Any) -> _Steps:
    """A read of ``key`` that the near cache did not answer (``kind``: CHECK, FILL or PASS)."""
    if kind is PASS:
        return (yield ("get", key, default, sk))
    since = near.start()
    if kind is FILL:
        return (yield from _fill(near, key, nk, sk, since, default))
    try:
        state, value, cas, size = yield ("check", key, e.cas, near.conditional, sk)
    except BaseException as exc:
        near.checked(nk, e, since, False)
        if unreachable(exc) and near.servable_stale(e):
            return near.value(e)
        raise
    if state in ("same", "same_sent"):
        if state == "same_sent":  # the server ignored C: ask by CAS alone from now on
            near.conditional = False
        near.checked(nk, e, since, True)
        return near.value(e)
    near.checked(nk, e, since, False)
    if state == "unsupported":  # no meta protocol: the fetch is the check
        got = yield from _fill(near, key, nk, sk, since, default)
        near.refetched(nk, e)
        return got
    near.changed()
    if state == "stale":  # changed, and only its CAS came
        return (yield from _fill(near, key, nk, sk, since, default))
    if state == "miss":
        near.forget(nk, e)
        return default
    near.keep(nk, sk, value, cas, size, since)
    return near.copy(value)


def _fill(near: NearCache, key: Any, nk: bytes, sk: Any, since: Any, default: Any) -> _Steps:
    """Fetch ``key`` with its CAS and hold it."""
    state, value, cas, size = yield ("check", key, 0, True, sk)
    if state == "unsupported":
        got = yield ("gets_multi", [key], b"", sk)
        if key not in got:
            return default
        value, cas = got[key]
        size = yield ("size", value)
    elif state != "changed":
        return default
    near.keep(nk, sk, value, cas, size, since)
    return near.copy(value)


def _read_multi(near: NearCache, keys: Any, prefix: Any, sk: Any) -> _Steps:
    """get_multi: the keys held and current are served near; the held keys due for a check are
    checked by their CAS alone, in one batch (``mg <key> c`` each); the rest, and the keys whose
    CAS changed, are fetched in one batch with their CAS, the hot ones then held."""
    if not isinstance(keys, (list, tuple, set, frozenset, dict)):
        keys = list(keys)
    p = near_key(prefix)
    out: dict[Any, Any] = {}
    rest: list[Any] = []
    fill: set[Any] = set()
    due: list[tuple[Any, bytes, _Entry]] = []
    for k in keys:
        nk = near_key(k)
        if nk is None or p is None:
            rest.append(k)
            continue
        kind, e = near.read(p + nk, sk)
        if e is not None and kind is HIT:
            out[k] = near.value(e)
        elif e is not None and kind is CHECK:
            due.append((k, p + nk, e))
        else:
            if kind is FILL:
                fill.add(k)
            rest.append(k)
    since = near.start()
    if due:
        try:
            found = yield ("cas_multi", [nk for _, nk, _ in due], sk)
        except BaseException:
            for _, nk, e in due:
                near.checked(nk, e, since, False)
            raise
        for (k, nk, e), cas in zip(due, found):
            if cas == e.cas:
                near.checked(nk, e, since, True)
                out[k] = near.value(e)
                continue
            near.checked(nk, e, since, False)
            if cas == 0:
                near.forget(nk, e)
            if cas != -1:  # (-1: no meta protocol, the fetch is the check)
                near.changed()
            fill.add(k)
            rest.append(k)
    if not rest:
        return out
    fetched = yield ("gets_multi", rest, prefix, sk)
    for k, (value, cas) in fetched.items():
        out[k] = value
        if k in fill and cas:
            size = yield ("size", value)
            near.keep(p + near_key(k), sk, value, cas, size, since)  # type: ignore[operator]
            out[k] = near.copy(value)
    return out


def _size(client: Any, value: Any) -> int:
    """What ``value`` takes stored, for a server that does not say (no meta protocol)."""
    try:
        return len(client.serialize(value)[0])
    except Exception:
        return 0


# -- the two clients -----------------------------------------------------------------------------


def near_class(base: Any) -> Any:
    """``base`` (a blocking client class) with a near cache in front of it."""
    return _made(base, _blocking_methods)


def near_aio_class(base: Any) -> Any:
    """``base`` (an asyncio client class) with a near cache in front of it."""
    return _made(base, _aio_methods)


_CLASSES: dict[tuple[type, Callable[..., Any]], type] = {}


def _made(base: Any, methods: Callable[[Any], dict[str, Any]]) -> type:
    cls = _CLASSES.get((base, methods))
    if cls is None:
        ns = methods(base)
        ns["__module__"] = base.__module__
        ns["__doc__"] = base.__doc__
        ns["_near_front"] = True  # (a near class is not wrapped again: see client._near_class)
        cls = type(base.__name__, (base,), ns)
        _CLASSES[(base, methods)] = cls
    return cls


def _blocking_methods(base: Any) -> dict[str, Any]:
    def step(self: Any, s: _Step) -> Any:
        name = s[0]
        if name == "get":
            return base.get(self, s[1], s[2], server_key=s[3])
        if name == "check":
            return self._near_check(*s[1:])
        if name == "gets_multi":
            return base.gets_multi(self, s[1], s[2], server_key=s[3])
        if name == "cas_multi":
            return self._near_cas_multi(s[1], s[2])
        return _size(self, s[1])

    def run(self: Any, steps: _Steps) -> Any:
        return drive(steps, lambda s: step(self, s))

    def get(self: Any, key: Any, default: Any = None, server_key: Any = None) -> Any:
        near: NearCache = self.near_cache
        t = type(key)  # (near_key, inline: this is the path of every near hit)
        nk = key if t is bytes else key.encode() if t is str else None
        if nk is None:
            return base.get(self, key, default, server_key=server_key)
        kind, e = near.read(nk, server_key)
        if kind is HIT:
            v = e.value  # type: ignore[union-attr]
            return v if type(v) in _IMMUTABLE else near.copy(v)
        return run(self, _read(near, key, nk, kind, e, default, server_key))

    def get_multi(self: Any, keys: Any, key_prefix: Any = b"", server_key: Any = None) -> Any:
        return run(self, _read_multi(self.near_cache, keys, key_prefix, server_key))

    def get_or_set(self: Any, key: Any, default: Any, *args: Any, **kwargs: Any) -> Any:
        nk = near_key(key)
        e = None if nk is None else self.near_cache.fresh(nk, kwargs.get("server_key"))
        if e is not None:
            return self.near_cache.value(e)
        return base.get_or_set(self, key, default, *args, **kwargs)

    def clone(self: Any) -> Any:
        obj = base.clone(self)
        obj.near_cache = self.near_cache
        return obj

    ns: dict[str, Any] = _common(base)
    ns.update(get=get, get_multi=get_multi, get_or_set=get_or_set, clone=clone)
    for name in (*WRITES, "_lease_get", "_lease_release"):
        ns[name] = _blocking_write(name, getattr(base, name))
    for name in CLEARING:
        ns[name] = _blocking_clearing(getattr(base, name))
    return ns


def _common(base: Any) -> dict[str, Any]:
    def metrics(self: Any) -> Any:
        m = base.metrics(self)
        m["near"] = self.near_cache.metrics()
        return m

    return {"metrics": metrics}


def _blocking_write(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    lease = name.startswith("_")  # a lease row: (key, ...) as a one-key write

    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        near: NearCache = self.near_cache
        first, keys = written_keys("set" if lease else name, args, kwargs)
        if args:
            args = (first, *args[1:])
        near.drop(keys)
        try:
            return method(self, *args, **kwargs)
        finally:
            near.drop(keys)

    write.__name__ = write.__qualname__ = name
    write.__doc__ = method.__doc__
    return write


def _blocking_clearing(method: Callable[..., Any]) -> Callable[..., Any]:
    def clearing(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.near_cache.clear()
        try:
            return method(self, *args, **kwargs)
        finally:
            self.near_cache.clear()

    clearing.__name__ = clearing.__qualname__ = method.__name__
    clearing.__doc__ = method.__doc__
    return clearing


def _aio_methods(base: Any) -> dict[str, Any]:
    async def step(self: Any, s: _Step) -> Any:
        name = s[0]
        if name == "get":
            return await base.get(self, s[1], s[2], server_key=s[3])
        if name == "check":
            return await self._anear_check(*s[1:])
        if name == "gets_multi":
            return await base.gets_multi(self, s[1], s[2], server_key=s[3])
        if name == "cas_multi":
            return await self._anear_cas_multi(s[1], s[2])
        return _size(self, s[1])

    async def run(self: Any, steps: _Steps) -> Any:
        return await adrive(steps, lambda s: step(self, s))

    async def get(self: Any, key: Any, default: Any = None, server_key: Any = None) -> Any:
        near: NearCache = self.near_cache
        t = type(key)  # (near_key, inline: this is the path of every near hit)
        nk = key if t is bytes else key.encode() if t is str else None
        if nk is None:
            return await base.get(self, key, default, server_key=server_key)
        kind, e = near.read(nk, server_key)
        if kind is HIT:
            v = e.value  # type: ignore[union-attr]
            return v if type(v) in _IMMUTABLE else near.copy(v)
        return await run(self, _read(near, key, nk, kind, e, default, server_key))

    async def get_multi(self: Any, keys: Any, key_prefix: Any = b"", server_key: Any = None) -> Any:
        return await run(self, _read_multi(self.near_cache, keys, key_prefix, server_key))

    async def get_or_set(self: Any, key: Any, default: Any, *args: Any, **kwargs: Any) -> Any:
        nk = near_key(key)
        e = None if nk is None else self.near_cache.fresh(nk, kwargs.get("server_key"))
        if e is not None:
            return self.near_cache.value(e)
        return await base.get_or_set(self, key, default, *args, **kwargs)

    ns: dict[str, Any] = _common(base)
    ns.update(get=get, get_multi=get_multi, get_or_set=get_or_set)
    for name in WRITES:
        ns[name] = _aio_write(name, getattr(base, name))
    for name in ("_alease_get", "_alease_release"):
        ns[name] = _aio_future_write(name, getattr(base, name))
    ns["flush_all"] = _aio_clearing(base.flush_all)
    for name in ("set_servers", "set_behaviors"):
        ns[name] = _blocking_clearing(getattr(base, name))
    return ns


def _aio_write(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    async def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        near: NearCache = self.near_cache
        first, keys = written_keys(name, args, kwargs)
        if args:
            args = (first, *args[1:])
        near.drop(keys)
        try:
            return await method(self, *args, **kwargs)
        finally:
            near.drop(keys)

    write.__name__ = write.__qualname__ = name
    write.__doc__ = method.__doc__
    return write


def _aio_future_write(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """A native method returning a future (the lease rows of ``get_or_set``): the keys are
    dropped when it is issued and again when its answer comes."""

    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        near: NearCache = self.near_cache
        first, keys = written_keys("set", args, kwargs)
        if args:
            args = (first, *args[1:])
        near.drop(keys)
        fut = method(self, *args, **kwargs)
        fut.add_done_callback(lambda _f: near.drop(keys))
        return fut

    write.__name__ = write.__qualname__ = name
    return write


def _aio_clearing(method: Callable[..., Any]) -> Callable[..., Any]:
    async def clearing(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.near_cache.clear()
        try:
            return await method(self, *args, **kwargs)
        finally:
            self.near_cache.clear()

    clearing.__name__ = clearing.__qualname__ = method.__name__
    clearing.__doc__ = method.__doc__
    return clearing
