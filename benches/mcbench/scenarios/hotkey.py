"""hotkey: one hot key that every reader finds, read by 256 asyncio tasks sharing one
`fastmc.aio.Client` and by 64 threads sharing one blocking `fastmc.Client`, each pausing 1 ms
between reads (as the stampede scenario's readers do, and as a popular page's requests would).
Each way of reading it: a plain get, `get_or_set` (a hit: its lease read finds the value), and
for the asyncio client `gat` and `touch` to one expiry and a `get_multi` of the hot key and
another. Calls/s, p50 and p99 per call, and each row's calls/s ÷ the plain get's of the same
client in the same run: reads of one key must not queue behind each other (per-key order makes
a read wait only for an earlier write of its key).

Every value read is checked."""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
import time
from typing import Any, Callable

from ..context import Ctx
from ..report import fmt_num, md_table, ratio

TASKS = 256
THREADS = 64
PAUSE = 0.001
KEY, OTHER = "hotkey:hot", "hotkey:other"
VALUE = b"v" * 40
TTL = 3600
AIO_OPS = ("get", "get_or_set", "gat", "touch", "get_multi")
BLOCKING_OPS = ("get", "get_or_set")


def _progress(what: str) -> None:
    print(f"  hotkey: {what}", file=sys.stderr, flush=True)


def _never() -> bytes:
    raise AssertionError("get_or_set computed a value that was there")


def _expect(op: str) -> Any:
    """What each call of `op` must return."""
    return {"touch": True, "get_multi": {KEY: VALUE, OTHER: VALUE}}.get(op, VALUE)


def _aio_call(mc: Any, op: str) -> Callable[[], Any]:
    return {
        "get": lambda: mc.get(KEY),
        "get_or_set": lambda: mc.get_or_set(KEY, _never, TTL),
        "gat": lambda: mc.gat(KEY, TTL),
        "touch": lambda: mc.touch(KEY, TTL),
        "get_multi": lambda: mc.get_multi([KEY, OTHER]),
    }[op]


def _stats(lat: list, seconds: float, bad: int) -> dict:
    lat.sort()
    n = len(lat)
    return {
        "calls_s": n / seconds if seconds > 0 else None,
        "p50_ms": lat[n // 2] * 1e3 if n else None,
        "p99_ms": lat[min(n - 1, int(n * 0.99))] * 1e3 if n else None,
        "bad": bad,
    }


async def _aio_row(mod: Any, servers: list, op: str, seconds: float) -> dict:
    mc = mod.Client(servers)
    try:
        await mc.set_multi({KEY: VALUE, OTHER: VALUE}, TTL)
        call, want = _aio_call(mc, op), _expect(op)
        lat: list = []
        bad = 0
        end = time.perf_counter() + seconds

        async def reader() -> None:
            nonlocal bad
            pc = time.perf_counter
            while pc() < end:
                t0 = pc()
                v = await call()
                lat.append(pc() - t0)
                bad += v != want
                await asyncio.sleep(PAUSE)

        t0 = time.perf_counter()
        await asyncio.gather(*(reader() for _ in range(TASKS)))
        return _stats(lat, time.perf_counter() - t0, bad)
    finally:
        await mc.close()


def _blocking_row(mod: Any, servers: list, op: str, seconds: float) -> dict:
    mc = mod.Client(servers)
    mc.set_multi({KEY: VALUE, OTHER: VALUE}, TTL)
    call = {"get": lambda: mc.get(KEY), "get_or_set": lambda: mc.get_or_set(KEY, _never, TTL)}[op]
    lats: list = [[] for _ in range(THREADS)]
    bads = [0] * THREADS
    end = time.perf_counter() + seconds

    def reader(i: int) -> None:
        pc, lat = time.perf_counter, lats[i]
        while pc() < end:
            t0 = pc()
            v = call()
            lat.append(pc() - t0)
            bads[i] += v != VALUE
            time.sleep(PAUSE)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(THREADS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return _stats([x for lat in lats for x in lat], time.perf_counter() - t0, sum(bads))


def run(ctx: Ctx) -> None:
    seconds = 1.0 if ctx.s.quick else 3.0
    aio = importlib.import_module(ctx.fastmc_name + ".aio")
    rows: dict = {}
    for op in AIO_OPS:
        _progress(f"{TASKS} asyncio tasks, {op}")
        rows[("aio", op)] = asyncio.run(_aio_row(aio, ctx.servers1, op, seconds))
    for op in BLOCKING_OPS:
        _progress(f"{THREADS} threads, {op}")
        rows[("blocking", op)] = _blocking_row(ctx.fastmc_mod, ctx.servers1, op, seconds)
    _report(ctx, rows, seconds)


def _report(ctx: Ctx, rows: dict, seconds: float) -> None:
    table = []
    for (client, op), r in rows.items():
        base = rows[(client, "get")]["calls_s"]
        shape = f"{TASKS} asyncio tasks" if client == "aio" else f"{THREADS} threads"
        table.append(
            [
                shape,
                op,
                fmt_num(r["calls_s"]),
                f"{r['p50_ms']:.2f}" if r["p50_ms"] is not None else "n/a",
                f"{r['p99_ms']:.2f}" if r["p99_ms"] is not None else "n/a",
                f"{ratio(r['calls_s'], base):.2f}" if ratio(r["calls_s"], base) else "n/a",
                str(r["bad"]),
            ]
        )
        if r["bad"]:
            ctx.failures.add("hotkey", f"{shape} {op}", f"{r['bad']} wrong values")
    ctx.report.data["hotkey"] = {f"{c} {op}": r for (c, op), r in rows.items()}
    ctx.report.emit(
        "One hot key, many readers",
        f"{seconds:.0f} s per row, one server. Every reader pauses {PAUSE * 1e3:.0f} ms between "
        "calls; every call finds the value (get_or_set computes nothing). `÷ get` is the row's "
        "calls/s over the plain get's of the same client in this run.\n\n"
        + md_table(["readers", "call", "calls/s", "p50 (ms)", "p99 (ms)", "÷ get", "wrong"], table),
    )
    g, gos = rows[("aio", "get")], rows[("aio", "get_or_set")]
    ctx.report.judge(
        "hotkey_get_or_set",
        f"{ratio(gos['calls_s'], g['calls_s']) or 0:.2f}× get's calls/s",
        ratio(gos["calls_s"], g["calls_s"]),
        tasks=TASKS,
    )
    ctx.report.judge(
        "hotkey_p50",
        f"p50 {gos['p50_ms'] or 0:.2f} ms",
        gos["p50_ms"],
        tasks=TASKS,
    )
