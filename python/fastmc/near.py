"""The near cache: hot keys' values kept in this process, revalidated by CAS (docs/near-cache.md).

``NearCache`` is the store and its policy, with no I/O: which reads it answers, which keys it
admits (read ``hot_after`` times within ``window`` seconds), what it evicts (least recently
used, among admitted keys only), when a value must be checked (``ttl`` seconds after it was
last known current) and who checks it (one caller at a time; the others are served the held
value while the check is in flight). The clients that ask it are made by ``fastmc._nearfront``.
"""

from __future__ import annotations

import os
import threading
import time as _time
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from ._fastmc import (
    ConnectionError as _ConnectionError,
)
from ._fastmc import Error as _Error
from ._fastmc import (
    HostLookupError,
    NoServers,
    ReadError,
    ServerDead,
    ServerDown,
    SocketCreateError,
    UnknownReadFailure,
    WriteError,
)

__all__ = ["NearCache"]

# What a read finds (NearCache.read): served near, checked by this caller, fetched and kept
# (the key just became hot), or fetched as without a near cache.
HIT, CHECK, FILL, PASS = "hit", "check", "fill", "pass"

# Types whose values are shared between callers as they are: nothing can change them. Any other
# value is copied for each near hit, as a server read would give each caller its own object.
_IMMUTABLE = frozenset({str, bytes, int, float, bool, complex, type(None)})

# The failures that mean "the server cannot answer now", for stale_on_error (and a timeout,
# which raises pylibmc's base class itself: `unreachable`).
_UNREACHABLE: tuple[type[BaseException], ...] = (
    _ConnectionError,
    ServerDown,
    ServerDead,
    WriteError,
    ReadError,
    UnknownReadFailure,
    NoServers,
    HostLookupError,
    SocketCreateError,
)


def unreachable(exc: BaseException) -> bool:
    """Whether a check's failure means its server cannot answer now (stale_on_error)."""
    return isinstance(exc, _UNREACHABLE) or type(exc) is _Error


# What one held key costs besides its value and key (the entry and the map's slot), counted
# against max_bytes so that many tiny values cannot hold unbounded memory.
_ENTRY_BYTES = 64

_ALL: weakref.WeakSet[NearCache] = weakref.WeakSet()


def _after_fork() -> None:
    """A child process starts with every near cache empty: its parent's values are not its to
    revalidate, and its locks may have been held by a thread that does not exist here."""
    for near in list(_ALL):
        near._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Entry:
    """One held value: the value (shared if immutable, else copied per hit), its CAS, its size
    as stored, when it was last known current, and whether a check of it is in flight."""

    __slots__ = ("cas", "checked", "checking", "server_key", "size", "value")

    def __init__(self, value: Any, cas: int, size: int, now: float, server_key: Any) -> None:
        self.value = value
        self.cas = cas
        self.size = size
        self.checked = now
        self.checking = False
        self.server_key = server_key


def near_key(key: Any) -> bytes | None:
    """The key as the server sees it (before the namespace), or None for a key the native
    methods must judge (they raise for it)."""
    t = type(key)
    if t is bytes:
        return key  # type: ignore[no-any-return]
    if t is str:
        return key.encode()  # type: ignore[no-any-return]
    return None


class NearCache:
    """Hot keys' values kept in this process (docs/near-cache.md).

    - ``ttl``: seconds a value is served without asking the server; then it is checked by its
      CAS. A value another client writes is seen within ``ttl`` plus that check's round trip.
    - ``max_items``, ``max_bytes``: hard bounds on what is held (values counted as stored on the
      server, plus their keys and 64 bytes each).
    - ``hot_after``: a key is kept only once it was read this many times within ``window``
      seconds (1: from its first read).
    - ``stale_on_error``: while the server of a held key cannot be reached, serve the held value
      for up to ``max_stale`` seconds past its ``ttl`` (counted as ``stale_served``); off, the
      failure raises as without a near cache.

    A ``NearCache`` serves one client and its clones (``clone()``, the pools); give each
    independent client its own.
    """

    def __init__(
        self,
        ttl: float = 1.0,
        max_items: int = 1024,
        max_bytes: int = 16 << 20,
        hot_after: int = 2,
        stale_on_error: bool = False,
        *,
        window: float = 10.0,
        max_stale: float = 60.0,
    ) -> None:
        if not ttl > 0:
            raise ValueError("ttl must be a positive number of seconds")
        if max_items < 1 or max_bytes < 1:
            raise ValueError("max_items and max_bytes must be at least 1")
        if hot_after < 1:
            raise ValueError("hot_after must be at least 1")
        if not window > 0 or not max_stale >= 0:
            raise ValueError("window must be positive and max_stale not negative")
        self.ttl = float(ttl)
        self.max_items = int(max_items)
        self.max_bytes = int(max_bytes)
        self.hot_after = int(hot_after)
        self.stale_on_error = bool(stale_on_error)
        self.window = float(window)
        self.max_stale = float(max_stale)
        self._owner: tuple[str, ...] | None = None
        self._reset()
        _ALL.add(self)

    def __repr__(self) -> str:
        return (
            "NearCache(ttl=%r, max_items=%r, max_bytes=%r, hot_after=%r, stale_on_error=%r, "
            "window=%r, max_stale=%r)"
            % (
                self.ttl,
                self.max_items,
                self.max_bytes,
                self.hot_after,
                self.stale_on_error,
                self.window,
                self.max_stale,
            )
        )

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[bytes, _Entry] = OrderedDict()
        self._bytes = 0
        self._reads: dict[bytes, int] = {}
        self._window_end = _time.monotonic() + self.window
        # Bumped before and after every write: a fetch that overlapped a write keeps nothing.
        self.epoch = 0
        self._hits = 0  # (apart from _counts: the one counter of the hot path)
        # Whether the servers answer a conditional fetch (1.6.40); learned on the first check.
        self.conditional = True
        self._counts = dict.fromkeys(
            (
                "misses",
                "fills",
                "revalidations_unchanged",
                "revalidations_changed",
                "bytes_not_transferred",
                "evictions",
                "invalidations",
                "stale_served",
            ),
            0,
        )

    def attach(self, servers: Iterable[Any]) -> None:
        """Serve a client of ``servers``: refused for a client of other servers."""
        owner = tuple(map(str, servers))
        with self._lock:
            if self._owner is not None and self._owner != owner:
                raise ValueError("this NearCache serves another client's servers")
            self._owner = owner

    # -- reads -------------------------------------------------------------------------------

    def read(self, nk: bytes, server_key: Any) -> tuple[str, _Entry | None]:
        """What to do for a read of ``nk``: HIT (serve the entry), CHECK (this caller checks
        the entry), FILL (fetch and keep) or PASS (fetch only)."""
        now = _time.monotonic()
        with self._lock:
            e = self._items.get(nk)
            if e is not None and e.server_key == server_key:
                if now - e.checked < self.ttl or e.checking:
                    self._items.move_to_end(nk)
                    self._hits += 1
                    return HIT, e
                e.checking = True
                return CHECK, e
            self._counts["misses"] += 1
            if now >= self._window_end or len(self._reads) >= 4 * self.max_items:
                self._reads.clear()
                self._window_end = now + self.window
            n = self._reads.get(nk, 0) + 1
            if n >= self.hot_after:
                self._reads.pop(nk, None)
                return FILL, None
            self._reads[nk] = n
            return PASS, None

    def fresh(self, nk: bytes, server_key: Any) -> _Entry | None:
        """The entry for ``nk`` if it may be served without a check, counted as a hit; else
        None, counting nothing (``get_or_set``'s first look, which falls back to its own
        read)."""
        with self._lock:
            e = self._items.get(nk)
            if e is None or e.server_key != server_key or _time.monotonic() - e.checked >= self.ttl:
                return None
            self._hits += 1
            return e

    def value(self, e: _Entry) -> Any:
        """The held value for one caller: itself if immutable, else a copy of its own."""
        return self.copy(e.value)

    @staticmethod
    def copy(v: Any) -> Any:
        """``v`` for one caller: itself if immutable, else a copy of its own."""
        if type(v) in _IMMUTABLE:
            return v
        import copy

        return copy.deepcopy(v)

    def start(self) -> tuple[int, float]:
        """A fetch or a check begins: the write epoch and the time it starts from (what it
        reads is current at least as of then)."""
        return self.epoch, _time.monotonic()

    def keep(
        self, nk: bytes, server_key: Any, value: Any, cas: int, size: int, since: tuple[int, float]
    ) -> None:
        """Hold ``value`` for ``nk`` (fetched ``since``: the epoch and time it started), unless
        a write overlapped the fetch; evict the least recently used until both bounds hold."""
        cost = size + len(nk) + _ENTRY_BYTES
        if cost > self.max_bytes or not cas:
            return
        epoch, now = since
        with self._lock:
            if epoch != self.epoch:
                return
            old = self._items.pop(nk, None)
            if old is not None:
                self._bytes -= old.size + len(nk) + _ENTRY_BYTES
            self._items[nk] = _Entry(value, cas, size, now, server_key)
            self._bytes += cost
            self._counts["fills"] += 1
            while len(self._items) > self.max_items or self._bytes > self.max_bytes:
                k, e = self._items.popitem(last=False)
                self._bytes -= e.size + len(k) + _ENTRY_BYTES
                self._counts["evictions"] += 1

    def checked(self, nk: bytes, e: _Entry, since: tuple[int, float], unchanged: bool) -> None:
        """The check of ``e`` (started ``since``) is over: current again as of its start if
        ``unchanged`` (and no write overlapped it); else the next read checks again."""
        epoch, started = since
        with self._lock:
            e.checking = False
            if unchanged and self._items.get(nk) is e and epoch == self.epoch:
                e.checked = started
                self._counts["revalidations_unchanged"] += 1
                self._counts["bytes_not_transferred"] += e.size

    def changed(self) -> None:
        """A check found the item changed (or gone)."""
        with self._lock:
            self._counts["revalidations_changed"] += 1

    def refetched(self, nk: bytes, old: _Entry) -> None:
        """A check by a plain fetch (no meta protocol) ended: was the item unchanged?"""
        with self._lock:
            new = self._items.get(nk)
            same = new is not None and new.cas == old.cas
            self._counts["revalidations_unchanged" if same else "revalidations_changed"] += 1

    def servable_stale(self, e: _Entry) -> bool:
        """``stale_on_error``: may ``e`` be served while its server cannot be reached?"""
        if not self.stale_on_error:
            return False
        if _time.monotonic() - e.checked < self.ttl + self.max_stale:
            with self._lock:
                self._counts["stale_served"] += 1
            return True
        return False

    # -- writes ------------------------------------------------------------------------------

    def drop(self, keys: Iterable[bytes]) -> None:
        """A write to ``keys`` is about to start or has ended: forget them, and let no fetch
        that overlapped it keep what it read. A key that was held stays hot: its next read
        fetches it to be held again."""
        with self._lock:
            self.epoch += 1
            for nk in keys:
                e = self._items.pop(nk, None)
                if e is not None:
                    self._bytes -= e.size + len(nk) + _ENTRY_BYTES
                    self._counts["invalidations"] += 1
                    self._reads[nk] = self.hot_after - 1

    def forget(self, nk: bytes, e: _Entry) -> None:
        """A check found ``e``'s item gone: forget it (unless a write replaced it already)."""
        with self._lock:
            if self._items.get(nk) is e:
                del self._items[nk]
                self._bytes -= e.size + len(nk) + _ENTRY_BYTES

    def clear(self) -> None:
        """Forget every key (``flush_all``, a new server list or behaviors)."""
        with self._lock:
            self.epoch += 1
            self._counts["invalidations"] += len(self._items)
            self._items.clear()
            self._bytes = 0

    def metrics(self) -> dict[str, int]:
        """The counters since the cache was made, and what it holds now."""
        with self._lock:
            m = {"hits": self._hits, **self._counts}
            m["items"] = len(self._items)
            m["bytes"] = self._bytes
        return m


def from_option(option: Any) -> NearCache | None:
    """A client's ``near_cache`` argument: a NearCache, a dict of its arguments (Django's
    OPTIONS), or None."""
    if option is None or isinstance(option, NearCache):
        return option
    if isinstance(option, Mapping):
        return NearCache(**option)
    raise TypeError("near_cache must be a fastmc.NearCache, a dict of its arguments or None")
