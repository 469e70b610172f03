"""An in-process memcached for tests: the real client, a fake server.

``FakeServer`` is a memcached 1.6 in this process: ``fastmc.Client`` and ``fastmc.aio.Client``
talk to it in-process (no socket, no thread: a call costs microseconds), and pylibmc, or any
client of the text and meta protocols, on a free loopback port served by one daemon thread;
either way as to memcached, so everything the client does (placement, pooling, timeouts,
failure handling) is the real thing. Its semantics are
memcached's: expiry on a clock the test moves (``advance``), CAS tokens, ``incr``/``decr``
wrap-around and errors, the item size limit (``TooBig``), ``flush_all`` with a delay,
``touch``/``gat``, the meta commands' leases, stale values and quiet writes, and the binary
protocol (``binary=True``). What it cannot be
exact about (eviction, memory, clock skew between servers, SASL) is listed in
docs/testing.md.

    from fastmc.testing import FakeServer

    with FakeServer() as fake:
        mc = fake.client()
        mc.set("k", "v", time=10)
        fake.advance(10)
        assert mc.get("k") is None

``FakeCluster(n)`` is several servers on one clock, for a client with the real key placement;
each server can be made to fail (``down()``, ``slow(seconds)``, ``out_of_memory = True``). The
pytest plugin (``fastmc.testing.plugin``) gives the fixtures ``fastmc_fake`` and
``fastmc_server``; ``django_caches`` points Django's ``CACHES`` at a fake.
"""

from __future__ import annotations

from typing import Any

from ._server import FakeServer
from ._store import DEFAULT_ITEM_SIZE_MAX, FakeClock

__all__ = ["DEFAULT_ITEM_SIZE_MAX", "FakeClock", "FakeCluster", "FakeServer", "django_caches"]


class FakeCluster:
    """`n` fake servers sharing one clock (``advance`` moves them all).

    ``addresses`` is the list to give a client; ``client()`` and ``aio_client()`` make one with
    the client's real key placement (``behaviors``, e.g. ``{"ketama": True}``, as usual), and
    ``server_for(key)`` says which server a key lives on."""

    def __init__(
        self,
        n: int = 3,
        *,
        item_size_max: int = DEFAULT_ITEM_SIZE_MAX,
        clock: FakeClock | None = None,
        version: str = "1.6.45",
    ) -> None:
        self.clock = clock if clock is not None else FakeClock()
        self.servers: list[FakeServer] = []
        try:
            for _ in range(n):
                fake = FakeServer(item_size_max=item_size_max, clock=self.clock, version=version)
                self.servers.append(fake)
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self) -> list[str]:
        return [s.address for s in self.servers]

    def __getitem__(self, i: int) -> FakeServer:
        return self.servers[i]

    def __len__(self) -> int:
        return len(self.servers)

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass on every server."""
        self.clock.advance(seconds)

    def client(self, **kwargs: Any) -> Any:
        """A ``fastmc.Client`` for every server (`kwargs` go to the client)."""
        from fastmc import Client

        return Client(self.addresses, **kwargs)

    def aio_client(self, **kwargs: Any) -> Any:
        """A ``fastmc.aio.Client`` for every server (`kwargs` go to the client)."""
        from fastmc.aio import Client

        return Client(self.addresses, **kwargs)

    def server_for(self, key: str | bytes) -> FakeServer:
        """The server that holds `key` (after a write of it: found by asking every server)."""
        k = key.encode() if isinstance(key, str) else key
        for s in self.servers:
            if k in s.items():
                return s
        raise KeyError(key)

    def flush(self) -> None:
        for s in self.servers:
            s.flush()

    def close(self) -> None:
        for s in self.servers:
            s.close()

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def django_caches(
    fake: FakeServer | FakeCluster,
    *,
    alias: str = "default",
    backend: str = "fastmc.django.FastMCCache",
    **options: Any,
) -> dict[str, dict[str, Any]]:
    """A ``CACHES`` setting whose `alias` cache is `fake` (`options`: the cache's other keys,
    e.g. ``TIMEOUT``, ``KEY_PREFIX``, ``OPTIONS``)::

        settings.CACHES = django_caches(fake)
    """
    location = fake.addresses if isinstance(fake, FakeCluster) else [fake.address]
    return {alias: {"BACKEND": backend, "LOCATION": location, **options}}
