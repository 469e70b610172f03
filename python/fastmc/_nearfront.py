"""The clients in front of a near cache (``fastmc.NearCache``, docs/near-cache.md).

``near_class`` and ``near_aio_class`` make, from a client class, a subclass whose reads ask the
near cache first and whose writes drop what it holds, before they start and again once they
end (so a fetch that overlapped a write keeps nothing). The blocking and the asyncio clients
share every rule (``fastmc.near``) and differ only in how they wait. A client without a near
cache is not touched: its class stays the plain one, so its calls cost what they did.

A check is one ``mg <key> C<cas> v f c`` where the server has memcached 1.6.40's conditional
fetch (the value comes back only if it changed), ``mg <key> c`` (the CAS alone, then a fetch if
it changed) on an older server, and a plain ``gets`` where the server has no meta protocol
(twemproxy, the binary protocol). The native half is ``src/py/client/near.rs``.
"""

from __future__ import annotations

import time as _time
from collections.abc import Mapping
from typing import Any, Callable

from .near import _UNREACHABLE, CHECK, FILL, HIT, PASS, NearCache, _Entry, near_key

# -- which arguments of a write name its keys ----------------------------------------------------

# Writes of one key (its first argument).
SINGLE_WRITES = (
    "set",
    "add",
    "replace",
    "append",
    "prepend",
    "cas",
    "delete",
    "touch",
    "incr",
    "decr",
    "gat",
    "invalidate",
)
# Writes of many keys: the position of key_prefix among the arguments after the keys' own.
MULTI_WRITES = {
    "set_multi": 2,
    "add_multi": 2,
    "replace_multi": 2,
    "delete_multi": 1,
    "incr_multi": 1,
    "touch_multi": 2,
    "gat_multi": 2,
    "invalidate_multi": 2,
}
# Calls after which nothing held may be right: forget everything.
CLEARING = ("flush_all", "set_servers", "set_behaviors")


def written_keys(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, list[bytes]]:
    """The keys a write names (as ``near_key`` gives them), and its first argument, made a list
    if it was a one-time iterator (so the native method still sees every key; one passed by
    name is replaced in ``kwargs``)."""
    first: Any = args[0] if args else kwargs.get("keys", kwargs.get("key"))
    at = MULTI_WRITES.get(name)
    if at is None:
        nk = near_key(first)
        return first, [] if nk is None else [nk]
    if not isinstance(first, (Mapping, list, tuple, set, frozenset, dict)):
        try:
            first = list(first)
        except TypeError:
            return first, []
        if not args and "keys" in kwargs:
            kwargs["keys"] = first
    prefix = args[at] if len(args) > at else kwargs.get("key_prefix", b"")
    p = near_key(prefix) or b""
    keys = []
    for k in first:
        nk = near_key(k)
        if nk is not None:
            keys.append(p + nk)
    return first, keys


def _unchanged(near: NearCache, state: str) -> bool | None:
    """How a check ended, from its state: True (unchanged), False (changed: its value came, or
    the item is gone), None (the value must be fetched). Learns whether the servers honour the
    conditional fetch."""
    if state == "same":
        return True
    if state == "same_sent":
        near.conditional = False
        return True
    if state in ("changed", "miss"):
        return False
    return None


def near_class(base: Any) -> Any:
    """``base`` (a blocking client class) with a near cache in front of it."""
    return _made(base, _blocking_methods)


def near_aio_class(base: Any) -> Any:
    """``base`` (an asyncio client class) with a near cache in front of it."""
    return _made(base, _aio_methods)


_CLASSES: dict[tuple[type, Callable[..., Any]], type] = {}


def _made(base: Any, methods: Callable[[type], dict[str, Any]]) -> type:
    cls = _CLASSES.get((base, methods))
    if cls is None:
        ns = methods(base)
        ns["__module__"] = base.__module__
        ns["__doc__"] = base.__doc__
        cls = type(base.__name__, (base,), ns)
        _CLASSES[(base, methods)] = cls
    return cls


def _blocking_methods(base: Any) -> dict[str, Any]:
    ns: dict[str, Any] = {}

    def get(self: Any, key: Any, default: Any = None, server_key: Any = None) -> Any:
        near: NearCache = self.near_cache
        nk = near_key(key)
        if nk is None:
            return base.get(self, key, default, server_key=server_key)
        kind, e = near.read(nk, server_key)
        if kind is HIT:
            return near.value(e)  # type: ignore[arg-type]
        if kind is PASS:
            return base.get(self, key, default, server_key=server_key)
        since = near.start()
        if kind is FILL:
            return _fill(self, near, key, nk, server_key, since, default)
        assert e is not None
        try:
            state, value, cas, size = self._near_check(key, e.cas, near.conditional, server_key)
        except _UNREACHABLE:
            near.checked(nk, e, since, False)
            if near.servable_stale(e):
                return near.value(e)
            raise
        except BaseException:
            near.checked(nk, e, since, False)
            raise
        unchanged = _unchanged(near, state)
        near.checked(nk, e, since, bool(unchanged))
        if unchanged:
            return near.value(e)
        if state == "unsupported":
            got = _fill(self, near, key, nk, server_key, since, default)
            near.refetched(nk, e)
            return got
        near.changed()
        if unchanged is None:
            return _fill(self, near, key, nk, server_key, since, default)
        if state == "miss":
            near.drop([nk])
            return default
        near.keep(nk, server_key, value, cas, size, since)
        return near.copy(value)

    def _fill(
        self: Any,
        near: NearCache,
        key: Any,
        nk: bytes,
        server_key: Any,
        since: tuple[int, float],
        default: Any,
    ) -> Any:
        state, value, cas, size = self._near_check(key, 0, True, server_key)
        if state == "unsupported":
            got = base.gets_multi(self, [key], server_key=server_key)
            if key not in got:
                return default
            value, cas = got[key]
            size = _size(self, value)
        elif state != "changed":
            return default
        near.keep(nk, server_key, value, cas, size, since)
        return near.copy(value)

    def get_multi(self: Any, keys: Any, key_prefix: Any = b"", server_key: Any = None) -> Any:
        near: NearCache = self.near_cache
        keys, held, rest, fill = _multi_read(near, keys, key_prefix, server_key)
        since = near.start()
        fetched = base.gets_multi(self, rest, key_prefix, server_key=server_key) if rest else {}
        return _multi_result(self, near, held, fetched, fill, key_prefix, server_key, since)

    def get_or_set(self: Any, key: Any, default: Any, *args: Any, **kwargs: Any) -> Any:
        near: NearCache = self.near_cache
        nk = near_key(key)
        if nk is not None:
            e = _fresh(near, nk, kwargs.get("server_key"))
            if e is not None:
                return near.value(e)
        return base.get_or_set(self, key, default, *args, **kwargs)

    def clone(self: Any) -> Any:
        obj = base.clone(self)
        obj.near_cache = self.near_cache
        return obj

    def metrics(self: Any) -> Any:
        m = base.metrics(self)
        m["near"] = self.near_cache.metrics()
        return m

    ns.update(
        get=get,
        get_multi=get_multi,
        get_or_set=get_or_set,
        clone=clone,
        metrics=metrics,
    )
    for name in SINGLE_WRITES + tuple(MULTI_WRITES) + ("_lease_get", "_lease_release"):
        ns[name] = _blocking_write(name, getattr(base, name))
    for name in CLEARING:
        ns[name] = _blocking_clearing(getattr(base, name))
    return ns


def _size(client: Any, value: Any) -> int:
    """What ``value`` takes stored, for a server that does not say (no meta protocol)."""
    try:
        return len(client.serialize(value)[0])
    except Exception:
        return 0


def _fresh(near: NearCache, nk: bytes, server_key: Any) -> _Entry | None:
    """The entry for ``nk`` if it may be served without a check (get_or_set's first look)."""
    with near._lock:
        e = near._items.get(nk)
        fresh = e is not None and _time.monotonic() - e.checked < near.ttl
        if fresh and e.server_key == server_key:  # type: ignore[union-attr]
            near._counts["hits"] += 1
            return e
    return None


def _multi_read(
    near: NearCache, keys: Any, key_prefix: Any, server_key: Any
) -> tuple[Any, dict[Any, Any], list[Any], set[Any]]:
    """get_multi's look at the near cache: the values it serves (by the caller's key objects),
    the keys to fetch, and which of those to keep once fetched (hot, or held but due for a
    check: a batch re-reads those with the rest, in the same round trip)."""
    if not isinstance(keys, (list, tuple, set, frozenset, dict)):
        keys = list(keys)
    p = near_key(key_prefix)
    held: dict[Any, Any] = {}
    rest: list[Any] = []
    fill: set[Any] = set()
    for k in keys:
        nk = near_key(k)
        if nk is None or p is None:
            rest.append(k)
            continue
        kind, e = near.read(p + nk, server_key)
        if kind is HIT:
            held[k] = near.value(e)  # type: ignore[arg-type]
            continue
        if kind is CHECK:
            with near._lock:
                e.checking = False  # type: ignore[union-attr]
        if kind is not PASS:
            fill.add(k)
        rest.append(k)
    return keys, held, rest, fill


def _multi_result(
    client: Any,
    near: NearCache,
    held: dict[Any, Any],
    fetched: dict[Any, Any],
    fill: set[Any],
    key_prefix: Any,
    server_key: Any,
    since: tuple[int, float],
) -> dict[Any, Any]:
    p = near_key(key_prefix) or b""
    out = held
    for k, (value, cas) in fetched.items():
        out[k] = value
        if k in fill and cas:
            out[k] = near.copy(value)
            near.keep(p + near_key(k), server_key, value, cas, _size(client, value), since)  # type: ignore[operator]
    return out


def _blocking_write(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        near: NearCache = self.near_cache
        first, keys = written_keys(name, args, kwargs)
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
    ns: dict[str, Any] = {}

    async def get(self: Any, key: Any, default: Any = None, server_key: Any = None) -> Any:
        near: NearCache = self.near_cache
        nk = near_key(key)
        if nk is None:
            return await base.get(self, key, default, server_key=server_key)
        kind, e = near.read(nk, server_key)
        if kind is HIT:
            return near.value(e)  # type: ignore[arg-type]
        if kind is PASS:
            return await base.get(self, key, default, server_key=server_key)
        since = near.start()
        if kind is FILL:
            return await _fill(self, near, key, nk, server_key, since, default)
        assert e is not None
        try:
            check = self._anear_check(key, e.cas, near.conditional, server_key)
            state, value, cas, size = await check
        except _UNREACHABLE:
            near.checked(nk, e, since, False)
            if near.servable_stale(e):
                return near.value(e)
            raise
        except BaseException:
            near.checked(nk, e, since, False)
            raise
        unchanged = _unchanged(near, state)
        near.checked(nk, e, since, bool(unchanged))
        if unchanged:
            return near.value(e)
        if state == "unsupported":
            got = await _fill(self, near, key, nk, server_key, since, default)
            near.refetched(nk, e)
            return got
        near.changed()
        if unchanged is None:
            return await _fill(self, near, key, nk, server_key, since, default)
        if state == "miss":
            near.drop([nk])
            return default
        near.keep(nk, server_key, value, cas, size, since)
        return near.copy(value)

    async def _fill(
        self: Any,
        near: NearCache,
        key: Any,
        nk: bytes,
        server_key: Any,
        since: tuple[int, float],
        default: Any,
    ) -> Any:
        state, value, cas, size = await self._anear_check(key, 0, True, server_key)
        if state == "unsupported":
            got = await base.gets_multi(self, [key], server_key=server_key)
            if key not in got:
                return default
            value, cas = got[key]
            size = _size(self, value)
        elif state != "changed":
            return default
        near.keep(nk, server_key, value, cas, size, since)
        return near.copy(value)

    async def get_multi(self: Any, keys: Any, key_prefix: Any = b"", server_key: Any = None) -> Any:
        near: NearCache = self.near_cache
        keys, held, rest, fill = _multi_read(near, keys, key_prefix, server_key)
        since = near.start()
        fetched = (
            await base.gets_multi(self, rest, key_prefix, server_key=server_key) if rest else {}
        )
        return _multi_result(self, near, held, fetched, fill, key_prefix, server_key, since)

    async def get_or_set(self: Any, key: Any, default: Any, *args: Any, **kwargs: Any) -> Any:
        near: NearCache = self.near_cache
        nk = near_key(key)
        if nk is not None:
            e = _fresh(near, nk, kwargs.get("server_key"))
            if e is not None:
                return near.value(e)
        return await base.get_or_set(self, key, default, *args, **kwargs)

    def metrics(self: Any) -> Any:
        m = base.metrics(self)
        m["near"] = self.near_cache.metrics()
        return m

    ns.update(get=get, get_multi=get_multi, get_or_set=get_or_set, metrics=metrics)
    for name in SINGLE_WRITES + tuple(MULTI_WRITES):
        ns[name] = _aio_write(name, getattr(base, name))
    for name in ("_alease_get", "_alease_release"):
        ns[name] = _aio_future_write(name, getattr(base, name))
    for name in ("flush_all",):
        ns[name] = _aio_clearing(getattr(base, name))
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
    """A native method returning a future (the lease rows of ``get_or_set``): the keys are dropped when it is issued and again when its answer comes."""

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
