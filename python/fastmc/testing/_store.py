"""The fake server's items and clock: memcached 1.6's storage semantics, without any protocol.

What is modelled after memcached (doc/protocol.txt and its behaviour, checked against a real
server by ``tests/api/test_fake_diff.py``): whole-second time, expiry times relative up to 30
days and absolute beyond, negative times expiring at once, one CAS counter per server, the item
size limit counted as memcached counts an item (header, key, flags, value), ``flush_all`` with a
delay (items last stored before the moment it takes effect are gone), ``incr``/``decr`` that
parse a value as ``strtoull`` does and write a shorter result in place padded with spaces, stale
items and recache tokens of the meta commands. What is not: eviction (memory is unlimited unless
``out_of_memory`` is switched on), slab classes, LRU order, statistics beyond a few counters.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["FakeClock", "Item", "Store"]

#: memcached's largest relative expiry time (30 days); a larger one is a Unix time.
REALTIME_MAXDELTA = 60 * 60 * 24 * 30
#: memcached's default item size limit (``-I 1m``).
DEFAULT_ITEM_SIZE_MAX = 1024 * 1024
# sizeof(item) on a 64-bit build, and the 8 bytes of its CAS value
_ITEM_HEADER = 48 + 8
_U64 = 1 << 64


class FakeClock:
    """The time a fake server lives in: Unix seconds that move only when ``advance`` is called
    (``frozen=True``, the default: a test decides when time passes), or that follow the wall
    clock plus whatever was advanced (``frozen=False``). Several servers may share one."""

    def __init__(self, start: float | None = None, *, frozen: bool = True) -> None:
        self.frozen = frozen
        self._lock = threading.Lock()
        self._base = float(int(time.time()) if start is None else start)
        self._wall0 = time.time()
        self._offset = 0.0

    def time(self) -> float:
        """The current Unix time of this clock, in seconds."""
        with self._lock:
            now = self._base + self._offset
            if not self.frozen:
                now += time.time() - self._wall0
            return now

    def now(self) -> int:
        """The current time in whole seconds, as memcached keeps it."""
        return int(self.time())

    def unix_now(self) -> int:
        """The Unix time an absolute expiry time (beyond 30 days) is read against: the wall
        clock's while frozen (clients compute such times from their own clock, so
        ``time() + 60`` means a minute from the fake's now), else this clock's."""
        return int(time.time()) if self.frozen else self.now()

    def advance(self, seconds: float) -> None:
        """Move this clock forward by `seconds` (items expire as if that time had passed)."""
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        with self._lock:
            self._offset += seconds


@dataclass
class Item:
    """One stored item: value, client flags, expiry (Unix seconds, 0 = never), CAS value, when
    it was last stored (for ``flush_all``), and the meta protocol's stale and win marks."""

    value: bytes
    flags: int
    exptime: int
    cas: int
    time: int
    stale: bool = False
    token_sent: bool = False


def parse_u64(data: bytes) -> int | None:
    """`data` read as memcached's ``safe_strtoull`` reads a value: leading white space, an
    optional sign, decimal digits, then white space or the end (a NUL ends C's string too);
    None if it is not a number, out of range, or negative."""
    i, n = 0, len(data)
    while i < n and data[i] in b" \t\n\v\f\r":
        i += 1
    neg = False
    if i < n and data[i] in b"+-":
        neg = data[i] == 0x2D
        i += 1
    start = i
    while i < n and 0x30 <= data[i] <= 0x39:
        i += 1
    if i == start:
        return None
    if i < n and data[i] not in b" \t\n\v\f\r\x00":
        return None
    value = int(data[start:i])
    if value >= _U64:
        return None  # ERANGE
    if neg:
        value = (-value) % _U64
        if value >= 1 << 63:
            return None  # a negative number
    return value


class Store:
    """The items of one fake server, with memcached's rules. Every method takes the lock; the
    protocol layer (``_protocol.py``) calls them and turns their results into reply lines."""

    def __init__(self, clock: FakeClock, item_size_max: int = DEFAULT_ITEM_SIZE_MAX) -> None:
        self.clock = clock
        self.item_size_max = item_size_max
        self.lock = threading.RLock()
        self.items: dict[bytes, Item] = {}
        self.out_of_memory = False
        # The memcached release whose answers to malformed commands are copied (see
        # `FakeServer`): 1.6.18's where older than 1.6.45.
        self.version = b"1.6.45"
        self._cas = 0
        self.started = clock.unix_now() - 62  # as memcached: a minute and 2 s before now
        self._oldest_live = 0
        self._oldest_cas = 0
        self.stats = {"cmd_get": 0, "get_hits": 0, "get_misses": 0, "cmd_set": 0, "total_items": 0}

    # -- time and CAS ----------------------------------------------------------------------------
    def next_cas(self) -> int:
        self._cas += 1
        return self._cas

    def realtime(self, exptime: int) -> int:
        """An expiry time as sent to the absolute time it ends at (0: never; 1: at once)."""
        if exptime == 0:
            return 0
        if exptime < 0:
            exptime = REALTIME_MAXDELTA + 1  # memcached: a negative time is long past
        if exptime > REALTIME_MAXDELTA:
            if exptime <= self.started:
                return 1
            return self.clock.now() + exptime - self.clock.unix_now()
        return self.clock.now() + exptime

    def _flushed(self, it: Item, now: int) -> bool:
        live = self._oldest_live
        if live == 0 or live > now:
            return False
        return it.time <= live or (self._oldest_cas != 0 and it.cas < self._oldest_cas)

    # -- lookups ---------------------------------------------------------------------------------
    def get(self, key: bytes) -> Item | None:
        """The live item under `key` (an expired or flushed one is removed)."""
        it = self.items.get(key)
        if it is None:
            return None
        now = self.clock.now()
        if (it.exptime != 0 and it.exptime <= now) or self._flushed(it, now):
            del self.items[key]
            return None
        return it

    def fits(self, key: bytes, flags: int, length: int) -> bool:
        """Whether an item of this size fits under the item size limit, counted as memcached
        counts it: header and CAS, key and its NUL, 4 bytes of flags unless 0, value and CRLF."""
        total = _ITEM_HEADER + len(key) + 1 + (4 if flags else 0) + length + 2
        return total <= self.item_size_max

    def link(self, key: bytes, value: bytes, flags: int, exptime: int, cas: int = 0) -> Item:
        """Store a new item under `key` (exptime already absolute), with a new CAS value."""
        it = Item(value, flags, exptime, cas or self.next_cas(), self.clock.now())
        self.items[key] = it
        self.stats["total_items"] += 1
        return it

    # -- commands --------------------------------------------------------------------------------
    def store(
        self, mode: str, key: bytes, value: bytes, flags: int, exptime: int, cas: int = 0
    ) -> str:
        """set/add/replace/append/prepend/cas: "STORED", "NOT_STORED", "EXISTS", "NOT_FOUND",
        "TOO_LARGE" or "NO_MEMORY". `exptime` is as sent; `cas` (for "cas") the token."""
        self.stats["cmd_set"] += 1
        if not self.fits(key, flags, len(value)) or self.out_of_memory:
            status = "NO_MEMORY" if self.fits(key, flags, len(value)) else "TOO_LARGE"
            if mode == "set":
                self.items.pop(key, None)  # memcached drops the old value of a refused set
            return status
        old = self.get(key)
        if mode == "cas":
            if old is None:
                return "NOT_FOUND"
            if old.cas != cas:
                return "EXISTS"
        elif (mode == "add" and old is not None) or (mode != "set" and mode != "add" and not old):
            return "NOT_STORED"
        if mode in ("append", "prepend") and old is not None:
            joined = old.value + value if mode == "append" else value + old.value
            if not self.fits(key, old.flags, len(joined)):
                return "NOT_STORED"
            self.link(key, joined, old.flags, old.exptime)
            return "STORED"
        self.link(key, value, flags, self.realtime(exptime))
        return "STORED"

    def delta(self, key: bytes, incr: bool, delta: int) -> int | str:
        """incr/decr: the new value, or "NOT_FOUND" / "NON_NUMERIC"."""
        it = self.get(key)
        if it is None:
            return "NOT_FOUND"
        n = parse_u64(it.value) if it.value else None
        if n is None:
            return "NON_NUMERIC"
        n = (n + delta) % _U64 if incr else max(0, n - delta)
        digits = b"%d" % n
        if len(digits) <= len(it.value):
            # memcached writes a result that fits over the old one, padded with spaces
            it.value = digits + b" " * (len(it.value) - len(digits))
            it.cas = self.next_cas()
        else:
            self.link(key, digits, it.flags, it.exptime)
        return n

    def touch(self, key: bytes, exptime: int) -> Item | None:
        it = self.get(key)
        if it is not None:
            it.exptime = self.realtime(exptime)
        return it

    def delete(self, key: bytes) -> bool:
        return self.get(key) is not None and self.items.pop(key, None) is not None

    def flush_all(self, delay: int) -> None:
        now = self.clock.now()
        new_oldest = self.realtime(delay) if delay > 0 else now
        self._oldest_live = new_oldest - 1
        if self._oldest_live <= now:
            self._oldest_cas = self.next_cas()
            self.items.clear()
