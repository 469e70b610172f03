"""simple_vs_multi: 10,000 keys, a loop of single calls against one multi call, for set, get and
delete, and the speed-up of the multi call."""

from __future__ import annotations

from ..columns import Column, fastmc_col, peer_cols
from ..context import Ctx
from ..measure import Samples
from ..report import (
    LEGEND,
    best_floor,
    fmt_ratio,
    md_table,
    pin_note,
    ratio,
    ratio_headers,
    ratio_row,
)
from .steps import Steps, rounds, workload


def run(ctx: Ctx) -> None:
    cols = ctx.columns(ctx.servers1)
    report(ctx, cols, rounds(ctx, cols, ctx.s.simple_rounds, "simple_vs_multi", _round))


def _round(steps: Steps, r: int) -> None:
    c: Column = steps.c
    n = steps.ctx.s.simple_keys
    keys, items, mapping = workload(c, "v", n, f"|v{r}")
    steps.loop_set(("set", "loop", c.name), "simple set", items, "{bad} sets not acknowledged")
    steps.loop_get(
        ("get", "loop", c.name), "simple get", items, "{bad} gets returned a wrong value"
    )
    what = "{bad} deletes failed, {left} keys left"
    steps.loop_delete(("delete", "loop", c.name), "simple delete", keys, what)
    steps.set_multi(("set", "multi", c.name), "multi set", mapping, "set_multi returned {res:.80}")
    steps.get_multi(("get", "multi", c.name), "multi get", keys, mapping)
    steps.delete_multi(("delete", "multi", c.name), "multi delete", keys, "{left} left")


def report(ctx: Ctx, cols: list, samples: Samples) -> None:
    n, rounds = ctx.s.simple_keys, ctx.s.simple_rounds
    fc = fastmc_col(cols)
    rows, res = [], {}
    for op in ("set", "get", "delete"):
        meds = {}
        for how in ("loop", "multi"):
            meds[how] = {c.name: samples.med_us((op, how, c.name)) for c in cols}
            res[f"{op} {how}"] = meds[how]
            ms = {k: (v / 1000 if v is not None else None) for k, v in meds[how].items()}
            cells, _, _, _ = ratio_row(ms, cols)
            label = f"{n:,} × {op}" if how == "loop" else f"{op}_multi({n:,})"
            rows.append([label, *cells])
        sp = {c.name: ratio(meds["loop"][c.name], meds["multi"][c.name]) for c in cols}
        res[f"{op} speed-up"] = sp
        fl_loop, _ = best_floor(meds["loop"], cols)
        fl_multi, _ = best_floor(meds["multi"], cols)
        rows.append(
            [
                f"{op}: multi speed-up",
                f"×{fmt_ratio(ratio(fl_loop, fl_multi))}",
                f"×{fmt_ratio(sp.get(fc.name))}" if fc else "missing",
                "",
                *[f"×{fmt_ratio(sp.get(p.name))}" for p in peer_cols(cols)],
                "",
            ]
        )
    ctx.report.data["simple_vs_multi"] = res
    ctx.report.emit(
        f"Simple vs multi, {n:,} keys (ms per {n:,} keys)",
        f"{rounds} round(s). Rows: a loop of {n:,} single calls, then one multi call, then "
        f"the speed-up of multi over the loop. {pin_note(ctx.pinned_now)}\n\n{LEGEND}\n\n"
        + md_table(["what", *ratio_headers(cols, "ms")], rows),
    )
