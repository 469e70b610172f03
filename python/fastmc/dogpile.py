# mypy: disable-error-code="no-untyped-call"
# (dogpile.cache types its API only in part)
"""A dogpile.cache backend on fastmc: ``"fastmc"`` once this module is imported (or
``"fastmc.dogpile"``, registered the same way)::

    import fastmc.dogpile
    from dogpile.cache import make_region

    region = make_region().configure(
        "fastmc",
        expiration_time=3600,
        arguments={"url": ["127.0.0.1:11211"], "distributed_lock": True},
    )

It takes ``dogpile.cache.pylibmc``'s arguments (``url``, ``binary``, ``behaviors``,
``min_compress_len``, ``distributed_lock``, ``lock_timeout``), plus the value policy's
(``pickle``, ``pickle_classes``, ``signing_keys``, ``accept_unsigned_pickles``: docs/security.md;
``compression``, ``zstd_level``, ``zstd_dict``, ``zstd_min_len``: docs/features.md;
``serializer``: docs/security.md#values-without-pickle, where dogpile's (payload, metadata) pair is
stored as a list of two; ``dns_refresh``, ``dns_nameservers`` for ``dns+`` and ``dnssrv+`` names
in ``url``: docs/operations.md, DNS discovery), and differs in two ways:

- **One client for every thread.** dogpile's memcached backends keep a client per thread; a
  fastmc client is thread-safe, so one is shared (one small pool of connections per server).
- **The distributed lock is memcached's lease on the key itself** (``distributed_lock=True``),
  not a separate ``_lock<key>`` key: acquiring it is one ``mg <key> N<lease>``; exactly one
  caller wins a missing key (the others see the placeholder and wait), and a value dogpile
  considers expired is first marked stale (``md <key> C<cas> I``: only one invalidation of a
  given value succeeds), so exactly one caller recomputes while the others keep the stale
  value. A winner that dies holds the others up at most ``lock_timeout`` seconds (plus one, as
  memcached's clock ticks once a second; default 30).
  Servers without the meta protocol fall back to dogpile's ``add``-based lock key.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from dogpile.cache import register_backend
from dogpile.cache.api import NO_VALUE, CachedValue, CacheMutex
from dogpile.cache.backends.memcached import MemcachedLock, PylibmcBackend

import fastmc

__all__ = ["FastMCBackend", "LeaseLock"]

# The lease of a distributed lock without lock_timeout, in seconds.
DEFAULT_LEASE = 30


class LeaseLock(CacheMutex):
    """dogpile's mutex for ``key`` on memcached's lease of the key itself."""

    def __init__(self, client: fastmc.Client, key: str, lease: int) -> None:
        self.client = client
        self.key = key
        self.lease = max(1, int(lease))
        self._held: tuple[int, str] | None = None
        self._fallback: MemcachedLock | None = None

    def acquire(self, wait: bool = True) -> bool:
        if self._fallback is not None:
            return bool(self._fallback.acquire(wait))
        i = 0
        while True:
            state, value, cas = self.client._lease_get(self.key, self.lease, 0)
            if state in ("win", "win_stale", "win_early"):
                self._held = (cas, state)
                return True
            if state == "unsupported":
                self._fallback = MemcachedLock(lambda: self.client, self.key, self.lease)
                return bool(self._fallback.acquire(wait))
            if state == "hit" and value is not None and value != b"":
                # A value that dogpile asks a lock for is one it considers expired: mark it
                # stale with the CAS just read (only one invalidation of it succeeds); the next
                # lease read hands the win to exactly one caller.
                self.client._lease_release(self.key, cas, True)
                continue
            if not wait:
                return False
            time.sleep(min(0.1, ((i + 1) * random.random() + 2**i) / 400))
            i = min(i + 1, 8)

    def release(self) -> None:
        if self._fallback is not None:
            self._fallback.release()
            return
        held, self._held = self._held, None
        if held is not None:
            cas, state = held
            # Gone already if dogpile stored the new value (the CAS changed): only a lease whose
            # recompute failed is given back, so that the next reader wins at once.
            self.client._lease_release(self.key, cas, state == "win_stale")

    def locked(self) -> bool:
        if self._fallback is not None:
            return bool(self._fallback.locked())
        # Ours, or another caller's placeholder (dogpile never stores raw empty bytes).
        return self._held is not None or self.client.get(self.key) == b""


class FastMCBackend(PylibmcBackend):
    """``dogpile.cache.pylibmc`` on one shared fastmc client, with lease-based locks."""

    _POLICY = (
        "pickle",
        "pickle_classes",
        "signing_keys",
        "accept_unsigned_pickles",
        "compression",
        "zstd_level",
        "zstd_dict",
        "zstd_min_len",
        "serializer",
        "dns_refresh",
        "dns_nameservers",
    )

    def __init__(self, arguments: dict[str, Any]) -> None:
        self._policy = {k: arguments[k] for k in self._POLICY if k in arguments}
        super().__init__(arguments)

    def _imports(self) -> None:
        pass

    def _create_client(self) -> fastmc.Client:
        return fastmc.Client(self.url, binary=self.binary, behaviors=self.behaviors, **self._policy)

    @property
    def client(self) -> fastmc.Client:
        client: fastmc.Client | None = self.__dict__.get("_shared_client")
        if client is None:
            client = self.__dict__.setdefault("_shared_client", self._create_client())
        assert client is not None
        return client

    def get_mutex(self, key: str) -> Any:
        if not self.distributed_lock:
            return None
        # memcached counts expiry in whole seconds from a clock that ticks once a second, so a
        # lease of N seconds may end up to a second early: one more keeps it at least N.
        lease = self.lock_timeout + 1 if self.lock_timeout else DEFAULT_LEASE
        return LeaseLock(self.client, key, lease)

    def get(self, key: str) -> Any:
        return _loaded(self.client.get(key))

    def get_multi(self, keys: Any) -> list[Any]:
        values = self.client.get_multi(keys)
        return [_loaded(values.get(k)) for k in keys]

    def set(self, key: str, value: Any) -> None:
        self.client.set(key, self._stored(value), **self.set_arguments)

    def set_multi(self, mapping: Mapping[str, Any]) -> None:
        stored = {k: self._stored(v) for k, v in mapping.items()}
        self.client.set_multi(stored, **self.set_arguments)

    def _stored(self, value: Any) -> Any:
        # JSON and msgpack have no tuple: dogpile's (payload, metadata) goes as a list of two.
        if isinstance(value, CachedValue) and self.client.serializer != "pickle":
            return [value.payload, value.metadata]
        return value


def _loaded(value: Any) -> Any:
    """What a get found, as dogpile wants it: a lease placeholder (empty bytes) or a miss is no
    value; a (payload, metadata) pair stored as a list (serializer json or msgpack) is dogpile's
    CachedValue again, whatever this client's own serializer."""
    if value is None or value == b"":
        return NO_VALUE
    if (
        type(value) is list
        and len(value) == 2
        and type(value[1]) is dict
        and value[1].keys() == {"ct", "v"}
    ):
        return CachedValue(value[0], value[1])
    return value


register_backend("fastmc", "fastmc.dogpile", "FastMCBackend")
register_backend("fastmc.dogpile", "fastmc.dogpile", "FastMCBackend")
