"""noreply: set/get/delete with and without noreply, as loops of single calls and as multi
calls; every noreply write is read back after a sync."""

from __future__ import annotations

from ..columns import Column
from ..context import Ctx
from ..measure import Samples
from ..report import LEGEND, md_table, pin_note, ratio_headers, ratio_row
from .steps import Steps, rounds, workload

# The rows, in order: (operation, "acked" or "noreply").
PLAN = (
    ("set", "acked"),
    ("set", "noreply"),
    ("get", "acked"),
    ("delete", "acked"),
    ("delete", "noreply"),
    ("set_multi", "acked"),
    ("set_multi", "noreply"),
    ("get_multi", "acked"),
    ("delete_multi", "acked"),
    ("delete_multi", "noreply"),
)


def run(ctx: Ctx) -> None:
    cols = ctx.columns(ctx.servers1)
    report(ctx, cols, rounds(ctx, cols, ctx.s.noreply_rounds, "noreply", _round))


def _round(steps: Steps, r: int) -> None:
    c: Column = steps.c
    keys, items, mapping = workload(c, "n", steps.ctx.s.noreply_keys, f"|n{r}")
    # acknowledged loops
    steps.loop_set(("set", "acked", c.name), "noreply: set loop", items, "{bad} failed")
    steps.loop_get(("get", "acked", c.name), "noreply: get loop", items, "{bad} wrong")
    steps.loop_delete(("delete", "acked", c.name), "noreply: delete loop", keys, "{left} left")
    _noreply_writes(steps, items, mapping, keys, multi=False)  # read back afterwards
    # multi calls
    steps.set_multi(("set_multi", "acked", c.name), "noreply: set_multi", mapping, "{res:.80}")
    steps.get_multi(("get_multi", "acked", c.name), "noreply: get_multi", keys, mapping)
    what = "{left} left"
    steps.delete_multi(("delete_multi", "acked", c.name), "noreply: delete_multi", keys, what)
    _noreply_writes(steps, items, mapping, keys, multi=True)


def _noreply_writes(steps: Steps, items: list, mapping: dict, keys: list, multi: bool) -> None:
    """A noreply set, then a noreply delete, as loops of single calls or as multi calls, each
    read back; a client without one writes acknowledged instead (untimed), so the next step
    finds the keys it expects."""
    c = steps.c
    if multi:
        ops, calls = ("set_multi", "delete_multi"), (c.set_multi_nr, c.delete_multi_nr)
        available, set_arg, kind = calls, mapping, ""
    else:
        ops, calls = ("set", "delete"), (c.loop_set_nr, c.loop_delete_nr)
        available, set_arg, kind = (c.set_nr, c.delete_nr), items, " loop"
    if available[0] is not None:
        where = f"noreply: {ops[0]}{kind} noreply"
        steps.quiet((ops[0], "noreply", c.name), where, calls[0], set_arg, mapping, multi)
    else:
        c.set_multi(mapping)
    if available[1] is not None:
        where = f"noreply: {ops[1]}{kind} noreply"
        steps.quiet((ops[1], "noreply", c.name), where, calls[1], keys, {}, multi)
    else:
        c.delete_multi(keys)


def report(ctx: Ctx, cols: list, samples: Samples) -> None:
    n = ctx.s.noreply_keys
    rows, res = [], {}
    for op, mode in PLAN:
        meds = {c.name: samples.med_us((op, mode, c.name)) for c in cols}
        meds = {k: (v / 1000 if v is not None else None) for k, v in meds.items()}
        res[f"{op} {mode}"] = meds
        cells, _, _, _ = ratio_row(meds, cols)
        what = f"{n:,} × {op}" if "_" not in op else f"{op}({n:,})"
        rows.append([what, mode, *cells])
    ctx.report.data["noreply"] = res
    ctx.report.emit(
        f"With and without noreply, {n:,} keys (ms per {n:,} keys)",
        f"{ctx.s.noreply_rounds} rounds. `acked` waits for every reply (pymemcache with "
        "default_noreply=False); `noreply` is fastmc's and pylibmc's _noreply "
        "behavior, pymemcache's default, libmc's noreply=True, python-memcached's "
        "noreply=True. The noreply floor sends the noreply/quiet commands (text "
        "`noreply`, meta `q`) and waits for one marker, so it includes the time the server "
        "needs to apply them; the clients' noreply calls return without waiting. Every "
        "noreply write is read back afterwards. "
        + pin_note(ctx.pinned_now)
        + "\n\n"
        + LEGEND
        + "\n\n"
        + md_table(["what", "mode", *ratio_headers(cols, "ms")], rows),
    )
