"""single: get/set/delete/incr on one key at a time, in loops: wall time and client CPU per
operation."""

from __future__ import annotations

from ..columns import Column
from ..context import Ctx
from ..measure import Samples, median, rotated, timed_cpu
from ..report import LEGEND, fmt_num, fmt_ratio, md_table, pin_note, ratio, ratio_headers, ratio_row
from ..settings import VALUE_SIZE
from .steps import workload

OPS = ("get", "set", "delete", "incr")


def run(ctx: Ctx) -> None:
    cols = ctx.columns(ctx.servers1)
    wall, cpu = measure(ctx, cols)
    res = {
        op: {"wall_us": _per_op_us(wall, op, cols), "cpu_us": _per_op_us(cpu, op, cols)}
        for op in OPS
    }
    report(ctx, cols, res)


def measure(ctx: Ctx, cols: list) -> tuple[Samples, Samples]:
    """Per-operation wall and CPU times in seconds, by (op, client)."""
    wall, cpu = Samples(), Samples()
    for c in cols:  # warm-up: connections open, code paths hot
        ctx.failures.safe("single warm-up", c, c.loop_set, [(f"{c.tag}:warm", b"w" * VALUE_SIZE)])
    for r in range(ctx.s.single_rounds):
        for c in rotated(cols, r):
            ctx.failures.safe("single", c, _round, ctx, c, r, wall, cpu)
    return wall, cpu


def _round(ctx: Ctx, c: Column, r: int, wall: Samples, cpu: Samples) -> None:
    n = ctx.s.single_ops
    check = ctx.failures.check

    def keep(op: str, w: float, p: float) -> None:
        wall.add((op, c.name), w / n)
        cpu.add((op, c.name), p / n)

    keys, items, _ = workload(c, "s", n, f"|s{r}")
    w, p, bad = timed_cpu(c.loop_set, items)
    check("single set", c, bad == 0, f"{bad} of {n} sets not acknowledged")
    keep("set", w, p)
    w, p, bad = timed_cpu(c.loop_get, items)
    check("single get", c, bad == 0, f"{bad} of {n} gets returned a wrong value")
    keep("get", w, p)
    w, p, bad = timed_cpu(c.loop_delete, keys)
    check("single delete", c, bad == 0, f"{bad} of {n} deletes not acknowledged")
    left = c.read_back(keys)
    check("single delete", c, not left, f"{len(left)} keys still there after delete")
    keep("delete", w, p)
    ck = f"{c.tag}:counter:{r:03d}"
    c.set_counter(ck)
    w, p, last = timed_cpu(c.loop_incr, ck, n)
    got = c.read_counter(ck)
    check(
        "single incr",
        c,
        got == n and (last is None or last == n),
        f"counter is {got} (last incr returned {last!r}), expected {n}",
    )
    keep("incr", w, p)


def _per_op_us(samples: Samples, op: str, cols: list) -> dict:
    """Median µs per operation by client (None without a sample)."""
    return {c.name: (median(samples.get((op, c.name), [])) or 0) * 1e6 or None for c in cols}


def _judge(ctx: Ctx, op: str, f: float | None, fc_cpu: float | None, res: dict) -> None:
    if not ctx.has_fastmc:
        ctx.report.target(
            "single", f"{op}: CPU and wall per op vs pylibmc", "fastmc missing", False
        )
        return
    pw, pc = res["wall_us"].get("pylibmc"), res["cpu_us"].get("pylibmc")
    rc = ratio(fc_cpu, pc)
    measured = f"{fmt_num(fc_cpu)} vs {fmt_num(pc)} µs (×{fmt_ratio(rc)})"
    ctx.report.judge("single_cpu", measured, rc, op=op)
    rw = ratio(f, pw)
    measured = f"{fmt_num(f)} vs {fmt_num(pw)} µs (×{fmt_ratio(rw)})"
    ctx.report.judge("single_wall", measured, rw, op=op)


def report(ctx: Ctx, cols: list, res: dict) -> None:
    rows_w, rows_c = [], []
    for op in OPS:
        cells, f, _, _ = ratio_row(res[op]["wall_us"], cols)
        rows_w.append([op, *cells])
        cells_c, fc_cpu, _, _ = ratio_row(res[op]["cpu_us"], cols)
        rows_c.append([op, *cells_c])
        _judge(ctx, op, f, fc_cpu, res[op])
    ctx.report.data["single"] = res
    n, rounds = ctx.s.single_ops, ctx.s.single_rounds
    note = (
        f"{n:,} operations per loop, {rounds} rounds, median per operation. One loopback "
        "round trip per operation, so wall times are close; client CPU "
        "(time.process_time over the loop) shows what each client costs. The floor does one "
        "raw round trip per operation. " + pin_note(ctx.pinned_now)
    )
    headers = ["op", *ratio_headers(cols, "µs")]
    ctx.report.emit(
        "Single operations: wall time per operation (µs)",
        note + "\n\n" + LEGEND + "\n\n" + md_table(headers, rows_w),
    )
    ctx.report.emit("Single operations: client CPU per operation (µs)", md_table(headers, rows_c))
