"""aio: the asyncio client against the async peers (aiomcache, emcache, memcachio) and against
fastmc's blocking client through ``asyncio.to_thread``, on the default event loop:

- ops/s of single gets and sets with 1, 10, 100 and 1,000 concurrent tasks on one shared client;
- time per get_multi/set_multi/delete_multi call of 100, 1,000 and 10,000 keys, one and three
  servers, also against the blocking fastmc client called directly (not through a thread);
- p50/p99 latency of one get while 100 tasks load the client.

Every value read is checked against what was written."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from ..context import Ctx
from ..measure import median
from ..report import fmt_num, fmt_ratio, md_table, ratio
from ..verify import values_for
from .aio_clients import AioClient, FastmcBlocking, FastmcBlockingAgain, make_all

TASKS = (1, 10, 100, 1_000)
SIZES = (100, 1_000, 10_000)
OPS = ("get", "set")
MULTI_OPS = ("get_multi", "set_multi", "delete_multi")
PROBE_LIMIT = 2.0  # seconds one latency probe may wait
LOAD_RATE = 20_000  # gets per second the 100 loading tasks ask for in total (all peers sustain it)
PHASE_LIMIT = 10.0  # seconds of probing per client


def _tag(c: AioClient) -> str:
    """The client's name as a key part (no spaces)."""
    return c.name.replace(" ", "_")


def _progress(what: str) -> None:
    print(f"  aio: {what}", file=sys.stderr, flush=True)


def run(ctx: Ctx) -> None:
    asyncio.run(_run(ctx))


async def _run(ctx: Ctx) -> None:
    clients = await make_all(ctx.fastmc_name, ctx.servers1, ctx.failures)
    try:
        tasks = {(op, t): await _tasks_row(ctx, clients, op, t) for op in OPS for t in TASKS}
        latency = await _latency(ctx, clients)
        blocking = [FastmcBlocking(ctx.fastmc_name, ctx.servers1)]
        blocking.append(FastmcBlockingAgain(ctx.fastmc_name, ctx.servers1))
        multi = {("1", n, op): v for (n, op), v in (await _multi(ctx, clients, blocking)).items()}
    finally:
        for c in clients:
            await c.close()
    names = [c.name for c in clients]
    if ctx.servers3:
        clients3 = await make_all(ctx.fastmc_name, ctx.servers3, ctx.failures)
        try:
            blocking3 = [FastmcBlocking(ctx.fastmc_name, ctx.servers3)]
            blocking3.append(FastmcBlockingAgain(ctx.fastmc_name, ctx.servers3))
            multi3 = await _multi(ctx, clients3, blocking3)
            multi.update({("3", n, op): v for (n, op), v in multi3.items()})
        finally:
            for c in clients3:
                await c.close()
    _report(ctx, names, tasks, latency, multi)


async def _tasks_row(ctx: Ctx, clients: list, op: str, tasks: int) -> dict:
    """ops/s by client name (median over rounds)."""
    n = max(ctx.s.aio_ops, tasks * 4)
    out: dict = {}
    for c in clients:
        _progress(f"{tasks} tasks, {op}: {c.name}")
        rates = []
        for r in range(ctx.s.aio_rounds):
            v = await ctx.failures.safe_async("aio tasks", c.name, _tasks_round, c, op, tasks, n, r)
            if v is not None:
                rates.append(v)
        out[c.name] = median(rates)
    return out


async def _tasks_round(c: AioClient, op: str, tasks: int, n: int, r: int) -> float:
    per = n // tasks
    keys = [f"aio:{_tag(c)}:{t}:{i}".encode() for t in range(tasks) for i in range(per)]
    vals = values_for([k.decode() for k in keys], f"|{op}{r}")
    items = list(zip(keys, vals))
    if op == "get":
        await c.set_multi(dict(items))
    bad = 0

    async def worker(chunk: list) -> None:
        nonlocal bad
        for k, v in chunk:
            if op == "get":
                bad += (await c.get(k)) != v
            else:
                bad += not await c.set(k, v)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(items[t * per : (t + 1) * per]) for t in range(tasks)))
    dt = time.perf_counter() - t0
    if op == "set":
        got = await c.get_multi(keys)
        bad += sum(got.get(k) != v for k, v in items)
    if bad:
        raise AssertionError(f"{bad} of {len(items)} {op}s wrong")
    await c.delete_multi(keys)
    return len(items) / dt


async def _latency(ctx: Ctx, clients: list) -> dict:
    """(p50, p99) in µs of single gets timed one by one while 100 other tasks run gets."""
    out = {}
    for c in clients:
        _progress(f"latency: {c.name}")
        out[c.name] = await ctx.failures.safe_async("aio latency", c.name, _latency_one, ctx, c)
    return out


async def _latency_one(ctx: Ctx, c: AioClient) -> tuple:
    keys = [f"aio:lat:{_tag(c)}:{i}".encode() for i in range(100)]
    vals = values_for([k.decode() for k in keys], "|lat")
    await c.set_multi(dict(zip(keys, vals)))
    stop = False
    loaded = 0

    async def load(k: bytes, v: bytes) -> None:
        # Paced: each task asks at LOAD_RATE / 100 gets per second, so that every client
        # carries the same load (a closed loop would load the fastest client the most).
        nonlocal loaded
        pause = 100 / LOAD_RATE
        while not stop:
            if await c.get(k) != v:
                raise AssertionError("wrong value under load")
            loaded += 1
            await asyncio.sleep(pause)

    loaders = [asyncio.ensure_future(load(k, v)) for k, v in zip(keys, vals)]
    lat: list = []
    starved = False
    try:
        await asyncio.sleep(0.05)
        loaded, t_start = 0, time.perf_counter()
        # A client whose pool is unfair can starve the probe: each probe waits at most
        # PROBE_LIMIT (counted at that), and the phase ends after PHASE_LIMIT.
        end = time.perf_counter() + PHASE_LIMIT
        for i in range(ctx.s.aio_probes):
            t0 = time.perf_counter()
            try:
                got = await asyncio.wait_for(c.get(keys[i % 100]), PROBE_LIMIT)
            except asyncio.TimeoutError:
                lat.append(PROBE_LIMIT)
                starved = True
                break
            lat.append(time.perf_counter() - t0)
            if got != vals[i % 100]:
                raise AssertionError("wrong value")
            if t0 > end:
                break
        stop = True
        load_rate = loaded / (time.perf_counter() - t_start)
        await asyncio.gather(*loaders)
    finally:
        stop = True
        for t in loaders:
            t.cancel()
        await asyncio.gather(*loaders, return_exceptions=True)
    lat.sort()
    p50, p99 = lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6
    return (p50, p99, len(lat), starved, load_rate)


async def _multi(ctx: Ctx, clients: list, blocking: list) -> dict:
    """{(n, op): {client: seconds per call}}; the blocking fastmc client (called directly, not
    through a thread) is measured in the same rounds, alternating with the asyncio fastmc
    client, so that both see the same machine; so is a second one (`FastmcBlockingAgain`), the
    same code twice, whose ratio to the first shows how far apart two equal clients come out. The peers take part in the first rounds only
    (their multi-key writes are gathers of single writes, up to half a second for 10,000
    keys): the ratio to the blocking client, close to 1, needs more samples than the ratio to
    the peers. Odd rounds run the clients in the reverse order, so that neither fastmc client
    always follows the same one."""
    out: dict = {}
    timed = [c for c in clients if c.name != "fastmc to_thread"]
    for n in SIZES:
        _progress(f"multi {n:,} keys")
        times: dict = {}
        for r in range(ctx.s.aio_multi_rounds[n]):
            with_peers = r < ctx.s.aio_multi_peer_rounds[n]
            order = [*timed, *blocking]
            for c in order if r % 2 == 0 else order[::-1]:
                if not with_peers and not c.name.startswith("fastmc"):
                    continue
                got = await ctx.failures.safe_async("aio multi", c.name, _multi_round, c, n, r)
                for op, t in (got or {}).items():
                    times.setdefault((op, c.name), []).append(t)
        for c in [*timed, *blocking]:
            for op in MULTI_OPS:
                out.setdefault((n, op), {})[c.name] = median(times.get((op, c.name), []))
    return out


async def _multi_round(c: AioClient, n: int, r: int) -> dict:
    keys = [f"aio:m:{_tag(c)}:{i}".encode() for i in range(n)]
    d = dict(zip(keys, values_for([k.decode() for k in keys], f"|m{r}")))
    t0 = time.perf_counter()
    await c.set_multi(d)
    t1 = time.perf_counter()
    got = await c.get_multi(keys)
    t2 = time.perf_counter()
    await c.delete_multi(keys)
    t3 = time.perf_counter()
    if got != d:
        raise AssertionError(f"get_multi read back {len(got)} of {n} values, or wrong ones")
    return {"set_multi": t1 - t0, "get_multi": t2 - t1, "delete_multi": t3 - t2}


def _best_peer(row: dict, names: list) -> tuple[Any, str]:
    peers = [(v, n) for n, v in row.items() if n in names and v is not None]
    return max(peers, default=(None, "")) if peers else (None, "")


def _report(ctx: Ctx, names: list, tasks: dict, latency: dict, multi: dict) -> None:
    peers = [n for n in names if n not in ("fastmc.aio", "fastmc to_thread")]
    # 1. concurrency
    rows = []
    for (op, t), row in tasks.items():
        f = row.get("fastmc.aio")
        best, best_name = _best_peer(row, peers)
        cells = [f"{op}", f"{t:,}", fmt_num(f)]
        for n in names[1:]:
            v = row.get(n)
            cells.append(f"{fmt_num(v)} (×{fmt_ratio(ratio(f, v))})" if v and f else fmt_num(v))
        rows.append(cells)
        if t == 100:
            rr = ratio(f, best)
            ctx.report.judge(
                "aio_tasks",
                f"×{fmt_ratio(rr)} ({fmt_num(f)} vs {best_name} {fmt_num(best)})",
                rr,
                op=op,
            )
    ctx.report.emit(
        "asyncio: concurrent tasks on one client (operations per second, higher is better)",
        f"{ctx.s.aio_ops:,} single operations (or 4 per task, if more) spread over the tasks, "
        f"median of {ctx.s.aio_rounds} rounds, default event loop; every value checked. Peer "
        "cells: ops/s (fastmc.aio ÷ peer: above 1 means fastmc.aio is faster).\n\n"
        + md_table(["op", "tasks", "fastmc.aio", *names[1:]], rows),
    )
    # 2. latency under load
    rows = []
    best99 = min((v[1] for n, v in latency.items() if n in peers and v), default=None)
    for n in names:
        v = latency.get(n)
        if not v:
            rows.append([n, "failed", "failed", "", "", ""])
            continue
        note = f"starved: a probe waited {PROBE_LIMIT:.0f} s" if v[3] else ""
        rows.append([n, fmt_num(v[0]), fmt_num(v[1]), f"{v[2]:,}", fmt_num(v[4]), note])
    f99 = latency.get("fastmc.aio")
    f99 = f99[1] if f99 else None
    rr = ratio(f99, best99)
    ctx.report.judge("aio_p99", f"{fmt_num(f99)} µs vs best peer {fmt_num(best99)} µs", rr)
    ctx.report.emit(
        "asyncio: latency of one get while 100 tasks load the client (µs, lower is better)",
        f"{ctx.s.aio_probes:,} gets timed one by one while 100 other tasks ask for "
        f"{LOAD_RATE:,} gets per second in total (each pausing between its gets, so that "
        "every client carries the same load); load: the gets per second they got through.\n\n"
        + md_table(["client", "p50 (µs)", "p99 (µs)", "probes", "load (ops/s)", "note"], rows),
    )
    # 3. multi-key calls
    rows = []
    for (label, n, op), row in sorted(multi.items(), key=lambda x: (x[0][0], x[0][1])):
        f = row.get("fastmc.aio")
        s = row.get(FastmcBlocking.name)
        peer_vals = [(v, p) for p, v in row.items() if p in peers and v is not None]
        best, best_name = min(peer_vals, default=(None, ""))
        cells = [f"{label}", f"{op}", f"{n:,}", fmt_num(f * 1e3 if f else None)]
        cells.append(f"{fmt_num(s * 1e3 if s else None)} (×{fmt_ratio(ratio(f, s))})")
        cells.append(f"×{fmt_ratio(ratio(s, row.get(FastmcBlockingAgain.name)))}")
        for p in peers:
            v = row.get(p)
            cells.append(f"{fmt_num(v * 1e3)} (×{fmt_ratio(ratio(f, v))})" if v and f else "n/a")
        rows.append(cells)
        where = f"{label} server{'s' if label == '3' else ''}"
        rs = ratio(f, s)
        ctx.report.judge("aio_multi_sync", f"×{fmt_ratio(rs)}", rs, where=where, op=op, n=n)
        if best is not None:
            rp = ratio(f, best)
            ctx.report.judge(
                "aio_multi_peer", f"×{fmt_ratio(rp)} vs {best_name}", rp, where=where, op=op, n=n
            )
    ctx.report.emit(
        "asyncio: multi-key calls (ms per call, lower is better)",
        "One call at a time; median of rounds. Ratios: fastmc.aio ÷ the other (below 1 means "
        "fastmc.aio is faster). Peers without a multi-key write run one `asyncio.gather` of "
        "single writes; n/a: the peer cannot spread keys over several servers. A/A: the "
        "blocking client ÷ a second blocking client measured in the same rounds, the same code "
        "twice (not a target): how far apart two equal clients come out in this run.\n\n"
        + md_table(["servers", "op", "keys", "fastmc.aio", "fastmc blocking", "A/A", *peers], rows),
    )
    ctx.report.data["aio"] = {
        "tasks": {f"{op}:{t}": row for (op, t), row in tasks.items()},
        "latency": latency,
        "multi": {f"{lab}:{n}:{op}": row for (lab, n, op), row in multi.items()},
    }
