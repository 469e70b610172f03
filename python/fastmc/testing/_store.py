"""The fake server's clock. The store and the protocols are in Rust (``src/fake/``): what is
modelled after memcached there (its behaviour, checked against a real server by
``tests/api/test_fake_diff.py``): whole-second time, expiry times relative up to 30 days and
absolute beyond, negative times expiring at once, one CAS counter per server, the item size
limit counted as memcached counts an item (header, key, flags, value), ``flush_all`` with a
delay, ``incr``/``decr`` that parse a value as ``strtoull`` does and write a shorter result in
place padded with spaces, stale items and recache tokens of the meta commands. What is not:
eviction (memory is unlimited unless ``out_of_memory`` is switched on), slab classes, LRU
order, statistics beyond a few counters.
"""

from __future__ import annotations

from fastmc._fastmc import fake_clock

__all__ = ["DEFAULT_ITEM_SIZE_MAX", "FakeClock"]

#: memcached's default item size limit (``-I 1m``).
DEFAULT_ITEM_SIZE_MAX = 1024 * 1024


class FakeClock:
    """The time a fake server lives in: Unix seconds that move only when ``advance`` is called
    (``frozen=True``, the default: a test decides when time passes), or that follow the wall
    clock plus whatever was advanced (``frozen=False``). Several servers may share one."""

    def __init__(self, start: float | None = None, *, frozen: bool = True) -> None:
        self._core = fake_clock(start, frozen)

    @property
    def frozen(self) -> bool:
        return self._core.frozen

    @frozen.setter
    def frozen(self, on: bool) -> None:
        self._core.frozen = on

    def time(self) -> float:
        """The current Unix time of this clock, in seconds."""
        return self._core.time()

    def now(self) -> int:
        """The current time in whole seconds, as memcached keeps it."""
        return self._core.now()

    def unix_now(self) -> int:
        """The Unix time an absolute expiry time (beyond 30 days) is read against: the wall
        clock's while frozen (clients compute such times from their own clock, so
        ``time() + 60`` means a minute from the fake's now), else this clock's."""
        return self._core.unix_now()

    def advance(self, seconds: float) -> None:
        """Move this clock forward by `seconds` (items expire as if that time had passed)."""
        self._core.advance(seconds)
