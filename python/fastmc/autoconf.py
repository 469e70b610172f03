"""ElastiCache auto-discovery, as ``pylibmc.autoconf`` offers it (a client built once from the
configuration endpoint; :mod:`fastmc.autodiscovery` also keeps it up to date)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _fastmc
from .client import Client

if TYPE_CHECKING:
    from ._clusterconfig import NoAutoconfFound, UnsupportedAutoconfMethod

# The configuration reader (and with it asyncio and ssl) is imported when first used, not by
# `install_as_pylibmc()`, which registers this module as `pylibmc.autoconf`.
_LAZY = ("NoAutoconfFound", "UnsupportedAutoconfMethod")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _clusterconfig

        return getattr(_clusterconfig, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def elasticache(
    address: str = "127.0.0.1:11211",
    config_key: bytes | str = b"cluster",
    mc_key: bytes | str = "AmazonElastiCache:cluster",
) -> Client:
    """A Client for the cluster's nodes, read from its configuration endpoint: ``config get
    <config_key>``, or the key ``mc_key`` where the endpoint does not know that command.
    Raises :class:`NoAutoconfFound` when neither gives a configuration, and
    :class:`fastmc.autodiscovery.MalformedConfig` when it cannot be read."""
    from ._clusterconfig import fetch_config

    config = fetch_config(address, config_key=config_key, mc_key=mc_key)
    return Client(list(config.servers), binary=False)


__all__ = ["NoAutoconfFound", "UnsupportedAutoconfMethod", "_fastmc", "elasticache"]
