"""threads: 8 threads doing single gets, then single sets; one shared fastmc Client against each
peer's own way to share (pools, thread-locals); total operations per second."""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

from ..columns import Column, fastmc_col, floors, peer_cols
from ..context import Ctx
from ..measure import Samples, median, perf_counter, rotated
from ..report import bullets, fmt_num, fmt_ratio, md_table, ratio
from ..verify import diff, values_for

OPS = ("get", "set")


def run(ctx: Ctx) -> None:
    cols = ctx.columns(ctx.servers1)
    factories, notes = _factories(ctx, cols)
    samples = measure(ctx, [c for c in cols if c.name in factories], factories)
    report(ctx, cols, samples, notes)


def _factories(ctx: Ctx, cols: list) -> tuple[dict, dict]:
    """Per client: what makes each thread's (get, set), and how the client is shared."""
    factories, notes = {}, {}
    for c in cols:
        if c.threads_factory is None:
            continue
        try:
            factories[c.name], notes[c.name] = c.threads_factory()
        except Exception as e:
            ctx.failures.add("threads setup", c.name, f"raised {e!r}")
    return factories, notes


def measure(ctx: Ctx, cols: list, factories: dict) -> Samples:
    """Operations per second by (op, client); round -1 warms up pools and connections."""
    samples = Samples()
    for r in range(-1, ctx.s.thread_rounds):
        for c in rotated(cols, r):
            for op in OPS:
                v = ctx.failures.safe("threads", c, _round, ctx, c, factories[c.name], op, r)
                if v is not None and r >= 0:
                    samples.add((op, c.name), v)
    return samples


def _round(ctx: Ctx, c: Column, maker: Callable, op: str, r: int) -> float | None:
    """All threads' gets or sets at once; ops/s, or None when a check failed."""
    n = ctx.s.thread_ops
    per_items = []
    for tid in range(ctx.s.threads):
        keys = [f"{c.tag}:t{tid}:{i:06d}" for i in range(n)]
        per_items.append(list(zip(keys, values_for(keys, f"|t{r}"))))
    if op == "get":  # preload (not timed)
        for items in per_items:
            c.set_multi(dict(items))
    dt, bad, errors = _run_threads(maker, op, per_items)
    if errors:
        ctx.failures.add(f"threads {op}", c.name, f"raised {errors[0]!r}")
        return None
    what = f"{sum(bad)} of {len(per_items) * n} failed/wrong"
    if not ctx.failures.check(f"threads {op}", c, sum(bad) == 0, what):
        return None
    if op == "set":
        for items in per_items:
            got = c.read_back([k for k, _ in items])
            if not ctx.failures.check("threads set", c, got == dict(items), diff(got, dict(items))):
                return None
    for items in per_items:
        c.delete_multi([k for k, _ in items])
    return len(per_items) * n / dt


def _run_threads(maker: Callable, op: str, per_items: list) -> tuple[float, list, list]:
    """One thread per item list, started together by a barrier; (seconds until the last one
    finished, failed or wrong operations per thread, exceptions raised)."""
    T = len(per_items)
    barrier = threading.Barrier(T + 1)
    bad = [0] * T
    errors: list = []
    ths = [
        threading.Thread(
            target=_worker, args=(maker, op, per_items[i], barrier, bad, errors, i), daemon=True
        )
        for i in range(T)
    ]
    for th in ths:
        th.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()
    t0 = perf_counter()
    for th in ths:
        th.join()
    return perf_counter() - t0, bad, errors


def _worker(
    maker: Callable,
    op: str,
    items: list,
    barrier: threading.Barrier,
    bad: list,
    errors: list,
    tid: int,
) -> None:
    try:
        get, set_ = maker()
    except Exception as e:
        errors.append(e)
        barrier.abort()
        return
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        return
    b = 0
    try:
        if op == "get":
            for k, v in items:
                if get(k) != v:
                    b += 1
        else:
            for k, v in items:
                if not set_(k, v):
                    b += 1
    except Exception as e:
        errors.append(e)
    bad[tid] = b


def report(ctx: Ctx, cols: list, samples: Samples, notes: dict) -> None:
    T, n, rounds = ctx.s.threads, ctx.s.thread_ops, ctx.s.thread_rounds
    rows, res = [], {}
    fc = fastmc_col(cols)
    for op in OPS:
        meds = {c.name: median(samples.get((op, c.name), [])) for c in cols}
        res[op] = meds
        fl, fl_name = max(
            ((meds[c.name], c.name) for c in floors(cols) if meds.get(c.name) is not None),
            default=(None, ""),
        )
        f = meds.get(fc.name) if fc else None
        cells = [
            f"{op}s",
            f"{fmt_num(fl)} {fl_name.split()[-1] if fl_name else ''}",
            fmt_num(f) if fc else "missing",
            fmt_ratio(ratio(f, fl)),
        ]
        for p in peer_cols(cols):
            v = meds.get(p.name)
            cells.append(f"{fmt_num(v)} ({fmt_ratio(ratio(f, v))})" if v and f else fmt_num(v))
        rows.append(cells)
        pool = meds.get("pylibmc")
        rr = ratio(f, pool)
        measured = (
            f"×{fmt_ratio(rr)} ({fmt_num(f)} vs {fmt_num(pool)} ops/s)"
            if fc
            else ("fastmc missing")
        )
        ctx.report.judge("threads_pool", measured, rr, op=op)
    ctx.report.data["threads"] = res
    how = bullets([f"{k}: {v}" for k, v in notes.items()])
    headers = ["op", "floor (ops/s)", "fastmc (ops/s)", "fastmc ÷ floor"]
    ctx.report.emit(
        f"{T} threads, single operations (operations per second, higher is better)",
        f"{T} threads × {n:,} operations each, {rounds} rounds after a warm-up round, "
        "median of total operations ÷ wall time. Each peer cell: ops/s, then "
        f"(fastmc ÷ peer): above 1 means fastmc is faster. How each client is shared:\n"
        f"{how}\n\n" + md_table([*headers, *[p.name for p in peer_cols(cols)]], rows),
    )
