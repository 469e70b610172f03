"""The timed, checked steps that several scenarios share. Each step times one call, then checks
what it did (never inside the clock), and keeps the time under its key only when the check
passed. Failure messages are templates: {bad} (operations that failed in a loop), {left} (keys
still there after a delete), {res} (the call's result as a string; `{res:.80}` cuts it)."""

from __future__ import annotations

from typing import Any, Callable

from ..columns import Column
from ..context import Ctx
from ..measure import Samples, rotated, timed
from ..verify import diff, values_for


def interleaved(
    ctx: Ctx, samples: Samples, cols: list, turn: int, where: str, fn: Callable, *args: Any
) -> None:
    """One round: fn(Steps for the column, *args) for every column, their order rotated by
    `turn` so that no client always runs first; a client that raises is reported and the
    others go on."""
    for c in rotated(cols, turn):
        ctx.failures.safe(where, c, fn, Steps(ctx, samples, c), *args)


def rounds(ctx: Ctx, cols: list, count: int, where: str, fn: Callable) -> Samples:
    """`count` interleaved rounds of fn(steps, r); the samples the steps kept."""
    samples = Samples()
    for r in range(count):
        interleaved(ctx, samples, cols, r, where, fn, r)
    return samples


def workload(c: Column, scope: str, n: int, salt: str) -> tuple[list, list, dict]:
    """n keys of the column's own and their values for this round: (keys, pairs, dict)."""
    keys = c.keys(scope, n)
    items = list(zip(keys, values_for(keys, salt)))
    return keys, items, dict(items)


class Steps:
    def __init__(self, ctx: Ctx, samples: Samples, col: Column) -> None:
        self.ctx = ctx
        self.failures = ctx.failures
        self.samples = samples
        self.c = col

    def keep(self, key: tuple, t: float, where: str, ok: bool, what: str) -> bool:
        if self.failures.check(where, self.c, ok, what):
            self.samples.add(key, t)
        return ok

    def loop_set(self, key: tuple, where: str, items: list, what: str) -> None:
        t, bad = timed(self.c.loop_set, items)
        self.keep(key, t, where, bad == 0, what.format(bad=bad))

    def loop_get(self, key: tuple, where: str, items: list, what: str) -> None:
        t, bad = timed(self.c.loop_get, items)
        self.keep(key, t, where, bad == 0, what.format(bad=bad))

    def loop_delete(
        self, key: tuple, where: str, keys: list, what: str, read_back: bool = True
    ) -> None:
        """With `read_back`, also check that no key is left."""
        t, bad = timed(self.c.loop_delete, keys)
        left = self.c.read_back(keys) if read_back else {}
        self.keep(key, t, where, bad == 0 and not left, what.format(bad=bad, left=len(left)))

    def set_multi(self, key: tuple, where: str, mapping: dict, what: str) -> None:
        t, res = timed(self.c.set_multi, mapping)
        self.keep(key, t, where, self.c.stored_ok(res, len(mapping)), what.format(res=str(res)))

    def get_multi(self, key: tuple, where: str, keys: list, mapping: dict, what: str = "") -> None:
        """`what` is put before the diff of what was read back against `mapping`."""
        t, res = timed(self.c.get_multi, keys)
        got = self.c.decode_get(res, keys)
        self.keep(key, t, where, got == mapping, what + diff(got, mapping))

    def delete_multi(self, key: tuple, where: str, keys: list, what: str) -> None:
        t, res = timed(self.c.delete_multi, keys)
        left = self.c.read_back(keys)
        ok = self.c.deleted_ok(res, len(keys)) and not left
        self.keep(key, t, where, ok, what.format(res=str(res), left=len(left)))

    def quiet(
        self, key: tuple, where: str, call: Callable, arg: Any, want: dict, check_res: bool
    ) -> None:
        """A noreply write: time it, wait until the server applied it, read the keys back and
        compare with `want` (the mapping written, or {} after a delete); with `check_res` also
        check what the call returned."""
        t, res = timed(call, arg)
        self.c.sync_nr()
        keys = list(want) if want else arg
        got = self.c.read_back(keys)
        ok = (not check_res or self.c.nr_ok(res, len(keys))) and (got == want if want else not got)
        self.keep(key, t, where, ok, diff(got, want) if want else f"{len(got)} left")
