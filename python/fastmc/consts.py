"""Constants of pylibmc: hash and distribution names, the behavior snapshot dict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _fastmc

if TYPE_CHECKING:
    from ._fastmc import aio_client, client

errors: tuple[type[_fastmc.Error], ...] = tuple(cls for _, cls in _fastmc.exceptions)

hashers: dict[str, int] = {
    "default": _fastmc.hash_default,
    "md5": _fastmc.hash_md5,
    "crc": _fastmc.hash_crc,
    "fnv1_64": _fastmc.hash_fnv1_64,
    "fnv1a_64": _fastmc.hash_fnv1a_64,
    "fnv1_32": _fastmc.hash_fnv1_32,
    "fnv1a_32": _fastmc.hash_fnv1a_32,
    "murmur": _fastmc.hash_murmur,
    "hsieh": _fastmc.hash_hsieh,
    "jenkins": _fastmc.hash_jenkins,
}
hashers_rvs = {v: k for k, v in hashers.items()}

distributions: dict[str, int] = {
    "modula": _fastmc.distribution_modula,
    "consistent": _fastmc.distribution_consistent,
    "consistent ketama": _fastmc.distribution_consistent_ketama,
    "random": _fastmc.distribution_random,
    "consistent ketama spy": _fastmc.distribution_consistent_ketama_spy,
    "consistent weighted": _fastmc.distribution_consistent_weighted,
    "virtual bucket": _fastmc.distribution_virtual_bucket,
    "consistent max": _fastmc.distribution_consistent_max,
}
distributions_rvs = {v: k for k, v in distributions.items()}


class BehaviorDict(dict[str, Any]):
    """A snapshot of a client's behaviors; item assignment and ``update`` write through."""

    def __init__(self, client: client | aio_client, *args: Any, **kwds: Any) -> None:
        super().__init__(*args, **kwds)
        self.client = client

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        self.client.set_behaviors({name: value})

    def update(self, d: dict[str, Any]) -> None:  # type: ignore[override]
        super().update(d)
        self.client.set_behaviors(d.copy())
