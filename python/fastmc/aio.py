"""fastmc.aio: the asyncio client, on the same Rust core as :class:`fastmc.Client`.

Every method of :class:`fastmc.Client` that talks to a server is a coroutine here, with the same
name, arguments, return values and exceptions; construction, behaviors, placement and value
encoding are the same, so the blocking and the asyncio clients (and pylibmc) share one cache::

    async with fastmc.aio.Client(["127.0.0.1:11211"], binary=False) as mc:
        await mc.set("k", {"a": 1})
        assert await mc.get("k") == {"a": 1}

One client is shared by any number of tasks of one event loop. Requests that tasks issue while
the client is busy with a server travel together: worker threads of the core (one per server)
take everything queued for their server, send it in one write and read the replies in one pass,
then wake the loop once for all of them (docs/aio.md).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from . import _fastmc, stampede
from .client import _behaviors_numeric, _behaviors_symbolic, _native_init_args, _set_servers
from .consts import BehaviorDict
from .values import policy_arguments

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self

    from ._fastmc import _Key
    from ._fastmc import _ServerSpec as _AnyServerSpec
    from .autodiscovery import AutoDiscovery
    from .client import _ServerSpec

_K = TypeVar("_K", bound="_Key")

__all__ = ["Client"]


class Client(_fastmc.aio_client):
    """An asyncio memcached client: pylibmc's API as coroutines, on fastmc's core."""

    binary: bool
    addresses: list[_ServerSpec]
    discovery: AutoDiscovery | None = None
    """What refreshes the server list when the client came from
    :func:`fastmc.autodiscovery.discover_aio` (stopped by ``close()``)."""

    def __init__(
        self,
        servers: Iterable[_ServerSpec],
        behaviors: Mapping[str, Any] | None = None,
        binary: bool = False,
        username: str | None = None,
        password: str | None = None,
        *,
        tls: bool = False,
        tls_ca_file: str | None = None,
        tls_cert_file: str | None = None,
        tls_key_file: str | None = None,
        tls_server_name: str | None = None,
        pickle: str | None = None,
        pickle_classes: Iterable[type | str] | None = None,
        signing_keys: Iterable[str | bytes] | None = None,
        accept_unsigned_pickles: bool | None = None,
    ) -> None:
        self.binary = binary
        self.addresses = list(servers)
        self._readers: tuple[asyncio.AbstractEventLoop, list[int]] | None = None
        super().__init__(
            **_native_init_args(
                self.addresses,
                behaviors,
                binary,
                username,
                password,
                tls,
                tls_ca_file,
                tls_cert_file,
                tls_key_file,
                tls_server_name,
            ),
            **policy_arguments(pickle, pickle_classes, signing_keys, accept_unsigned_pickles),
        )

    def __repr__(self) -> str:
        return "%s(%r, binary=%r)" % (self.__class__.__name__, self.addresses, self.binary)

    def _blocking_only(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        # Inherited from the blocking native class: they would block the event loop.
        raise TypeError("a blocking method: the asyncio client's coroutines are used instead")

    _lease_get = _lease_release = _blocking_only

    def __reduce__(self) -> NoReturn:
        raise TypeError("cannot pickle %r object" % (self.__class__.__name__,))

    # -- the event loop ------------------------------------------------------------------------

    def _attach_loop(
        self,
        loop: asyncio.AbstractEventLoop,
        mailbox: _fastmc.aio_mailbox,
        direct: _fastmc.aio_direct,
    ) -> None:
        """Called by the core when the client first serves ``loop``: watch the mailbox (outcomes
        from the worker threads) and the epoll descriptor of the request the loop's thread
        drives itself (docs/aio.md). The callbacks hold the descriptors' owners (so they stay
        open while watched) and only a weak reference to the client."""
        ref = weakref.ref(self)
        readers = []
        for owner in (mailbox, direct):
            fd = owner.fileno()
            if fd < 0:  # no direct request on this system (src/dispatch/direct_off.rs)
                continue
            loop.add_reader(fd, _fastmc.aio_reader(ref, owner, loop))
            readers.append(fd)
        self._readers = (loop, readers)

    async def close(self) -> None:
        """Finish the requests in flight, stop the I/O threads and close the connections."""
        if self.discovery is not None:
            self.discovery.stop()
        self._shutdown()
        while self._in_flight:
            await asyncio.sleep(0.001)
        if self._readers is not None:
            loop, fds = self._readers
            self._readers = None
            if not loop.is_closed():
                for fd in fds:
                    loop.remove_reader(fd)
        self.disconnect_all()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- behaviors and servers (no I/O) ----------------------------------------------------------

    def set_servers(self, servers: Iterable[_AnyServerSpec]) -> tuple[list[str], list[str]]:
        """Replace the server list, as :meth:`fastmc.Client.set_servers` does (a plain method:
        no I/O). Workers start for added servers; a removed server's worker runs the requests
        already queued to it (on the new list) and exits."""
        return _set_servers(self, _fastmc.aio_client.set_servers, servers)

    def get_behaviors(self) -> BehaviorDict:
        return BehaviorDict(self, _behaviors_symbolic(super().get_behaviors()))

    def set_behaviors(self, behaviors: Mapping[str, Any]) -> None:
        return super().set_behaviors(_behaviors_numeric(behaviors))

    behaviors = property(get_behaviors, set_behaviors)

    # -- single keys ---------------------------------------------------------------------------

    async def get(self, key: _Key, default: Any = None) -> Any:
        return await self._get(key, default)

    async def gets(self, key: _Key) -> tuple[Any, int | None]:
        return await self._gets(key)  # type: ignore[no-any-return]

    async def set(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> bool:
        return await self._store(  # type: ignore[no-any-return]
            "set", key, val, time, min_compress_len, compress_level, noreply
        )

    async def add(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> bool:
        return await self._store(  # type: ignore[no-any-return]
            "add", key, val, time, min_compress_len, compress_level, noreply
        )

    async def replace(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> bool:
        return await self._store(  # type: ignore[no-any-return]
            "replace", key, val, time, min_compress_len, compress_level, noreply
        )

    async def append(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> bool:
        return await self._store(  # type: ignore[no-any-return]
            "append", key, val, time, min_compress_len, compress_level, noreply
        )

    async def prepend(
        self,
        key: _Key,
        val: Any,
        time: int = 0,
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> bool:
        return await self._store(  # type: ignore[no-any-return]
            "prepend", key, val, time, min_compress_len, compress_level, noreply
        )

    async def cas(self, key: _Key, val: Any, cas: int, time: int = 0) -> bool:
        return await self._cas(key, val, cas, time)  # type: ignore[no-any-return]

    async def delete(self, key: _Key, *, noreply: bool = False) -> bool:
        return await self._delete(key, noreply)  # type: ignore[no-any-return]

    async def touch(self, key: _Key, time: int, *, noreply: bool = False) -> bool:
        return await self._touch(key, time, noreply)  # type: ignore[no-any-return]

    async def incr(self, key: _Key, delta: int = 1) -> int:
        return await self._arith(True, key, delta)  # type: ignore[no-any-return]

    async def decr(self, key: _Key, delta: int = 1) -> int:
        return await self._arith(False, key, delta)  # type: ignore[no-any-return]

    # -- many keys -----------------------------------------------------------------------------

    async def get_multi(self, keys: Collection[_K], key_prefix: _Key = b"") -> dict[_K, Any]:
        return await self._get_multi(keys, key_prefix, False)  # type: ignore[no-any-return]

    async def gets_multi(
        self, keys: Collection[_K], key_prefix: _Key = b""
    ) -> dict[_K, tuple[Any, int]]:
        return await self._get_multi(keys, key_prefix, True)  # type: ignore[no-any-return]

    async def set_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> list[_K]:
        return await self._store_multi(  # type: ignore[no-any-return]
            "set", keys, time, key_prefix, min_compress_len, compress_level, noreply
        )

    async def add_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> list[_K]:
        return await self._store_multi(  # type: ignore[no-any-return]
            "add", keys, time, key_prefix, min_compress_len, compress_level, noreply
        )

    async def replace_multi(
        self,
        keys: Mapping[_K, Any],
        time: int = 0,
        key_prefix: _Key = b"",
        min_compress_len: int = 0,
        compress_level: int = -1,
        *,
        noreply: bool = False,
    ) -> list[_K]:
        return await self._store_multi(  # type: ignore[no-any-return]
            "replace", keys, time, key_prefix, min_compress_len, compress_level, noreply
        )

    async def delete_multi(
        self, keys: Collection[_Key], key_prefix: _Key = b"", *, noreply: bool = False
    ) -> bool:
        return await self._delete_multi(keys, key_prefix, noreply)  # type: ignore[no-any-return]

    async def incr_multi(
        self, keys: Collection[_Key], key_prefix: _Key = b"", delta: int = 1
    ) -> None:
        await self._incr_multi(keys, key_prefix, delta)

    async def touch_multi(
        self,
        keys: Collection[_K],
        time: int = 0,
        key_prefix: _Key = b"",
        *,
        noreply: bool = False,
    ) -> list[_K]:
        return await self._touch_multi(keys, time, key_prefix, noreply)  # type: ignore[no-any-return]

    # -- whole client --------------------------------------------------------------------------

    async def flush_all(self, time: int = 0) -> bool:
        return await self._flush_all(time)  # type: ignore[no-any-return]

    async def get_stats(self, *stat_args: str) -> list[tuple[bytes, dict[str, bytes]]]:
        """``get_stats()`` or ``get_stats(group)``, as the blocking client's."""
        return await self._get_stats(*stat_args)  # type: ignore[no-any-return]

    # -- no stampedes (docs/stampede.md) ---------------------------------------------------------

    # ``fastmc.Client.get_or_set`` as a coroutine (one frame less than a wrapper: the hot path).
    get_or_set = stampede.aget_or_set

    async def gat(self, key: _Key, time: int, default: Any = None) -> Any:
        return await self._gat(key, time, default)

    async def gat_multi(
        self, keys: Collection[_K], time: int, key_prefix: _Key = b""
    ) -> dict[_K, Any]:
        return await self._gat_multi(keys, time, key_prefix)  # type: ignore[no-any-return]

    async def invalidate(self, key: _Key, stale_time: int = 0) -> bool:
        return await self.invalidate_multi([key], stale_time)

    async def invalidate_multi(
        self, keys: Collection[_Key], stale_time: int = 0, key_prefix: _Key = b""
    ) -> bool:
        found, no_meta = await self._invalidate_multi(keys, stale_time, key_prefix)
        if no_meta:
            # Servers without the meta protocol have no stale values: delete, as the blocking
            # client does.
            found = await self.delete_multi(no_meta, key_prefix) and found
        return bool(found)
