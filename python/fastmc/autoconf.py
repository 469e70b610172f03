"""ElastiCache auto-discovery, as ``pylibmc.autoconf`` offers it (a client built once from the
configuration endpoint; :mod:`fastmc.autodiscovery` also keeps it up to date)."""

from __future__ import annotations

from . import _fastmc
from .autodiscovery import NoAutoconfFound, UnsupportedAutoconfMethod, fetch_config
from .client import Client


def elasticache(
    address: str = "127.0.0.1:11211",
    config_key: bytes | str = b"cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
) -> Client:
    """A Client for the cluster's nodes, read from its configuration endpoint: ``config get
    <config_key>``, or the key ``mc_key`` where the endpoint does not know that command.
    Raises :class:`NoAutoconfFound` when neither gives a configuration, and
    :class:`fastmc.autodiscovery.MalformedConfig` when it cannot be read."""
    config = fetch_config(address, config_key=config_key, mc_key=mc_key)
    return Client(list(config.servers), binary=False)


__all__ = ["NoAutoconfFound", "UnsupportedAutoconfMethod", "_fastmc", "elasticache"]
