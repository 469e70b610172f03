"""A column: one client library configured one way, its operations as plain callables (the
libraries' own bound methods, no wrapper layer on the hot path); loops are timed as a whole."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

MULTI_OPS = ("get_multi", "set_multi", "delete_multi")
NOREPLY_MULTI_OPS = ("set_multi", "delete_multi")


class Column:
    """A client library configured one way: its operations as plain callables."""

    kind = "peer"

    def __init__(self, name: str, tag: str) -> None:
        self.name = name
        self.tag = tag  # short, fixed-length key prefix: every client has its own keys
        self.get = self.set = self.delete = self.incr = None
        self.get_multi = self.set_multi = self.delete_multi = None
        self.set_nr = self.delete_nr = self.set_multi_nr = self.delete_multi_nr = None
        self.sync_nr: Callable | None = None  # after noreply calls: wait until all applied
        self.threads_factory: Callable | None = None  # -> (per-thread (get, set) maker, note)
        self.note = ""
        self.clients: list = []  # the library's client objects, for close()

    def use(self, mc: Any, multi: tuple = MULTI_OPS) -> None:
        """Take a client's own methods as the operations; `multi` names its get/set/delete
        multi methods."""
        self.clients.append(mc)
        self.get, self.set, self.delete, self.incr = mc.get, mc.set, mc.delete, mc.incr
        self.get_multi, self.set_multi, self.delete_multi = (getattr(mc, m) for m in multi)

    def use_noreply(self, nr: Any, multi: tuple = NOREPLY_MULTI_OPS) -> None:
        """Take the writes of a client configured for noreply as the noreply operations."""
        self.clients.append(nr)
        self.set_nr, self.delete_nr = nr.set, nr.delete
        self.set_multi_nr, self.delete_multi_nr = (getattr(nr, m) for m in multi)
        self.sync_nr = functools.partial(nr.get, f"{self.tag}:probe")

    def keys(self, scope: str, n: int, start: int = 0) -> list[str]:
        return [f"{self.tag}:{scope}:{i:07d}" for i in range(start, start + n)]

    def prepare(self, op: str, arg: Any) -> None:
        """Called before a timed multi call, untimed (the bound builds its requests here)."""

    # --- loops of single operations (timed as a whole) ---
    def loop_set(self, items: list) -> int:
        f = self.set
        bad = 0
        for k, v in items:
            if not f(k, v):
                bad += 1
        return bad

    def loop_get(self, items: list) -> int:
        f = self.get
        bad = 0
        for k, v in items:
            if f(k) != v:
                bad += 1
        return bad

    def loop_delete(self, keys: list) -> int:
        f = self.delete
        bad = 0
        for k in keys:
            if not f(k):
                bad += 1
        return bad

    def loop_incr(self, key: str, n: int) -> Any:
        f = self.incr
        r = None
        for _ in range(n):
            r = f(key, 1)
        return r

    def loop_set_nr(self, items: list) -> int:
        f = self.set_nr
        for k, v in items:
            f(k, v)
        return 0

    def loop_delete_nr(self, keys: list) -> int:
        f = self.delete_nr
        for k in keys:
            f(k)
        return 0

    # --- checks of results (never timed) ---
    def stored_ok(self, res: Any, n: int) -> bool:
        return res is True or (isinstance(res, (list, tuple, set)) and not res)

    def deleted_ok(self, res: Any, n: int) -> bool:
        return bool(res)

    def nr_ok(self, res: Any, n: int) -> bool:
        return True  # noreply writes are checked by reading back

    def decode_get(self, res: Any, keys: list) -> dict:
        return res

    def read_back(self, keys: list) -> dict:
        return self.decode_get(self.get_multi(keys), keys)

    def read_counter(self, key: str) -> int:
        v = self.get(key)
        return int(v) if v is not None else -1

    def set_counter(self, key: str) -> None:
        self.set(key, b"0")

    def close(self) -> None:
        """Drop the clients' connections (never during a run; pytest checks for open sockets)."""
        for mc in self.clients:
            fn = getattr(mc, "disconnect_all", None) or getattr(mc, "quit", None)
            if fn is not None:
                with contextlib.suppress(Exception):
                    fn()


def floors(cols: list) -> list:
    return [c for c in cols if c.kind == "floor"]


def fastmc_col(cols: list) -> Column | None:
    return next((c for c in cols if c.kind == "fastmc"), None)


def peer_cols(cols: list) -> list:
    return [c for c in cols if c.kind == "peer"]
