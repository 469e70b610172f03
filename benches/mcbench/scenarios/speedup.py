"""speedup: the speed-up of one multi call over a loop of single calls as the keys grow from 1 to
1,000, for get, set and delete; drawn as multi_speedup.png."""

from __future__ import annotations

from ..columns import Column, fastmc_col, peer_cols
from ..context import Ctx
from ..files import draw_speedup
from ..measure import Samples
from ..report import best_floor, fmt_ratio, md_table, pin_note, ratio
from .steps import Steps, interleaved, workload

SIZES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000)
MIN_KEYS = 64  # small key counts repeat until a point covers at least this many keys


def run(ctx: Ctx) -> None:
    cols = ctx.columns(ctx.servers1)
    samples = measure(ctx, cols)
    curves: dict = {}
    res: dict = {}
    for op in ("get", "set", "delete"):
        report(ctx, cols, samples, op, curves, res)
    ctx.report.data["speedup"] = res
    draw_speedup(ctx, curves, cols, SIZES)


def measure(ctx: Ctx, cols: list) -> Samples:
    """Seconds per loop or multi call by (op, "loop" or "multi", keys, client)."""
    samples = Samples()
    interleaved(ctx, samples, cols, 0, "speedup warm-up", _round, 10, -1)  # in column order
    samples.clear()
    for r in range(ctx.s.speedup_rounds):
        for n in SIZES:
            interleaved(ctx, samples, cols, r + n, "speedup", _round, n, r)
    return samples


def _round(steps: Steps, n: int, r: int) -> None:
    c: Column = steps.c
    for rep in range(max(1, MIN_KEYS // n)):
        keys, items, mapping = workload(c, f"u{n}", n, f"|u{r}.{rep}")
        steps.loop_set(("set", "loop", n, c.name), "speedup set loop", items, "{bad} sets failed")
        steps.loop_get(("get", "loop", n, c.name), "speedup get loop", items, "{bad} wrong values")
        what = "{bad} deletes failed"
        steps.loop_delete(("delete", "loop", n, c.name), "speedup delete loop", keys, what, False)
        steps.set_multi(("set", "multi", n, c.name), "speedup set_multi", mapping, "{res:.80}")
        steps.get_multi(("get", "multi", n, c.name), "speedup get_multi", keys, mapping)
        what = "{left} left"
        steps.delete_multi(("delete", "multi", n, c.name), "speedup delete_multi", keys, what)


def report(ctx: Ctx, cols: list, samples: Samples, op: str, curves: dict, res: dict) -> None:
    """The table of one operation; adds its medians to `res` and its curves to `curves`."""
    fc = fastmc_col(cols)
    rows = []
    for n in SIZES:
        loop = {c.name: samples.med_us((op, "loop", n, c.name)) for c in cols}
        multi = {c.name: samples.med_us((op, "multi", n, c.name)) for c in cols}
        fl_loop, _ = best_floor(loop, cols)
        fl_multi, _ = best_floor(multi, cols)
        sp = {c.name: ratio(loop[c.name], multi[c.name]) for c in cols}
        sp["floor"] = ratio(fl_loop, fl_multi)
        res[f"{op} {n}"] = {"loop_us": loop, "multi_us": multi, "speedup": sp}
        for name, v in sp.items():
            curves.setdefault(op, {}).setdefault(name, []).append(v)
        f = multi.get(fc.name) if fc else None
        best = min(
            (multi[p.name] for p in peer_cols(cols) if multi[p.name] is not None), default=None
        )
        rows.append(
            [
                f"{n:,}",
                f"×{fmt_ratio(sp['floor'])}",
                f"×{fmt_ratio(sp.get(fc.name))}" if fc else "missing",
                *[f"×{fmt_ratio(sp[p.name])}" for p in peer_cols(cols)],
                fmt_ratio(ratio(f, fl_multi)),
                fmt_ratio(ratio(f, best)),
            ]
        )
    headers = [
        "keys",
        "floor",
        "fastmc",
        *[p.name for p in peer_cols(cols)],
        "fastmc multi ÷ floor multi",
        "fastmc multi ÷ best peer multi",
    ]
    ctx.report.emit(
        f"Speed-up of {op}_multi over a loop of single {op}s",
        f"{ctx.s.speedup_rounds} rounds (more repetitions for small key counts); speed-up = "
        f"median time of the loop ÷ median time of the multi call. {pin_note(ctx.pinned_now)}"
        "\n\n" + md_table(headers, rows),
    )
