"""ElastiCache auto-discovery, as ``pylibmc.autoconf`` offers it."""

from __future__ import annotations

from . import _fastmc
from .client import Client


class UnsupportedAutoconfMethod(Exception):
    pass


class NoAutoconfFound(Exception):
    pass


def _parse_config(value: str | bytes) -> tuple[int, list[str]]:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    lines = value.strip().splitlines()
    if len(lines) < 2:
        raise NoAutoconfFound("malformed configuration %r" % (value,))
    version = int(lines[0])
    servers = []
    for node in lines[1].split():
        host, ip, port = node.split("|")
        servers.append("%s:%s" % (ip or host, port))
    return version, servers


def elasticache(
    address: str = "127.0.0.1:11211",
    config_key: bytes = b"cluster",
    mc_key: str = "AmazonElastiCache:cluster",
) -> Client:
    """Find the cluster's nodes from its configuration endpoint; return a Client for them."""
    mc = Client([address])
    value = mc.get(mc_key)
    if value is None:
        raise NoAutoconfFound(address)
    _, servers = _parse_config(value)
    return Client(servers, binary=False)


__all__ = ["NoAutoconfFound", "UnsupportedAutoconfMethod", "_fastmc", "elasticache"]
