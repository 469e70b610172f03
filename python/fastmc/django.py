"""A Django cache backend on fastmc.

Use it in ``settings.py``::

    CACHES = {
        "default": {
            "BACKEND": "fastmc.django.FastMCCache",
            "LOCATION": "127.0.0.1:11211",   # or a list, or "host1:11211;host2:11211"
            "OPTIONS": {"behaviors": {"ketama": True}},   # passed to fastmc.Client
        }
    }

It takes the same ``LOCATION`` and ``OPTIONS`` as Django's own
``django.core.cache.backends.memcached.PyLibMCCache`` (``behaviors``, ``binary``, ``username``,
``password``; a ``unix:`` prefix on a socket path is accepted) and behaves like it, with two
differences that follow from fastmc's client being thread-safe:

* **One client per configuration, shared.** Django builds a new backend object per thread and,
  under ASGI, per request context. With ``PyLibMCCache`` each of those builds its own pylibmc
  client with its own sockets. ``FastMCCache`` gives every backend object with the same servers
  and options the same :class:`fastmc.Client` (kept while any backend uses it), so a process holds
  one small pool of idle connections per server however many threads or requests it serves.
* **Nothing to do at the end of a request.** Django calls ``close()`` after every request;
  Django's generic memcached backend answers with ``disconnect_all()`` because some clients leak
  sockets otherwise. A fastmc client does not need it: an operation takes connections from the
  pool and puts back only those that are clean (no reply still owed); a timeout, an I/O error or a
  bad reply drops that connection on the spot, and a forked child never reuses its parent's
  sockets. Disconnecting per request would only cost a reconnect per request and forget which
  servers are down, so ``close()`` does nothing, as in ``PyLibMCCache``.

**Async views use the asyncio client.** Django's ``aget``, ``aset``, ``aadd``, ``adelete``,
``aget_many``, ``aset_many``, ``adelete_many``, ``aincr``, ``adecr``, ``atouch``, ``ahas_key``,
``aget_or_set``, ``aclear`` (and ``aincr_version``/``adecr_version``) run on a
:class:`fastmc.aio.Client` with the same servers and options, one per event loop and shared by
the backend objects of that configuration, instead of Django's default of calling the blocking
method in a thread. They store and read the same values as the blocking methods.

**Cluster auto-discovery.** With ``"OPTIONS": {"discovery": {...}}`` the ``LOCATION`` is one
configuration endpoint (ElastiCache, Memorystore) instead of the servers: the clients follow its
node list (:mod:`fastmc.autodiscovery`). The dict takes :func:`fastmc.autodiscovery.discover`'s
``interval``, ``timeout``, ``config_key`` and ``mc_key`` (``True`` for the defaults). The
blocking client fetches the list when first used and refreshes it on a thread; the asyncio
clients start from the blocking client's configuration (fetching it the first time, a blocking
round trip on the loop once per process) and refresh it in a task of their loop.

``touch(key, 0)`` expires the key (memcached's negative expiry), like every other Django backend;
``incr``/``decr`` of a missing key raise ``ValueError``, as Django requires, unless given
fastmc's ``initial=`` (and ``timeout=``): then a missing counter is created at ``initial``.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Hashable, Sequence
from functools import cached_property
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.memcached import BaseMemcachedCache

import fastmc
import fastmc.aio
from fastmc import autodiscovery
from fastmc.client import Client

__all__ = ["FastMCCache"]

_shared_clients: weakref.WeakValueDictionary[Hashable, Client] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()
# The asyncio clients: per event loop, one per configuration (dropped with their loop).
_shared_aio: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[Hashable, fastmc.aio.Client]
] = weakref.WeakKeyDictionary()


def _freeze(value: Any) -> Hashable:
    """A hashable snapshot of an OPTIONS value (dicts and lists become sorted tuples)."""
    if isinstance(value, dict):
        return tuple(sorted(((repr(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if not isinstance(value, Hashable):
        raise TypeError("unhashable option")  # such a configuration is not shared
    return value


class FastMCCache(BaseMemcachedCache):  # type: ignore[misc]
    """Django cache backend using one shared, thread-safe :class:`fastmc.Client`."""

    def __init__(self, server: str | Sequence[str], params: dict[str, Any]) -> None:
        super().__init__(server, params, library=fastmc, value_not_found_exception=fastmc.NotFound)

    @property
    def client_servers(self) -> list[str]:
        return [s[len("unix:") :] if s.startswith("unix:") else s for s in self._servers]

    @cached_property
    def _config_key(self) -> Hashable | None:
        """What backend objects sharing one client have in common (None: not shareable)."""
        try:
            return (type(self), tuple(self.client_servers), _freeze(self._options))
        except TypeError:
            return None

    @cached_property
    def _discovery(self) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        """With the ``discovery`` option: (the endpoint, discover()'s options, the client's)."""
        options = dict(self._options)
        option = options.pop("discovery", None)
        if option is None or option is False:
            return None
        how = autodiscovery.discovery_options(option)
        if len(self.client_servers) != 1:
            raise ValueError("with discovery, LOCATION is one configuration endpoint")
        return self.client_servers[0], how, options

    def _new_client(self) -> Client:
        if self._discovery is None:
            return Client(self.client_servers, **self._options)
        endpoint, how, options = self._discovery
        return autodiscovery.discover(endpoint, **how, **options)

    @cached_property
    def _cache(self) -> Client:
        key = self._config_key
        if key is None:
            return self._new_client()
        with _shared_lock:
            client = _shared_clients.get(key)
            if client is None:
                client = self._new_client()
                _shared_clients[key] = client
            return client

    def _new_aio_client(self) -> fastmc.aio.Client:
        if self._discovery is None:
            options = dict(self._options)
            if options.get("near_cache") is not None:
                # One near cache for both clients: a write through either drops the copy both
                # read (docs/near-cache.md).
                options["near_cache"] = self._cache.near_cache
            return fastmc.aio.Client(self.client_servers, **options)
        endpoint, _, options = self._discovery
        found = getattr(self._cache, "discovery", None)
        if found is None or found.config is None:
            raise RuntimeError("the blocking client of %r follows no configuration" % endpoint)
        return autodiscovery.follow_aio(
            endpoint, found.config, found.interval, found.fetch_args(), **options
        )

    def close(self, **kwargs: Any) -> None:
        """Nothing to release per request (see the module docstring)."""

    def get_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        """Django's ``get_or_set`` on memcached leases: on a miss exactly one caller (across
        threads, processes and machines) computes ``default`` while the others wait for it
        (docs/stampede.md), instead of every caller computing it."""
        key = self.make_and_validate_key(key, version=version)
        return self._cache.get_or_set(key, default, self.get_backend_timeout(timeout))

    # -- the async API, on fastmc.aio -------------------------------------------------------------

    @property
    def _acache(self) -> fastmc.aio.Client:
        """The asyncio client of the running loop for this configuration."""
        loop = asyncio.get_running_loop()
        key = self._config_key or id(self)
        if self._discovery is not None:
            self._cache  # noqa: B018 (its configuration is where the asyncio clients start)
        with _shared_lock:
            per_loop = _shared_aio.setdefault(loop, {})
            client = per_loop.get(key)
            if client is None:
                client = self._new_aio_client()
                per_loop[key] = client
            return client

    async def aget_or_set(
        self, key: Any, default: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> Any:
        """``get_or_set`` on the asyncio client (``default`` may be a coroutine function)."""
        key = self.make_and_validate_key(key, version=version)
        return await self._acache.get_or_set(key, default, self.get_backend_timeout(timeout))

    async def aadd(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        key = self.make_and_validate_key(key, version=version)
        return await self._acache.add(key, value, self.get_backend_timeout(timeout))

    async def aget(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        key = self.make_and_validate_key(key, version=version)
        return await self._acache.get(key, default)

    async def aset(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        key = self.make_and_validate_key(key, version=version)
        mc = self._acache
        if not await mc.set(key, value, self.get_backend_timeout(timeout)):
            # As Django's backend: a value that could not be stored (over memcached's item
            # size) must not leave the old one readable.
            await mc.delete(key)

    async def atouch(
        self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        key = self.make_and_validate_key(key, version=version)
        return bool(await self._acache.touch(key, self.get_backend_timeout(timeout)))

    async def adelete(self, key: Any, version: int | None = None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        return bool(await self._acache.delete(key))

    async def aget_many(self, keys: Any, version: int | None = None) -> dict[Any, Any]:
        key_map = {self.make_and_validate_key(key, version=version): key for key in keys}
        ret = await self._acache.get_multi(list(key_map))
        return {key_map[k]: v for k, v in ret.items()}

    def _count(self, mc: Any, key: Any, delta: int, initial: int | None, timeout: Any) -> Any:
        """Django's incr on client ``mc`` (a negative delta: decr), with fastmc's ``initial=``
        and ``time=`` for a counter created when missing: the result (a coroutine on the
        asyncio client)."""
        kw = (
            {}
            if initial is None
            else {"initial": initial, "time": self.get_backend_timeout(timeout)}
        )
        return mc.decr(key, -delta, **kw) if delta < 0 else mc.incr(key, delta, **kw)

    def incr(
        self,
        key: Any,
        delta: int = 1,
        version: int | None = None,
        *,
        initial: int | None = None,
        timeout: Any = DEFAULT_TIMEOUT,
    ) -> int:
        """Django's ``incr``; with ``initial``, a missing key is created at that value (which is
        returned) with ``timeout``, in one round trip where the server speaks meta."""
        key = self.make_and_validate_key(key, version=version)
        try:
            return int(self._count(self._cache, key, delta, initial, timeout))
        except fastmc.NotFound:
            raise ValueError("Key '%s' not found" % key) from None

    def decr(self, key: Any, delta: int = 1, version: int | None = None, **kw: Any) -> int:
        return self.incr(key, -delta, version, **kw)

    async def aincr(
        self,
        key: Any,
        delta: int = 1,
        version: int | None = None,
        *,
        initial: int | None = None,
        timeout: Any = DEFAULT_TIMEOUT,
    ) -> int:
        key = self.make_and_validate_key(key, version=version)
        try:
            return int(await self._count(self._acache, key, delta, initial, timeout))
        except fastmc.NotFound:
            raise ValueError("Key '%s' not found" % key) from None

    async def adecr(self, key: Any, delta: int = 1, version: int | None = None, **kw: Any) -> int:
        return await self.aincr(key, -delta, version, **kw)

    async def aset_many(
        self, data: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        safe_data, original_keys = {}, {}
        for key, value in data.items():
            safe_key = self.make_and_validate_key(key, version=version)
            safe_data[safe_key] = value
            original_keys[safe_key] = key
        failed = await self._acache.set_multi(safe_data, self.get_backend_timeout(timeout))
        return [original_keys[k] for k in failed]

    async def adelete_many(self, keys: Any, version: int | None = None) -> None:
        await self._acache.delete_multi(
            [self.make_and_validate_key(k, version=version) for k in keys]
        )

    async def aclear(self) -> None:
        await self._acache.flush_all()

    async def aclose(self, **kwargs: Any) -> None:
        """Nothing to release per request, as for ``close``."""
