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
import functools
import inspect
import linecache
import weakref
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from . import _fastmc, stampede
from .client import (
    _behaviors_numeric,
    _behaviors_symbolic,
    _construct,
    _near_class,
    _set_servers,
    _warmed,
    _with_dns,
)
from .consts import BehaviorDict

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Concatenate, ParamSpec, Self

    from ._fastmc import _Key
    from ._fastmc import _ServerSpec as _AnyServerSpec
    from .client import _ServerSpec
    from .dnsdiscovery import DNSWatch
    from .near import NearCache

    # A blocking method's parameters and result, as _coroutine carries them over.
    _P = ParamSpec("_P")
    _R = TypeVar("_R")


def _parameters(method: Any) -> tuple[str, tuple[str, ...], tuple[Any, ...], int]:
    """A native method's parameter list as Python source, from its text signature (what
    ``inspect.signature`` shows), its parameters' names without ``self``, its defaults, and
    how many of the names may be passed by position (the rest are keyword-only)."""
    text = method.__text_signature__.replace("$self", "self", 1)
    namespace: dict[str, Any] = {}
    exec("def f%s: pass" % (text,), namespace)
    f = namespace["f"]
    code = f.__code__
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        raise TypeError("%s: *args and **kwargs are written out" % (method.__name__,))
    defaults = (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values())
    names = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
    return text, names, defaults, code.co_argcount - 1


def _coroutine(
    blocking: Callable[Concatenate[_fastmc.client, _P], _R], core: str | None = None
) -> Callable[Concatenate[Client, _P], Coroutine[Any, Any, _R]]:
    """The coroutine for the blocking method ``blocking``: its parameters (names, kinds,
    defaults: its text signature) and docstring, its types through ``_P`` and ``_R`` (mypy
    reads them from the blocking stub), and a body that awaits the core method ``core``
    (``_`` and the method's name: one row of the native table makes both, src/py/methods.rs)
    with each argument as the core's parameter of the same name. Written out and compiled
    once, here: a call runs the code a hand-written coroutine would. A core method whose
    parameters are not the blocking method's fails the import."""
    name = blocking.__name__
    core = core or "_" + name
    params, names, defaults, _ = _parameters(blocking)
    _, core_names, _, positional = _parameters(getattr(_fastmc.aio_client, core))
    if Ellipsis in defaults:
        raise TypeError("%s: an argument without a default value (...) is written out" % (name,))
    if core_names != names:
        raise TypeError("%s: %s does not take %s's arguments" % (name, core, name))
    call = ", ".join(n if i < positional else "%s=%s" % (n, n) for i, n in enumerate(core_names))
    source = "async def %s%s:\n    return await self.%s(%s)\n" % (name, params, core, call)
    filename = "<fastmc.aio.Client.%s>" % (name,)
    # Tracebacks show the line (as attrs does for the methods it writes).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)
    fn: Callable[Concatenate[Client, _P], Coroutine[Any, Any, _R]] = namespace[name]
    fn.__qualname__ = "Client." + name
    fn.__doc__ = blocking.__doc__
    return fn


__all__ = ["Client"]


class _Follower(Protocol):
    """What keeps a client's server list current from outside it
    (``fastmc.autodiscovery.AutoDiscovery``): the client stops it when it closes."""

    def stop(self) -> None: ...


class Client(_fastmc.aio_client):
    """An asyncio memcached client: pylibmc's API as coroutines, on fastmc's core."""

    binary: bool
    addresses: list[_ServerSpec]
    discovery: _Follower | None = None
    dns: DNSWatch | None = None
    """What refreshes the server list when the client came from
    :func:`fastmc.autodiscovery.discover_aio` (stopped by ``close()``)."""

    near_cache: NearCache | None = None
    """The near cache in front of this client (``fastmc.NearCache``), if it was given one."""

    def __new__(cls, *args: Any, near_cache: Any = None, **kwargs: Any) -> Self:
        # As fastmc.Client's: a subclass whose reads ask the near cache first, only with one.
        if near_cache is not None:
            cls = _near_class(cls, "near_aio_class")
        return super().__new__(cls)

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
        compression: str | None = None,
        zstd_level: int | None = None,
        zstd_dict: bytes | None = None,
        zstd_min_len: int | None = None,
        serializer: str | None = None,
        dns_refresh: float | None = None,
        dns_nameservers: Iterable[str] | None = None,
        warm_up: int = 0,
        near_cache: NearCache | Mapping[str, Any] | None = None,
    ) -> None:
        self._warm_connections = warm_up
        self._readers: tuple[asyncio.AbstractEventLoop, list[int]] | None = None
        _construct(self, super().__init__, _fastmc.aio_client.set_servers, locals())

    def __repr__(self) -> str:
        return "%s(%r, binary=%r)" % (self.__class__.__name__, self.addresses, self.binary)

    def metrics(self) -> dict[str, Any]:
        return _with_dns(self, super().metrics())

    def _blocking_only(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        # Inherited from the blocking native class: they would block the event loop.
        raise TypeError("a blocking method: the asyncio client's coroutines are used instead")

    _lease_get = _lease_release = _near_check = _near_cas_multi = _blocking_only

    def clone(self) -> NoReturn:
        # The native class's clone would copy no addresses, loop or threads (docs/aio.md).
        raise TypeError("clone() is a blocking-client method: make another fastmc.aio.Client")

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
        if self.dns is not None:
            self.dns.stop()
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
        if self._warm_connections:
            _warmed(await self.warm_up(self._warm_connections))
        return self

    async def warm_up(self, connections: int = 1) -> dict[str, Exception]:  # type: ignore[override]
        """:meth:`fastmc.Client.warm_up` on a worker thread: the loop goes on meanwhile."""
        warm = functools.partial(_fastmc.aio_client.warm_up, self, connections)
        return await asyncio.get_running_loop().run_in_executor(None, warm)

    async def debug(  # type: ignore[override]
        self, key: _Key, *, server_key: _Key | None = None
    ) -> dict[str, Any] | None:
        """:meth:`fastmc.Client.debug` on a worker thread (an operator's call, not a hot path)."""
        debug = functools.partial(_fastmc.aio_client.debug, self, key, server_key=server_key)
        return await asyncio.get_running_loop().run_in_executor(None, debug)

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

    # -- the blocking methods as coroutines (see _coroutine) ------------------------------------

    get = _coroutine(_fastmc.client.get)
    gets = _coroutine(_fastmc.client.gets)
    set = _coroutine(_fastmc.client.set)
    add = _coroutine(_fastmc.client.add)
    replace = _coroutine(_fastmc.client.replace)
    append = _coroutine(_fastmc.client.append)
    prepend = _coroutine(_fastmc.client.prepend)
    cas = _coroutine(_fastmc.client.cas)
    delete = _coroutine(_fastmc.client.delete)
    touch = _coroutine(_fastmc.client.touch)
    incr = _coroutine(_fastmc.client.incr)
    decr = _coroutine(_fastmc.client.decr)
    get_multi = _coroutine(_fastmc.client.get_multi)
    gets_multi = _coroutine(_fastmc.client.gets_multi)
    set_multi = _coroutine(_fastmc.client.set_multi)
    add_multi = _coroutine(_fastmc.client.add_multi)
    replace_multi = _coroutine(_fastmc.client.replace_multi)
    delete_multi = _coroutine(_fastmc.client.delete_multi)
    incr_multi = _coroutine(_fastmc.client.incr_multi)
    touch_multi = _coroutine(_fastmc.client.touch_multi)
    flush_all = _coroutine(_fastmc.client.flush_all)
    gat = _coroutine(_fastmc.client.gat)
    gat_multi = _coroutine(_fastmc.client.gat_multi)

    # -- written out -----------------------------------------------------------------------------

    async def get_stats(self, *stat_args: str) -> list[tuple[bytes, dict[str, bytes]]]:
        """``get_stats()`` or ``get_stats(group)``, as the blocking client's (whose one
        argument has no default value, which a Python signature cannot say)."""
        return await self._get_stats(*stat_args)

    # ``fastmc.Client.get_or_set`` as a coroutine (one frame less than a wrapper: the hot path).
    get_or_set = stampede.aget_or_set

    async def invalidate(
        self, key: _Key, stale_time: int = 0, *, server_key: _Key | None = None
    ) -> bool:
        return await self.invalidate_multi([key], stale_time, server_key=server_key)

    async def invalidate_multi(
        self,
        keys: Collection[_Key],
        stale_time: int = 0,
        key_prefix: _Key = b"",
        *,
        server_key: _Key | None = None,
    ) -> bool:
        found, no_meta = await self._invalidate_multi(keys, stale_time, key_prefix, server_key)
        if no_meta:
            # Servers without the meta protocol have no stale values: delete, as the blocking
            # client does.
            found = await self.delete_multi(no_meta, key_prefix, server_key=server_key) and found
        return bool(found)
