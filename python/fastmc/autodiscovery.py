"""Cluster auto-discovery: a client whose server list follows a configuration endpoint.

ElastiCache for memcached (engine 1.4.14 and later) and Google Cloud Memorystore for Memcached's
discovery endpoint answer ``config get cluster`` with::

    CONFIG cluster 0 <length>\\r\\n
    <version>\\n
    <host>|<ip>|<port> <host>|<ip>|<port> ...\\n
    \\r\\n
    END\\r\\n

Older ElastiCache engines answer ``ERROR`` to it and keep the same body in the key
``AmazonElastiCache:cluster`` instead (what ``pylibmc.autoconf`` reads); :func:`fetch_config`
tries the command first and falls back to the key. A node is addressed by its IP when the
configuration gives one, by its host name otherwise.

:func:`discover` builds a :class:`fastmc.Client` from the endpoint and refreshes its server list
in the background (a daemon thread, every ``interval`` seconds); :func:`discover_aio` does the
same for :class:`fastmc.aio.Client` with a task on the running loop. A refresh applies the
configuration through ``set_servers`` only when its version or its node list changed; a refresh
that fails (endpoint unreachable, malformed answer) is logged on the ``fastmc`` logger and the
current list is kept. ``close()`` stops the refreshing (docs/operations.md). With the client's
TLS keywords (``tls=True``, ``tls_ca_file``, ...) the endpoint is asked over TLS too, verified
the same way (:func:`tls_context`). The configuration's format and the exchange with the
endpoint are ``_clusterconfig.py``; this module re-exports their public names.

The endpoint decides where the client connects, and so where SASL credentials go: an answer
with more than ``max_nodes`` nodes is refused (the current list is kept), and SASL credentials
are refused over plain TCP unless ``allow_plaintext_sasl=True`` (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from ._clusterconfig import (
    _TLS_KEYWORDS,
    MAX_NODES,
    ClusterConfig,
    DiscoveryError,
    MalformedConfig,
    NoAutoconfFound,
    UnsupportedAutoconfMethod,
    _split_endpoint,
    fetch_config,
    fetch_config_async,
    parse_cluster_config,
    tls_context,
)
from ._log import LOGGER
from .client import Client

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self

    from . import aio

__all__ = [
    "AutoDiscovery",
    "ClusterConfig",
    "DiscoveredClient",
    "DiscoveryError",
    "MalformedConfig",
    "NoAutoconfFound",
    "UnsupportedAutoconfMethod",
    "discover",
    "discover_aio",
    "discovery_fetch_args",
    "discovery_options",
    "fetch_config",
    "fetch_config_async",
    "follow_aio",
    "parse_cluster_config",
    "tls_context",
]

_log = LOGGER


class AutoDiscovery:
    """Keeps ``client``'s server list in step with a configuration endpoint. ``refresh()``
    fetches once and applies a changed configuration; ``start()`` refreshes every ``interval``
    seconds on a daemon thread (which holds the client only weakly) until ``stop()``."""

    def __init__(
        self,
        client: Client | aio.Client,
        endpoint: str,
        *,
        interval: float = 60.0,
        timeout: float = 2.0,
        config_key: bytes | str = "cluster",
        mc_key: bytes | str = "AmazonElastiCache:cluster",
        config: ClusterConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        max_nodes: int = MAX_NODES,
    ) -> None:
        if not interval > 0:
            raise ValueError("the refresh interval must be positive, not %r" % (interval,))
        _split_endpoint(endpoint)
        self.endpoint = endpoint
        self.interval = interval
        self.timeout = timeout
        self.config_key = config_key
        self.mc_key = mc_key
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.max_nodes = max_nodes
        self.config = config
        """The configuration applied last."""
        self._client: Callable[[], Client | aio.Client | None] = weakref.ref(client)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.RLock()

    def fetch_args(self) -> dict[str, Any]:
        """How this asks its endpoint (``fetch_config``'s keyword arguments)."""
        return {
            "timeout": self.timeout,
            "config_key": self.config_key,
            "mc_key": self.mc_key,
            "ssl_context": self.ssl_context,
            "server_hostname": self.server_hostname,
            "max_nodes": self.max_nodes,
        }

    def fetch(self) -> ClusterConfig:
        return fetch_config(self.endpoint, **self.fetch_args())

    def apply(self, config: ClusterConfig) -> bool:
        """Apply ``config`` unless its version and nodes are those applied last; whether the
        client's list was set."""
        client = self._client()
        with self._lock:
            if client is None or config == self.config:
                return False
            added, removed = client.set_servers(list(config.servers))
            old = self.config
            self.config = config
        _log.info(
            "cluster configuration of %s: version %s -> %d, %d servers (added %s, removed %s)",
            self.endpoint,
            old.version if old else "none",
            config.version,
            len(config.servers),
            added,
            removed,
        )
        return True

    def refresh(self) -> bool:
        """Fetch the configuration and apply it if it changed. A failure is logged (WARNING)
        and the current list kept; returns whether the list was set."""
        try:
            config = self.fetch()
        except (DiscoveryError, OSError, ValueError) as e:
            self._failed(e)
            return False
        return self.apply(config)

    async def refresh_async(self) -> bool:
        """:meth:`refresh` on the running event loop."""
        try:
            config = await fetch_config_async(self.endpoint, **self.fetch_args())
        except (DiscoveryError, OSError, ValueError, asyncio.TimeoutError) as e:
            self._failed(e)
            return False
        return self.apply(config)

    def _failed(self, e: BaseException) -> None:
        _log.warning(
            "cluster configuration refresh from %s failed, keeping %d servers: %s",
            self.endpoint,
            len(self.config.servers) if self.config else 0,
            "%s: %s" % (type(e).__name__, e),
        )

    def start(self) -> None:
        """Refresh every ``interval`` seconds on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fastmc-discovery", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._client() is None:
                return
            self.refresh()

    def start_task(self) -> None:
        """Refresh every ``interval`` seconds in a task of the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run_async())

    def ensure_task(self) -> None:
        """:meth:`start_task` when called in a running loop and nothing refreshes yet (nor was
        stopped); otherwise nothing."""
        if self._task is not None or self._thread is not None or self._stop.is_set():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.start_task()

    async def _run_async(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.interval)
            if self._stop.is_set() or self._client() is None:
                return
            await self.refresh_async()

    def stop(self) -> None:
        """Stop refreshing (waits for a refresh in progress on the thread to finish)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()


class DiscoveredClient(Client):
    """A :class:`fastmc.Client` whose servers follow a configuration endpoint
    (:func:`discover`). ``discovery`` is its :class:`AutoDiscovery`; ``close()`` (or leaving a
    ``with`` block) stops the refreshing and closes the idle connections."""

    discovery: AutoDiscovery | None = None

    def close(self) -> None:
        if self.discovery is not None:
            self.discovery.stop()
        self.disconnect_all()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _fetch_args(
    timeout: float,
    config_key: bytes | str,
    mc_key: bytes | str,
    client_kwargs: dict[str, Any],
    max_nodes: int = MAX_NODES,
    allow_plaintext_sasl: bool = False,
) -> dict[str, Any]:
    """How a discovering client asks its endpoint: over TLS when the client's TLS keywords say
    so, verified as the client verifies its servers. SASL credentials without TLS are refused
    unless ``allow_plaintext_sasl``: whoever answers for the endpoint over plain TCP names the
    nodes the password is sent to, in clear (SASL PLAIN)."""
    ctx, name = tls_context(**{k: client_kwargs[k] for k in _TLS_KEYWORDS if k in client_kwargs})
    sasl = client_kwargs.get("username") is not None or client_kwargs.get("password") is not None
    if sasl and ctx is None:
        if not allow_plaintext_sasl:
            raise ValueError(
                "SASL credentials with discovery over plain TCP: whoever answers for the "
                "endpoint chooses the nodes that get the password; use TLS (tls=True), or "
                "pass allow_plaintext_sasl=True"
            )
        _log.warning(
            "SASL credentials go over plain TCP to the nodes a configuration endpoint names "
            "(allow_plaintext_sasl=True)"
        )
    return {
        "timeout": timeout,
        "config_key": config_key,
        "mc_key": mc_key,
        "ssl_context": ctx,
        "server_hostname": name,
        "max_nodes": max_nodes,
    }


_DISCOVERY_OPTIONS = frozenset(
    ("interval", "timeout", "config_key", "mc_key", "max_nodes", "allow_plaintext_sasl")
)


def discovery_options(option: object) -> dict[str, Any]:
    """An integration's ``discovery`` option (``True``, or a dict of :func:`discover`'s
    ``interval``, ``timeout``, ``config_key``, ``mc_key``, ``max_nodes`` and
    ``allow_plaintext_sasl``) as :func:`discover`'s keyword
    arguments; anything else is refused with ``TypeError``."""
    if option is True:
        return {}
    if not isinstance(option, Mapping):
        raise TypeError("the discovery option must be a dict or True, not %r" % (option,))
    unknown = set(option) - _DISCOVERY_OPTIONS
    if unknown:
        raise TypeError("unknown discovery options: %s" % ", ".join(sorted(map(str, unknown))))
    return dict(option)


def discovery_fetch_args(
    *,
    timeout: float = 2.0,
    config_key: bytes | str = "cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
    max_nodes: int = MAX_NODES,
    allow_plaintext_sasl: bool = False,
    **client_kwargs: Any,
) -> dict[str, Any]:
    """:func:`fetch_config`'s keyword arguments for a client made with ``client_kwargs``, as
    :func:`discover` passes them (TLS when the client's TLS keywords say so)."""
    return _fetch_args(timeout, config_key, mc_key, client_kwargs, max_nodes, allow_plaintext_sasl)


def discover(
    endpoint: str,
    *,
    interval: float = 60.0,
    timeout: float = 2.0,
    config_key: bytes | str = "cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
    behaviors: Mapping[str, Any] | None = None,
    max_nodes: int = MAX_NODES,
    allow_plaintext_sasl: bool = False,
    **client_kwargs: Any,
) -> DiscoveredClient:
    """A client for the cluster behind ``endpoint`` (``host:port``), refreshed every
    ``interval`` seconds. ``behaviors`` and ``client_kwargs`` (``binary``, the TLS keywords, ...)
    go to the client; with TLS keywords the endpoint is asked over TLS too. The first fetch's
    failure raises (there is no list to keep yet). A configuration of more than ``max_nodes``
    nodes is refused; SASL credentials (``username``/``password``) without TLS raise
    ``ValueError`` unless ``allow_plaintext_sasl``."""
    args = _fetch_args(timeout, config_key, mc_key, client_kwargs, max_nodes, allow_plaintext_sasl)
    config = fetch_config(endpoint, **args)
    mc = DiscoveredClient(list(config.servers), behaviors, **client_kwargs)
    mc.discovery = AutoDiscovery(mc, endpoint, interval=interval, config=config, **args)
    mc.discovery.start()
    return mc


async def discover_aio(
    endpoint: str,
    *,
    interval: float = 60.0,
    timeout: float = 2.0,
    config_key: bytes | str = "cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
    behaviors: Mapping[str, Any] | None = None,
    max_nodes: int = MAX_NODES,
    allow_plaintext_sasl: bool = False,
    **client_kwargs: Any,
) -> aio.Client:
    """:func:`discover` for the asyncio client: the refresh runs as a task of the running loop
    (``set_servers`` and its events on the loop's thread), stopped by ``await mc.close()``."""
    args = _fetch_args(timeout, config_key, mc_key, client_kwargs, max_nodes, allow_plaintext_sasl)
    config = await fetch_config_async(endpoint, **args)
    return follow_aio(endpoint, config, interval, args, behaviors, **client_kwargs)


def follow_aio(
    endpoint: str,
    config: ClusterConfig,
    interval: float,
    fetch_args: dict[str, Any],
    behaviors: Mapping[str, Any] | None = None,
    **client_kwargs: Any,
) -> aio.Client:
    """An asyncio client on ``config`` (already fetched from ``endpoint``, with ``fetch_args``:
    what :func:`discover` passes), refreshed by a task of the running loop."""
    from .aio import Client as AioClient

    mc = AioClient(list(config.servers), behaviors, **client_kwargs)
    discovery = AutoDiscovery(mc, endpoint, interval=interval, config=config, **fetch_args)
    mc.discovery = discovery
    discovery.start_task()
    return mc
