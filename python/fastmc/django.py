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

``touch(key, 0)`` expires the key (memcached's negative expiry), like every other Django backend;
``incr``/``decr`` of a missing key raise ``ValueError``, as Django requires.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Sequence
from functools import cached_property
from typing import Any

from django.core.cache.backends.memcached import BaseMemcachedCache

import fastmc
from fastmc.client import Client

__all__ = ["FastMCCache"]

_shared_clients: weakref.WeakValueDictionary[Hashable, Client] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


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
    def _cache(self) -> Client:
        servers = self.client_servers
        try:
            key: Hashable = (type(self), tuple(servers), _freeze(self._options))
        except TypeError:
            return Client(servers, **self._options)
        with _shared_lock:
            client = _shared_clients.get(key)
            if client is None:
                client = Client(servers, **self._options)
                _shared_clients[key] = client
            return client

    def close(self, **kwargs: Any) -> None:
        """Nothing to release per request (see the module docstring)."""
