"""pylibmc's client pools. A fastmc ``Client`` is already thread-safe and pools its sockets, so
these exist for code written against pylibmc; they behave exactly as pylibmc's do."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .client import Client


class ClientPool(queue.Queue[Client]):
    """A pool of clones of one client, checked out with ``reserve()``."""

    def __init__(self, mc: Client | None = None, n_slots: int = 0) -> None:
        queue.Queue.__init__(self, n_slots)
        if mc is not None and n_slots:
            self.fill(mc, n_slots)

    @contextmanager
    def reserve(self, block: bool = False) -> Iterator[Client]:
        """Context manager for reserving a client from the pool (``queue.Empty`` if none)."""
        mc = self.get(block)
        try:
            yield mc
        finally:
            self.put(mc)

    def fill(self, mc: Client, n_slots: int) -> None:
        """Fill *n_slots* of the pool with clones of *mc*."""
        for _ in range(n_slots):
            self.put(mc.clone())


class ThreadMappedPool(dict[int, Client]):
    """One clone of the master client per thread."""

    def __new__(cls, master: Client) -> ThreadMappedPool:
        return super().__new__(cls)

    def __init__(self, master: Client) -> None:
        super().__init__()
        self.master = master

    @property
    def current_key(self) -> int:
        return threading.get_ident()

    @contextmanager
    def reserve(self) -> Iterator[Client]:
        """Reserve this thread's client (cloning the master the first time)."""
        key = self.current_key
        mc = self.pop(key, None)
        if mc is None:
            mc = self.master.clone()
        try:
            yield mc
        finally:
            self[key] = mc

    def relinquish(self) -> Client | None:
        """Forget this thread's client and return it (or None)."""
        return self.pop(self.current_key, None)
