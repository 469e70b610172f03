"""The cluster configuration of a discovery endpoint: its format (:func:`parse_cluster_config`)
and asking an endpoint for it (:func:`fetch_config`, :func:`fetch_config_async`), over TCP or
TLS (:func:`tls_context`). No client, no thread: :mod:`fastmc.autodiscovery` builds on this and
re-exports every public name here, and the classes say they are its (``__module__``), as they
were before this module split off.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from dataclasses import dataclass

# A configuration answer larger than this is refused (a cluster has at most a few hundred nodes).
_MAX_REPLY = 1 << 20

# The most nodes a configuration may list (``max_nodes``' default). ElastiCache for memcached has
# 60 nodes per cluster unless its quota is raised, Memorystore 20; every node costs a server
# object, pooled connections and its metrics, so a hostile answer must not list 50,000.
MAX_NODES = 512


class DiscoveryError(Exception):
    """The cluster configuration could not be fetched or understood."""

    __module__ = "fastmc.autodiscovery"


class UnsupportedAutoconfMethod(DiscoveryError):
    """The endpoint does not know ``config get`` (it answered ``ERROR``)."""

    __module__ = "fastmc.autodiscovery"


class NoAutoconfFound(DiscoveryError):
    """The endpoint has no cluster configuration (neither the command nor the legacy key)."""

    __module__ = "fastmc.autodiscovery"


class MalformedConfig(DiscoveryError, ValueError):
    """The endpoint's answer is not a cluster configuration."""

    __module__ = "fastmc.autodiscovery"


@dataclass(frozen=True)
class ClusterConfig:
    """One cluster configuration: its version and its nodes as ``host:port`` server specs."""

    version: int
    servers: tuple[str, ...]


# Set after the decorator: dataclass reads the module the class names while it builds it.
ClusterConfig.__module__ = "fastmc.autodiscovery"


def _node_spec(node: str) -> str:
    fields = node.split("|")
    if len(fields) != 3:
        raise MalformedConfig("node %r is not host|ip|port" % (node,))
    host, ip, port = fields
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise MalformedConfig("node %r has no valid port" % (node,))
    address = ip or host
    if not address:
        raise MalformedConfig("node %r has neither a host name nor an IP" % (node,))
    if not all(c.isalnum() or c in ".-_:%" for c in address):
        raise MalformedConfig("node %r has an invalid address" % (node,))
    if ":" in address:  # an IPv6 address
        address = "[%s]" % (address,)
    return "%s:%d" % (address, int(port))


def parse_cluster_config(body: bytes | str, max_nodes: int = MAX_NODES) -> ClusterConfig:
    """The configuration in a ``config get cluster`` body (or the legacy key's value):
    ``<version>\\n<host|ip|port> ...\\n``. Raises :class:`MalformedConfig` on anything else,
    and on more than ``max_nodes`` nodes."""
    if isinstance(body, bytes):
        try:
            body = body.decode("ascii")
        except UnicodeDecodeError:
            raise MalformedConfig("the configuration is not ASCII: %r" % (body[:100],)) from None
    lines = body.strip().split("\n")
    if len(lines) != 2:
        raise MalformedConfig(
            "expected a version line and a node line, got %r" % (body[:200],),
        )
    version, nodes = lines[0].strip(), lines[1].split()
    if not version.isdigit():
        raise MalformedConfig("the configuration version %r is not a number" % (version,))
    if not nodes:
        raise MalformedConfig("the configuration lists no node")
    if len(nodes) > max_nodes:
        raise MalformedConfig(
            "the configuration lists %d nodes, over max_nodes (%d)" % (len(nodes), max_nodes)
        )
    return ClusterConfig(int(version), tuple(_node_spec(n) for n in nodes))


def _key_bytes(key: bytes | str) -> bytes:
    k = key.encode("ascii") if isinstance(key, str) else bytes(key)
    if not k or any(c <= 32 or c == 127 for c in k):
        raise ValueError("invalid configuration key %r" % (key,))
    return k


class _Reply:
    """The answer to one request, parsed as bytes arrive (no I/O): ``feed`` returns
    ``(done, body)``; ``body`` is None for a missing key."""

    def __init__(self, command: bool) -> None:
        self.command = command
        self.buf = b""

    def feed(self, chunk: bytes) -> tuple[bool, bytes | None]:
        self.buf += chunk
        if len(self.buf) > _MAX_REPLY:
            raise MalformedConfig("the configuration answer is over %d bytes" % (_MAX_REPLY,))
        head, sep, rest = self.buf.partition(b"\r\n")
        if not sep:
            return False, None
        words = head.split()
        if head == b"END":
            if self.command:  # no such configuration: the legacy key may have it
                raise UnsupportedAutoconfMethod("the endpoint has no configuration %r" % (head,))
            return True, None
        if head == b"ERROR" or head.startswith((b"CLIENT_ERROR", b"SERVER_ERROR")):
            if self.command and head == b"ERROR":
                raise UnsupportedAutoconfMethod("the endpoint does not know config get")
            raise DiscoveryError("the endpoint answered %r" % (head.decode("latin-1"),))
        want = b"CONFIG" if self.command else b"VALUE"
        if len(words) != 4 or words[0] != want or not words[3].isdigit():
            raise MalformedConfig("unexpected answer %r" % (head[:200].decode("latin-1"),))
        n = int(words[3])
        if len(rest) < n + 7:  # the body, \r\n, END\r\n
            return False, None
        body, tail = rest[:n], rest[n:]
        if not tail.startswith(b"\r\nEND\r\n"):
            raise MalformedConfig("the configuration block is not closed by END")
        return True, body


_TLS_KEYWORDS = ("tls", "tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name")


def tls_context(
    tls: bool = False,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    tls_server_name: str | None = None,
) -> tuple[ssl.SSLContext | None, str | None]:
    """The TLS context and server name to ask a configuration endpoint with, from the client's
    TLS keywords, which it verifies as the client verifies its servers: against ``tls_ca_file``
    or else the system's CA store, under ``tls_server_name`` or else the endpoint's host, with
    the client certificate ``tls_cert_file``/``tls_key_file`` if given. ``(None, None)`` when
    none is given (plain TCP)."""
    if not (tls or tls_ca_file or tls_cert_file or tls_key_file or tls_server_name):
        return None, None
    ctx = ssl.create_default_context(cafile=tls_ca_file)
    if tls_cert_file or tls_key_file:
        if not (tls_cert_file and tls_key_file):
            raise ValueError("a TLS client certificate needs both tls_cert_file and tls_key_file")
        ctx.load_cert_chain(tls_cert_file, tls_key_file)
    return ctx, tls_server_name


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError("the configuration endpoint must be host:port, not %r" % (endpoint,))
    return host.strip("[]"), int(port)


def _requests(config_key: bytes | str, mc_key: bytes | str) -> list[tuple[bytes, bool]]:
    return [
        (b"config get " + _key_bytes(config_key) + b"\r\n", True),
        (b"get " + _key_bytes(mc_key) + b"\r\n", False),
    ]


def _outcome(body: bytes | None, endpoint: str, max_nodes: int) -> ClusterConfig:
    if body is None:
        raise NoAutoconfFound("no cluster configuration at %s" % (endpoint,))
    return parse_cluster_config(body, max_nodes)


def fetch_config(
    endpoint: str,
    *,
    timeout: float = 2.0,
    config_key: bytes | str = "cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    max_nodes: int = MAX_NODES,
) -> ClusterConfig:
    """Ask ``endpoint`` (``host:port``) for the cluster configuration: ``config get
    <config_key>``, or, where that is unknown, the legacy key ``mc_key``. ``timeout`` bounds
    the whole exchange; ``ssl_context`` asks over TLS (verified as ``server_hostname``, or the
    endpoint's host). Raises :class:`DiscoveryError` (or ``OSError`` for the network and TLS),
    :class:`MalformedConfig` for more than ``max_nodes`` nodes."""
    host, port = _split_endpoint(endpoint)
    deadline = time.monotonic() + timeout
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
        if ssl_context is not None:
            sock = stack.enter_context(
                ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            )
        for request, command in _requests(config_key, mc_key):
            sock.sendall(request)
            reply = _Reply(command)
            try:
                while True:
                    sock.settimeout(max(0.001, deadline - time.monotonic()))
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise DiscoveryError("the endpoint closed the connection")
                    done, body = reply.feed(chunk)
                    if done:
                        return _outcome(body, endpoint, max_nodes)
            except UnsupportedAutoconfMethod:
                continue
    raise DiscoveryError("unreachable")  # pragma: no cover (the legacy get always decides)


async def fetch_config_async(
    endpoint: str,
    *,
    timeout: float = 2.0,
    config_key: bytes | str = "cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    max_nodes: int = MAX_NODES,
) -> ClusterConfig:
    """:func:`fetch_config` on the running event loop."""
    host, port = _split_endpoint(endpoint)
    tls = (ssl_context, server_hostname or host) if ssl_context is not None else None
    keys = (config_key, mc_key, max_nodes)
    return await asyncio.wait_for(_exchange(host, port, endpoint, keys, tls), timeout)


async def _exchange(
    host: str,
    port: int,
    endpoint: str,
    keys: tuple[bytes | str, bytes | str, int],
    tls: tuple[ssl.SSLContext, str] | None,
) -> ClusterConfig:
    config_key, mc_key, max_nodes = keys
    if tls is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=tls[0], server_hostname=tls[1]
        )
    try:
        for request, command in _requests(config_key, mc_key):
            writer.write(request)
            await writer.drain()
            reply = _Reply(command)
            try:
                while True:
                    chunk = await reader.read(65536)
                    if not chunk:
                        raise DiscoveryError("the endpoint closed the connection")
                    done, body = reply.feed(chunk)
                    if done:
                        return _outcome(body, endpoint, max_nodes)
            except UnsupportedAutoconfMethod:
                continue
        raise DiscoveryError("unreachable")  # pragma: no cover
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
