"""The pylibmc-compatible ``Client`` (the Python layer over the native ``_pylibmc.client``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Union

from . import _fastmc, stampede
from .consts import BehaviorDict, distributions, distributions_rvs, hashers, hashers_rvs
from .values import compression_arguments, policy_arguments

server_type_map = {
    "tcp": _fastmc.server_type_tcp,
    "udp": _fastmc.server_type_udp,
    "unix": _fastmc.server_type_unix,
}

if TYPE_CHECKING:
    from typing_extensions import Self, TypeAlias

    from ._fastmc import _Key
    from ._fastmc import _ServerSpec as _AnyServerSpec
    from .dnsdiscovery import DNSWatch
    from .near import NearCache
    from .stampede import _Default, _OnWaitTimeout

    # What Client takes as a server: a spec string or a (type, host, port) tuple.
    _ServerSpec: TypeAlias = Union[str, tuple[int, str, int]]

_MISS_SENTINEL = object()

# One server-list change at a time (any client): the native swap and ``addresses`` agree.
# Reentrant: a server_added callback may call set_servers itself.
_MEMBERSHIP_LOCK = threading.RLock()

_known_behaviors = set(_fastmc.all_behaviors) | set(_fastmc.fastmc_behaviors) | {"namespace"}


def _split_port_weight(rest: str, port: int, weight: int, original: str) -> tuple[int, int]:
    # rest is what follows the host: "", ":port" or ":port:weight"
    if not rest:
        return port, weight
    if not rest.startswith(":"):
        raise ValueError(original)
    parts = rest[1:].split(":", 1)
    port = int(parts[0])
    if len(parts) == 2:
        weight = int(parts[1])
    return port, weight


def translate_server_spec(
    server: str, port: int = 11211, weight: int = 1
) -> tuple[int, str, int, int]:
    """Translate a server spec string to ``(type, address, port, weight)``.

    >>> translate_server_spec("127.0.0.1:22122:2")
    (1, '127.0.0.1', 22122, 2)
    """
    if server.startswith("/"):
        return (_fastmc.server_type_unix, server, 0, weight)
    addr = server
    stype = _fastmc.server_type_tcp
    if addr.startswith("udp:"):
        stype = _fastmc.server_type_udp
        addr = addr[4:]
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0:
            raise ValueError(addr)
        host, rest = addr[1:end], addr[end + 1 :]
        port, weight = _split_port_weight(rest, port, weight, addr)
    else:
        parts = addr.split(":", 2)
        host = parts[0]
        if len(parts) >= 2:
            port = int(parts[1])
        if len(parts) == 3:
            weight = int(parts[2])
    return (stype, host, port, weight)


def translate_server_specs(
    servers: Iterable[_ServerSpec],
) -> list[tuple[int, str, int] | tuple[int, str, int, int]]:
    addr_tups: list[tuple[int, str, int] | tuple[int, str, int, int]] = []
    for server in servers:
        if isinstance(server, tuple) and len(server) == 3:
            addr_tups.append(server)
        else:
            addr_tups.append(translate_server_spec(server))
    return addr_tups


def _warmed(failed: dict[str, Exception]) -> None:
    """A constructor's ``warm_up``: the servers that failed are logged, never raised."""
    if failed:
        from ._log import warm_up_failures

        warm_up_failures(failed)


def _has_dns(servers: list[Any]) -> bool:
    return any(isinstance(s, str) and s.startswith(("dns+", "dnssrv+")) for s in servers)


def _dns_first(
    client: Any, addresses: list[Any], refresh: float | None, nameservers: Iterable[str] | None
) -> list[Any]:
    """The servers to construct ``client`` with: its ``addresses``, each DNS name looked up
    (``fastmc.dnsdiscovery``; the module is imported only for a list that has one)."""
    client._dns_options = (refresh, nameservers)
    if not _has_dns(addresses):
        return addresses
    from .dnsdiscovery import DNSWatch

    watch = DNSWatch(addresses, refresh, nameservers)
    client.dns = watch
    return watch.first()


def _dns_follow(client: Any, native: Any) -> None:
    """After construction: the names of the list are looked up again in the background."""
    if client.dns is not None:
        client.dns.follow(client, _applier(native))


def _applier(native: Any) -> Any:
    """What a DNS refresh applies a new list with: the native ``set_servers``, ``addresses``
    (the names) left as they are."""

    def apply(client: Any, servers: list[Any]) -> tuple[list[str], list[str]]:
        with _MEMBERSHIP_LOCK:
            change: tuple[list[str], list[str]] = native(client, translate_server_specs(servers))
        return change

    return apply


def _set_servers(
    client: Any,
    native: Any,
    servers: Iterable[_AnyServerSpec],
) -> tuple[list[str], list[str]]:
    """``set_servers`` of either client: ``native`` is its class's native method. Strings are
    translated as the constructor translates them; tuples (3 or 4 items) go on as they are. DNS
    names are looked up first (nothing changes if that fails) and followed from then on."""
    if isinstance(servers, (str, bytes)):
        raise TypeError("set_servers takes a list of servers, not one string: %r" % (servers,))
    addresses = list(servers)
    watch = None
    resolved = addresses
    if _has_dns(addresses):
        from .dnsdiscovery import DNSWatch

        watch = DNSWatch(addresses, *getattr(client, "_dns_options", (None, None)))
        resolved = watch.first()
    specs = [s if isinstance(s, tuple) else translate_server_spec(s) for s in resolved]
    with _MEMBERSHIP_LOCK:
        # Assigned first: the native call delivers the events, and a callback may set
        # another list, which must stay the last one.
        old, client.addresses = client.addresses, addresses
        try:
            change: tuple[list[str], list[str]] = native(client, specs)
        except BaseException:
            client.addresses = old
            raise
        previous, client.dns = client.dns, watch
    if previous is not None:
        previous.stop()
    if watch is not None:
        watch.follow(client, _applier(native))
    return change


def _with_dns(client: Any, metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics()``: the native per-server counters, and ``"dns"`` where names are followed."""
    if client.dns is not None:
        metrics["dns"] = client.dns.metrics()
    return metrics


def _behaviors_symbolic(behaviors: dict[str, Any]) -> dict[str, Any]:
    behaviors = behaviors.copy()
    behaviors["hash"] = hashers_rvs[behaviors["hash"]]
    behaviors["distribution"] = distributions_rvs[behaviors["distribution"]]
    return behaviors


def _behaviors_numeric(behaviors: Any) -> Any:
    # Any in, Any out: whatever is not a dict goes on to the native check ("must be a dict")
    if not behaviors:
        return behaviors
    behaviors = behaviors.copy()
    if "_retry_timeout" in behaviors:
        behaviors.setdefault("retry_timeout", behaviors.pop("_retry_timeout"))
    unknown = set(behaviors).difference(_known_behaviors)
    if unknown:
        names = ", ".join(map(str, sorted(unknown, key=str)))
        raise ValueError("unknown behavior names: %s" % (names,))
    if "hash" in behaviors:
        behaviors["hash"] = hashers[behaviors["hash"]]
    if "distribution" in behaviors:
        behaviors["distribution"] = distributions[behaviors["distribution"]]
    if "ketama_hash" in behaviors and behaviors["ketama_hash"] in hashers:
        behaviors["ketama_hash"] = hashers[behaviors["ketama_hash"]]
    return behaviors


# The constructor's arguments the native one takes as they are.
_AS_GIVEN = (
    "binary",
    "username",
    "password",
    "tls",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_server_name",
)


def _near_class(cls: Any, maker: str) -> Any:
    """``cls`` with a near cache in front of it (``fastmc._nearfront``'s ``near_class`` or
    ``near_aio_class``), unless it is one already."""
    if cls.__dict__.get("_near_front"):
        return cls
    from . import _nearfront

    return getattr(_nearfront, maker)(cls)


def _construct(
    client: Any, init: Callable[..., None], set_servers: Any, a: Mapping[str, Any]
) -> None:
    """The body of both clients' constructors (``Client`` and ``fastmc.aio.Client``): ``a`` is
    the constructor's arguments (its ``locals()`` on entry), ``init`` the native constructor
    (``super().__init__``) and ``set_servers`` the native one. The servers (their DNS names
    looked up first), behaviors, credentials, TLS, value policy and compression go to the native
    constructor; then the names are followed."""
    client.binary = a["binary"]
    client.addresses = list(a["servers"])
    if a["near_cache"] is not None:
        from .near import from_option

        near = from_option(a["near_cache"])
        near.attach(client.addresses)  # type: ignore[union-attr]
        client.near_cache = near
    servers = _dns_first(client, client.addresses, a["dns_refresh"], a["dns_nameservers"])
    init(
        servers=translate_server_specs(servers),
        behaviors=_behaviors_numeric(a["behaviors"]),
        **{name: a[name] for name in _AS_GIVEN},
        **policy_arguments(
            a["pickle"],
            a["pickle_classes"],
            a["signing_keys"],
            a["accept_unsigned_pickles"],
            a["serializer"],
        ),
        **compression_arguments(
            a["compression"], a["zstd_level"], a["zstd_dict"], a["zstd_min_len"]
        ),
    )
    _dns_follow(client, set_servers)


class Client(_fastmc.client):
    """A memcached client: pylibmc's API on fastmc's thread-safe, pipelined core.

    One instance may be shared by any number of threads.
    """

    binary: bool
    addresses: list[_ServerSpec]
    dns: DNSWatch | None = None
    """What follows the DNS names of the server list (``fastmc.dnsdiscovery``), if it has any."""
    near_cache: NearCache | None = None
    """The near cache in front of this client (``fastmc.NearCache``), if it was given one."""

    def __new__(cls, *args: Any, near_cache: Any = None, **kwargs: Any) -> Self:
        # With a near cache the instance is of a subclass whose reads ask it first
        # (fastmc/_nearfront.py); without one, of this class, untouched.
        if near_cache is not None:
            cls = _near_class(cls, "near_class")
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
        _construct(self, super().__init__, _fastmc.client.set_servers, locals())
        if warm_up:
            _warmed(self.warm_up(warm_up))

    def __repr__(self) -> str:
        return "%s(%r, binary=%r)" % (self.__class__.__name__, self.addresses, self.binary)

    def metrics(self) -> dict[str, Any]:
        return _with_dns(self, super().metrics())

    def __str__(self) -> str:
        addrs = ", ".join(map(str, self.addresses))
        return "<%s for %s, binary=%r>" % (self.__class__.__name__, addrs, self.binary)

    def __reduce__(self) -> NoReturn:
        raise TypeError("cannot pickle %r object" % (self.__class__.__name__,))

    def __getitem__(self, key: _Key) -> Any:
        value = self.get(key, _MISS_SENTINEL)
        if value is _MISS_SENTINEL:
            raise KeyError(key)
        return value

    def __setitem__(self, key: _Key, value: Any) -> None:
        if not self.set(key, value):
            raise KeyError("failed setting %r" % (key,))

    def __delitem__(self, key: _Key) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key: _Key) -> bool:
        return self.get(key, _MISS_SENTINEL) is not _MISS_SENTINEL

    def set_servers(self, servers: Iterable[_AnyServerSpec]) -> tuple[list[str], list[str]]:
        """Replace the server list (the constructor's forms), atomically: every call runs on
        the old list or on the new one. Servers in both lists keep their connections, health
        and metrics; with a consistent distribution only the keys of added and removed servers
        move. No I/O. ``addresses`` becomes the new list. Returns ``(added, removed)`` as
        ``host:port`` names; fires ``server_added``/``server_removed`` (docs/operations.md).
        """
        return _set_servers(self, _fastmc.client.set_servers, servers)

    def get_behaviors(self) -> BehaviorDict:
        behaviors = super().get_behaviors()
        return BehaviorDict(self, _behaviors_symbolic(behaviors))

    def set_behaviors(self, behaviors: Mapping[str, Any]) -> None:
        return super().set_behaviors(_behaviors_numeric(behaviors))

    behaviors = property(get_behaviors, set_behaviors)
    """The behaviors (a :class:`BehaviorDict` snapshot; assigning a dict sets them)."""

    @property
    def behaviours(self) -> NoReturn:
        raise AttributeError("nobody uses british spellings")

    def get_or_set(
        self,
        key: _Key,
        default: _Default,
        time: int = 0,
        *,
        lease: int = 10,
        wait: float | None = None,
        recompute_early: int = 0,
        on_wait_timeout: _OnWaitTimeout = "compute",
        server_key: _Key | None = None,
    ) -> Any:
        """The value of ``key``; on a miss, ``default`` (a value, or a function called with no
        arguments) is stored for ``time`` seconds and returned, computed by exactly one caller
        across every client of the servers while the others wait. See docs/stampede.md.

        - ``lease``: seconds the recomputing caller holds the key (a crashed caller blocks the
          others at most this long).
        - ``wait``: seconds a caller waits for another's recompute (default: ``lease``); then
          ``on_wait_timeout`` says what it does: ``"compute"`` (call ``default`` without
          storing) or ``"raise"`` (``TimeoutError``).
        - ``recompute_early``: when fewer seconds than this are left before expiry, one caller
          recomputes while the others keep getting the current value.
        - ``server_key``: every read and write it makes is placed by this group key, as the
          other methods' ``server_key`` (docs/operations.md#routing-keys-keys-that-live-together).
        """
        return stampede.get_or_set(
            self,
            key,
            default,
            time,
            lease=lease,
            wait=wait,
            recompute_early=recompute_early,
            on_wait_timeout=on_wait_timeout,
            server_key=server_key,
        )

    def clone(self) -> Self:
        obj = super().clone()
        obj.addresses = list(self.addresses)
        obj.binary = self.binary
        return obj
