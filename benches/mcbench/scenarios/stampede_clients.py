"""The read patterns the stampede scenario compares, one class each: built in the process that
uses it (after the fork), `read_fn()` gives each thread its read (it returns the value, computing
and storing it on a miss as that client's users do), `invalidate()` is the invalidator's call.

`compute` is the slow function every pattern calls: it logs when it ran and returns a value that
names the key and the time it was computed (the reader checks both)."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

EXPIRY, INVALIDATE = "expiry", "invalidate"


class Pattern:
    name = ""
    has_async = False

    def __init__(self, servers: list, key: str, mode: str, compute: Callable) -> None:
        self.servers, self.key, self.mode, self.compute = servers, key, mode, compute
        self._plain: Any = None
        self._plain_lock = threading.Lock()

    def read_fn(self) -> Callable[[], Any]: ...

    def invalidate(self) -> None: ...

    @staticmethod
    def ref_key(key: str) -> str:
        """The reference key: always there, read with a plain get after each read."""
        return key + ":ref"

    def plain_fn(self) -> Callable[[], Any]:
        """The reference read: fastmc's plain `get` of the reference key, one client per
        pattern (per process), shared by its threads."""
        with self._plain_lock:
            if self._plain is None:
                import fastmc

                self._plain = fastmc.Client(self.servers)
        return functools.partial(self._plain.get, self.ref_key(self.key))


class NaivePylibmc(Pattern):
    """get; on a miss compute, then set (invalidation: delete)."""

    name = "pylibmc naive"

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        import pylibmc

        self.base = pylibmc.Client(self.servers)
        self.lock = threading.Lock()
        self.ttl = 1 if self.mode == EXPIRY else 0

    def _clone(self) -> Any:
        with self.lock:  # a pylibmc client is one thread's: each thread gets a clone
            return self.base.clone()

    def read_fn(self) -> Callable[[], Any]:
        mc, key, compute, ttl = self._clone(), self.key, self.compute, self.ttl

        def read() -> Any:
            v = mc.get(key)
            if v is None:
                v = compute()
                mc.set(key, v, time=ttl)
            return v

        return read

    def invalidate(self) -> None:
        self._clone().delete(self.key)


class DogpilePylibmc(Pattern):
    """dogpile.cache region on `dogpile.cache.pylibmc` with distributed_lock=True; expiry is
    the region's expiration_time (its soft expiry: others keep the old value while one
    recomputes); invalidation is `region.delete` (region.invalidate is per process)."""

    name = "dogpile pylibmc lock"

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        from dogpile.cache import make_region

        self.region = make_region().configure(
            "dogpile.cache.pylibmc",
            expiration_time=1 if self.mode == EXPIRY else None,
            arguments={"url": self.servers, "distributed_lock": True, "lock_timeout": 10},
        )

    def read_fn(self) -> Callable[[], Any]:
        region, key, compute = self.region, self.key, self.compute
        return lambda: region.get_or_create(key, compute)

    def invalidate(self) -> None:
        self.region.delete(self.key)


class MetaMemcache(Pattern):
    """meta-memcache-py: get_or_lease with a LeasePolicy (waits from 5 ms to 100 ms, as
    fastmc's), a RecachePolicy for expiry, invalidate with a StalePolicy."""

    name = "meta-memcache"

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        import meta_memcache as m

        host, port = self.servers[0].rsplit(":", 1)
        self.mc = m.CacheClient.cache_client_from_servers(
            servers=[m.ServerAddress(host, int(port))],
            connection_pool_factory_fn=m.connection_pool_factory_builder(),
        )
        self.lease = m.LeasePolicy(
            ttl=10, miss_retries=200, miss_retry_wait=0.005, miss_max_retry_wait=0.1
        )
        self.recache = m.RecachePolicy(ttl=2) if self.mode == EXPIRY else None
        self.stale = m.StalePolicy(mark_stale_on_deletion_ttl=30)
        self.ttl = 2 if self.mode == EXPIRY else 0

    def read_fn(self) -> Callable[[], Any]:
        mc, key, compute, ttl = self.mc, self.key, self.compute, self.ttl
        lease, recache = self.lease, self.recache

        def read() -> Any:
            v = mc.get_or_lease(key, lease_policy=lease, recache_policy=recache)
            if v is None:
                v = compute()
                mc.set(key, v, ttl=ttl)
            return v

        return read

    def invalidate(self) -> None:
        self.mc.invalidate(self.key, stale_policy=self.stale)


class Fastmc(Pattern):
    """fastmc.Client.get_or_set (expiry: time=2, recompute_early=2, so one caller recomputes
    every second while the others keep the current value); invalidation: `invalidate`."""

    name = "fastmc"
    has_async = True

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        import fastmc

        self.mc = fastmc.Client(self.servers)
        self.kw = {"time": 2, "recompute_early": 2} if self.mode == EXPIRY else {"time": 0}

    def read_fn(self) -> Callable[[], Any]:
        mc, key, compute, kw = self.mc, self.key, self.compute, self.kw
        return lambda: mc.get_or_set(key, compute, **kw)

    def invalidate(self) -> None:
        self.mc.invalidate(self.key)


PATTERNS = (NaivePylibmc, DogpilePylibmc, MetaMemcache, Fastmc)
