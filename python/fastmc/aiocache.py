"""An aiocache backend on :class:`fastmc.aio.Client`.

aiocache's own memcached backend wraps aiomcache (one server, a pool of two connections, a
``gather`` of single sets for ``multi_set``). ``FastMCCache`` is a drop-in replacement for
``aiocache.MemcachedCache``: the same constructor arguments, the same values on the wire
(bytes with flags 0, so the two backends read each other's entries; a value with other flags,
a pickle among them, raises as it does there, and is never unpickled), the same exceptions
(``TypeError("aiomcache error: ...")`` for what aiomcache refuses, worded as aiocache's users
see them today), plus fastmc's pipelining (``multi_get``/``multi_set`` are one round trip per
server) and several servers::

    from fastmc.aiocache import FastMCCache

    cache = FastMCCache(endpoint="127.0.0.1", port=11211, namespace="main")
    cache = FastMCCache(servers=["10.0.0.1:11211", "10.0.0.2:11211"], behaviors={"ketama": True})

or, in an aiocache configuration, ``"cache": "fastmc.aiocache.FastMCCache"``.

``serializer="json"`` or ``"msgpack"`` (a name, where aiocache takes a serializer object) hands
values to fastmc's own codec instead: structured values are stored under fastmc's JSON or msgpack
flags, str, bytes and int under pylibmc's, pickles are refused, so the entries are the ones a
Django or dogpile client with the same ``serializer`` reads (docs/security.md#values-without-pickle)::

    cache = FastMCCache(endpoint="127.0.0.1", port=11211, serializer="json")
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from aiocache.base import BaseCache
from aiocache.serializers import JsonSerializer, NullSerializer

import fastmc
import fastmc.aio
from fastmc import autodiscovery

__all__ = ["FastMCBackend", "FastMCCache"]

# The keys aiomcache accepts: 1 to 250 characters, no whitespace or control characters.
_VALID_KEY = re.compile("^[^\\s\x00-\x1f\x7f-\x9f]{1,250}$")


def _refused(what: str, item: object) -> TypeError:
    return TypeError("aiomcache error: %s: %r" % (what, item))


def _check_key(key: bytes) -> bytes:
    if not isinstance(key, bytes):
        raise _refused("key must be bytes", key)
    text = key.decode(errors="replace")
    m = _VALID_KEY.match(text)
    if not m or len(m.group(0)) != len(text):
        raise _refused("invalid key", key)
    return key


def _check_ttl(ttl: Any) -> int:
    ttl = ttl or 0
    if not isinstance(ttl, int):
        raise _refused("exptime not int", ttl)
    if ttl < 0:
        raise _refused("exptime negative", ttl)
    return ttl


def _as_bytes(value: Any) -> bytes:
    value = value.encode() if isinstance(value, str) else value
    if not isinstance(value, bytes):
        raise _refused("value must be bytes", value)
    return value


class _BytesClient(fastmc.aio.Client):
    """Values as aiomcache returns them: the bytes of a value stored with flags 0, and for any
    other flags (a pickle, a str or an int stored by a pylibmc-style client) the error aiomcache
    raises without a flag handler. Nothing is ever unpickled."""

    def deserialize(self, data: bytes, flags: int) -> Any:
        if flags:
            raise fastmc.RefusedValueError(
                "aiomcache error: received flags without handler (flags %d)" % flags
            )
        return data


class FastMCBackend(BaseCache):  # type: ignore[misc]
    def __init__(
        self,
        endpoint: str = "127.0.0.1",
        port: int = 11211,
        pool_size: int = 2,
        *,
        servers: Iterable[str] | None = None,
        behaviors: Mapping[str, Any] | None = None,
        binary: bool = False,
        discovery: bool | Mapping[str, Any] = False,
        **kwargs: Any,
    ) -> None:
        named = kwargs.get("serializer")
        # A serializer's name: fastmc's codec stores the values (see the module's header).
        self._native: str | None = None
        if isinstance(named, str):
            if named not in ("json", "msgpack"):
                raise ValueError(
                    "serializer takes aiocache's serializer objects, or 'json' or 'msgpack' "
                    "for fastmc's own, not %r" % (named,)
                )
            self._native = named
            kwargs["serializer"] = NullSerializer()
        super().__init__(**kwargs)
        self.endpoint = endpoint
        self.port = int(port)
        self.pool_size = int(pool_size)  # accepted for aiocache's signature; fastmc pools itself
        self.servers = list(servers) if servers else ["%s:%d" % (endpoint, self.port)]
        behaviors = {"cas": True, **(behaviors or {})}
        self._discovery: autodiscovery.AutoDiscovery | None = None
        if discovery:
            self._client = self._discovered(discovery, behaviors, binary)
        else:
            self._client = self._make_client(self.servers, behaviors, binary)

    def _discovered(
        self, discovery: bool | Mapping[str, Any], behaviors: dict[str, Any], binary: bool
    ) -> fastmc.aio.Client:
        """``endpoint:port`` is a configuration endpoint: its node list now (one blocking fetch,
        here), then followed by a task of the loop that first uses the cache."""
        how = autodiscovery.discovery_options(discovery)
        if len(self.servers) != 1:
            raise ValueError("with discovery, endpoint:port is one configuration endpoint")
        where = self.servers[0]
        interval = float(how.pop("interval", 60.0))
        args = autodiscovery.discovery_fetch_args(binary=binary, **how)
        config = autodiscovery.fetch_config(where, **args)
        client = self._make_client(list(config.servers), behaviors, binary)
        self._discovery = autodiscovery.AutoDiscovery(
            client, where, interval=interval, config=config, **args
        )
        client.discovery = self._discovery
        return client

    def _make_client(
        self, servers: list[str], behaviors: dict[str, Any], binary: bool
    ) -> fastmc.aio.Client:
        if self._native is None:
            return _BytesClient(servers, behaviors=behaviors, binary=binary)
        return fastmc.aio.Client(
            servers, behaviors=behaviors, binary=binary, serializer=self._native, pickle="refuse"
        )

    def _value(self, value: Any) -> Any:
        """What is stored: bytes as aiomcache takes them, or any value fastmc's codec takes."""
        return value if self._native is not None else _as_bytes(value)

    @property
    def client(self) -> fastmc.aio.Client:
        """The asyncio client (with discovery: its refresh starts on the first use in a loop)."""
        if self._discovery is not None:
            self._discovery.ensure_task()
        return self._client

    def _decode(self, value: bytes | None, encoding: str | None) -> Any:
        if encoding is None or value is None or self._native is not None:
            return value
        return value.decode(encoding)

    async def _get(self, key: bytes, encoding: str | None = "utf-8", _conn: Any = None) -> Any:
        return self._decode(await self.client.get(_check_key(key)), encoding)

    async def _gets(self, key: Any, encoding: str | None = "utf-8", _conn: Any = None) -> Any:
        key = key.encode() if isinstance(key, str) else key
        _, token = await self.client.gets(_check_key(key))
        return token

    async def _multi_get(
        self, keys: list[bytes], encoding: str | None = "utf-8", _conn: Any = None
    ) -> list[Any]:
        found = await self.client.get_multi([_check_key(k) for k in keys])
        return [self._decode(found.get(k), encoding) for k in keys]

    async def _set(
        self,
        key: bytes,
        value: Any,
        ttl: Any = 0,
        _cas_token: Any = None,
        _conn: Any = None,
    ) -> bool:
        value = self._value(value)
        if _cas_token is not None:
            return await self._cas(key, value, _cas_token, ttl=ttl, _conn=_conn)
        return await self.client.set(_check_key(key), value, _check_ttl(ttl))

    async def _cas(
        self, key: bytes, value: Any, token: int, ttl: Any = None, _conn: Any = None
    ) -> bool:
        return await self.client.cas(_check_key(key), self._value(value), token, _check_ttl(ttl))

    async def _multi_set(self, pairs: Any, ttl: Any = 0, _conn: Any = None) -> bool:
        ttl = _check_ttl(ttl)
        mapping = {_check_key(k): self._value(v) for k, v in pairs}
        await self.client.set_multi(mapping, ttl)
        return True

    async def _add(self, key: bytes, value: Any, ttl: Any = 0, _conn: Any = None) -> bool:
        if not await self.client.add(_check_key(key), self._value(value), _check_ttl(ttl)):
            # aiocache's wording, with the key as aiocache's backend shows it (bytes repr)
            raise ValueError(f"Key {key!r} already exists, use .set to update the value")
        return True

    async def _exists(self, key: bytes, _conn: Any = None) -> bool:
        return await self.client.append(_check_key(key), b"")

    async def _increment(self, key: bytes, delta: int, _conn: Any = None) -> int:
        key = _check_key(key)
        incremented = None
        try:
            if delta > 0:
                incremented = await self.client.incr(key, delta)
            else:
                incremented = await self.client.decr(key, abs(delta))
        except fastmc.NotFound:
            await self._set(key, delta if self._native else str(delta).encode())
        except fastmc.Error as e:
            raise TypeError(f"aiomcache error: {e}") from None
        return incremented or delta

    async def _expire(self, key: bytes, ttl: int, _conn: Any = None) -> bool:
        return await self.client.touch(_check_key(key), _check_ttl(ttl))

    async def _delete(self, key: bytes, _conn: Any = None) -> int:
        return 1 if await self.client.delete(_check_key(key)) else 0

    async def _clear(self, namespace: str | None = None, _conn: Any = None) -> bool:
        if namespace:
            raise ValueError("MemcachedBackend doesnt support flushing by namespace")
        await self.client.flush_all()
        return True

    async def _raw(
        self,
        command: str,
        *args: Any,
        encoding: str | None = "utf-8",
        _conn: Any = None,
        **kwargs: Any,
    ) -> Any:
        if command == "multi_get":
            found = await self.client.get_multi(list(args))
            value: Any = tuple(found.get(k) for k in args)
            if encoding is not None:
                value = tuple(None if v is None else v.decode(encoding) for v in value)
            return value
        value = await getattr(self.client, command)(*args, **kwargs)
        if command == "get" and encoding is not None and value is not None:
            return value.decode(encoding)
        return value

    async def _redlock_release(self, key: bytes, _: Any) -> int:
        return await self._delete(key)

    async def _close(self, *args: Any, _conn: Any = None, **kwargs: Any) -> None:
        """Idle connections are closed; the client stays usable, as aiomcache's does."""
        self.client.disconnect_all()


class FastMCCache(FastMCBackend):
    """``aiocache.MemcachedCache`` on fastmc: JSON serializer by default, keys as bytes with the
    namespace, spaces replaced by underscores."""

    NAME = "memcached"

    def __init__(self, serializer: Any = None, **kwargs: Any) -> None:
        super().__init__(serializer=serializer or JsonSerializer(), **kwargs)

    @classmethod
    def parse_uri_path(cls, path: str) -> dict[str, Any]:
        return {}

    def _build_key(self, key: Any, namespace: str | None = None) -> bytes:
        ns_key: str = super()._build_key(key, namespace=namespace).replace(" ", "_")
        return ns_key.encode()

    def __repr__(self) -> str:
        return "FastMCCache (%s)" % ", ".join(self.servers)
