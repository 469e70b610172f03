"""What keeps the figures honest: values that name their key and round, the diff of a wrong
read-back, and the run's list of failures (printed loudly at once and listed at the end)."""

from __future__ import annotations

import sys
from typing import Any, Callable

from .settings import BANNER, VALUE_SIZE


def values_for(keys: list[str], salt: str) -> list[bytes]:
    """Distinct 40-byte values that name their key and round: a mix-up cannot go unnoticed."""
    return [(k + salt).encode().ljust(VALUE_SIZE, b"-")[:VALUE_SIZE] for k in keys]


def diff(got: dict, want: dict) -> str:
    missing = [k for k in want if k not in got]
    wrong = [k for k in want if k in got and got[k] != want[k]]
    extra = [k for k in got if k not in want]
    out = f"{len(missing)} missing, {len(wrong)} wrong, {len(extra)} unexpected"
    if wrong:
        k = wrong[0]
        out += f" (e.g. {k!r}: {got[k]!r} instead of {want[k]!r})"
    return out


class Failures:
    """Wrong or missing read-backs and client errors: printed loudly at once and at the end."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, client: str, what: str) -> None:
        msg = f"{where}: {client}: {what}"
        self.items.append(msg)
        print(f"\n{BANNER}\nVERIFICATION FAILURE  {msg}\n{BANNER}\n", file=sys.stderr, flush=True)

    def check(self, where: str, col: Any, ok: bool, what: str) -> bool:
        """Record a failure of `col` (a column) unless ok; returns ok."""
        if not ok:
            self.add(where, col.name, what)
        return ok

    def safe(self, where: str, col: Any, fn: Callable, *args: Any) -> Any:
        """Run one measurement; a client that raises is reported and its cell left empty."""
        try:
            return fn(*args)
        except Exception as e:  # reported loudly, the run goes on
            self.add(where, col.name, f"raised {e!r}")
            return None

    async def safe_async(self, where: str, name: str, fn: Callable, *args: Any) -> Any:
        """`safe` for a coroutine function and a client known by name."""
        try:
            return await fn(*args)
        except Exception as e:  # reported loudly, the run goes on
            self.add(where, name, f"raised {e!r}")
            return None
