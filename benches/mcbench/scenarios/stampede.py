"""stampede: one hot key whose computation takes 50 ms (a sleep, as a database query would wait),
read in a closed loop by 64 threads, by 8 processes x 8 threads, and by 256 asyncio tasks, while
the key expires every second, then (second run) is invalidated every second. Per client and load
shape: recomputes per expiry or invalidation, read latency, stale reads; and, as the reference
for the latency target, fastmc's plain `get` of another key, which every reader does after each
read: the same load at the same moments.

Every value read is checked: it names its key and the time it was computed."""

from __future__ import annotations

import array
import asyncio
import multiprocessing
import os
import socket
import sys
import threading
import time
from bisect import bisect_right
from typing import Any, Callable

from ..context import Ctx
from ..report import fmt_num, md_table, ratio
from ..targets import STAMPEDE_STALE_WINDOW
from .stampede_clients import EXPIRY, INVALIDATE, PATTERNS, Fastmc, Pattern

COMPUTE_S = 0.05  # the hot key's computation
PERIOD = 1.0  # it expires, or is invalidated, this often
PAUSE = 0.001  # each reader's pause between reads
WARMUP = 0.3  # seconds of reads before the window opens (not recorded)
STALE_WINDOW = STAMPEDE_STALE_WINDOW  # seconds a value may be served past its period
# A reader's two reads per round, the hot key's (True) and the reference's, in turns first:
# the read right after the pause meets whatever woke with it (256 tasks whose timers fire
# together), and that must not always be the same one. Half the readers start with each, so
# that in every round both kinds are in flight together and a stall of the whole process (a
# garbage collection of the asyncio shape's one thread) meets both alike.
ORDERS = {True: (True, False), False: (False, True)}
SHAPES = ("64 threads", "8 processes × 8 threads", "256 asyncio tasks")


def _progress(what: str) -> None:
    print(f"  stampede: {what}", file=sys.stderr, flush=True)


def _server_time(addr: str) -> int:
    """memcached's clock (`STAT time`): it ticks once a second, and TTLs count these ticks."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    for line in buf.split(b"\r\n"):
        if line.startswith(b"STAT time "):
            return int(line.split()[2])
    raise RuntimeError("no STAT time")


def _next_tick(addr: str) -> float:
    """Wall time of the server's next clock tick (to within ~2 ms)."""
    t0 = _server_time(addr)
    while _server_time(addr) == t0:
        time.sleep(0.002)
    return time.time()


class Log:
    """What one process saw: compute calls (start, end), reads (start, seconds), bad reads."""

    def __init__(self) -> None:
        self.computes: list = []
        self.t0 = array.array("d")
        self.dt = array.array("d")
        self.stamps = array.array("d")  # when the value read was computed (nan: a bad value)
        self.invalidations: list = []  # when the invalidator asked
        self.bad: list = []
        # the reference: a plain get of another key after each read (start, seconds)
        self.ref_t0 = array.array("d")
        self.ref_dt = array.array("d")

    def read(self, key: str, t0: float, dt: float, v: Any) -> None:
        """A read of the hot key that started at `t0`, took `dt` and returned `v` (checked)."""
        self.t0.append(t0)
        self.dt.append(dt)
        _check(key, v, time.time(), self)

    def ref(self, t0: float, dt: float) -> None:
        """A reference read (a plain get of another key)."""
        self.ref_t0.append(t0)
        self.ref_dt.append(dt)


def _make_compute(key: str, log: Log) -> Callable[[], bytes]:
    def compute() -> bytes:
        t = time.time()
        time.sleep(COMPUTE_S)
        log.computes.append((t, time.time()))
        return f"{key}|{t:.6f}|{os.getpid()}".encode()

    return compute


def _check(key: str, v: Any, now: float, log: Log) -> None:
    """The value names its key and a compute time not in the future; record that time."""
    try:
        k, t, _pid = (v.decode() if isinstance(v, bytes) else v).split("|")
        stamp = float(t)
        ok = k == key and stamp < now + 0.01
    except Exception:
        ok, stamp = False, 0.0
    log.stamps.append(stamp if ok else float("nan"))
    if not ok and len(log.bad) < 5:
        log.bad.append(repr(v)[:80])


def _reader(
    p: Pattern, key: str, log: Log, hot_first: bool, t_warm: float, t_start: float, t_end: float
) -> None:
    read, plain = p.read_fn(), p.plain_fn()
    pc, tt, sleep = time.perf_counter, time.time, time.sleep
    while tt() < t_warm:
        sleep(0.005)
    while True:
        now = tt()
        if now >= t_end:
            return
        for hot in ORDERS[hot_first]:
            t0, a = tt(), pc()
            v = read() if hot else plain()
            d = pc() - a
            if now >= t_start:
                if hot:
                    log.read(key, t0, d, v)
                else:
                    log.ref(t0, d)
        hot_first = not hot_first
        sleep(PAUSE)


def _invalidator(p: Pattern, t_start: float, n: int, log: Log) -> None:
    for i in range(n):
        time.sleep(max(0.0, t_start + 0.25 + i * PERIOD - time.time()))
        log.invalidations.append(time.time())
        p.invalidate()


def _threads(cls: type, servers: list, key: str, mode: str, n: int, times: tuple) -> Log:
    log = Log()
    p = cls(servers, key, mode, _make_compute(key, log))
    th = [
        threading.Thread(target=_reader, args=(p, key, log, i % 2 == 0, *times)) for i in range(n)
    ]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return log


def _child(cls: type, servers: list, key: str, mode: str, n: int, times: tuple, conn: Any) -> None:
    try:
        log = _threads(cls, servers, key, mode, n, times)
        arrays = (log.t0, log.dt, log.stamps, log.ref_t0, log.ref_dt)
        conn.send((log.computes, *(a.tobytes() for a in arrays), log.bad))
    except BaseException as e:
        conn.send(repr(e))
    finally:
        conn.close()


def _processes(cls: type, servers: list, key: str, mode: str, times: tuple) -> Log:
    mp = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for _ in range(8):
        a, b = mp.Pipe(duplex=False)
        pr = mp.Process(target=_child, args=(cls, servers, key, mode, 8, times, b))
        pr.start()
        pipes.append(a)
        procs.append(pr)
    log = Log()
    errors = []
    for a in pipes:
        got = a.recv() if a.poll(times[2] - time.time() + 30) else "no result"
        if isinstance(got, str):
            errors.append(got)
            continue
        log.computes += got[0]
        for arr, raw in zip((log.t0, log.dt, log.stamps, log.ref_t0, log.ref_dt), got[1:6]):
            arr.frombytes(raw)
        log.bad += got[6]
    for pr in procs:
        pr.join(10)
    if errors:
        raise RuntimeError(f"child failed: {errors[0]}")
    return log


def _aio(servers: list, key: str, mode: str, times: tuple, n_inv: int) -> Log:
    return asyncio.run(_aio_run(servers, key, mode, times, n_inv))


async def _aio_run(servers: list, key: str, mode: str, times: tuple, n_inv: int) -> Log:
    from fastmc.aio import Client

    t_warm, t_start, t_end = times
    log = Log()
    mc = Client(servers)
    ref_key = Pattern.ref_key(key)
    kw: dict = {"time": 2, "recompute_early": 2} if mode == EXPIRY else {"time": 0}

    async def compute() -> bytes:
        t = time.time()
        await asyncio.sleep(COMPUTE_S)
        log.computes.append((t, time.time()))
        return f"{key}|{t:.6f}|{os.getpid()}".encode()

    async def task(hot_first: bool) -> None:
        pc, tt = time.perf_counter, time.time
        await asyncio.sleep(max(0.0, t_warm - tt()))
        while True:
            now = tt()
            if now >= t_end:
                return
            for hot in ORDERS[hot_first]:
                t0, a = tt(), pc()
                v = await (mc.get_or_set(key, compute, **kw) if hot else mc.get(ref_key))
                d = pc() - a
                if now >= t_start:
                    if hot:
                        log.read(key, t0, d, v)
                    else:
                        log.ref(t0, d)
            hot_first = not hot_first
            await asyncio.sleep(PAUSE)

    async def invalidator() -> None:
        for i in range(n_inv):
            await asyncio.sleep(max(0.0, t_start + 0.25 + i * PERIOD - time.time()))
            log.invalidations.append(time.time())
            await mc.invalidate(key)

    try:
        await asyncio.gather(*(task(i % 2 == 0) for i in range(256)), invalidator())
    finally:
        await mc.close()
    return log


def _window(ctx: Ctx, n: int) -> tuple:
    """(warm-up start, window start, window end): the window starts half-way between two of
    the server's ticks and lasts n ticks, so that a TTL of one tick expires exactly n times."""
    tick = _next_tick(ctx.servers1[0])
    t_start = tick + 0.5
    return (t_start - WARMUP, t_start, t_start + n * PERIOD)


def _measure(ctx: Ctx, cls: type, shape: str, mode: str, n: int) -> dict:
    key = f"stampede:{ctx.run_id}:{cls.__name__}:{SHAPES.index(shape)}:{mode}"
    servers = ctx.servers1
    import fastmc

    fastmc.Client(servers).set(Pattern.ref_key(key), b"the reference: always there")
    times = _window(ctx, n)
    inv_log = Log()
    inv = None
    n_inv = n if mode == INVALIDATE else 0
    if n_inv and shape != SHAPES[2]:
        p = cls(servers, key, mode, _make_compute(key, inv_log))
        inv = threading.Thread(target=_invalidator, args=(p, times[1], n_inv, inv_log))
        inv.start()
    if shape == SHAPES[0]:
        log = _threads(cls, servers, key, mode, 64, times)
    elif shape == SHAPES[1]:
        log = _processes(cls, servers, key, mode, times)
    else:
        log = _aio(servers, key, mode, times, n_inv)
    if inv:
        inv.join()
    if log.bad:
        ctx.failures.add("stampede", cls.name, f"{shape}, {mode}: wrong values {log.bad[:2]}")
    log.invalidations += inv_log.invalidations
    return _figures(log, times, n)


def _figures(log: Log, times: tuple, n: int) -> dict:
    _, t_start, t_end = times
    computes = sorted(c for c in log.computes if t_start <= c[0] < t_end)
    lat = sorted(log.dt)
    during = sorted(_during(log.t0, log.dt, computes))
    ref_during = sorted(_during(log.ref_t0, log.ref_dt, computes))
    stale, max_age = _stale(log)
    return {
        "reads": len(lat),
        "recomputes": len(computes),
        "per_event": len(computes) / n,
        "p50": _pct(lat, 0.5),
        "p99": _pct(lat, 0.99),
        "max": lat[-1] * 1e3 if lat else None,
        "during_reads": len(during),
        "during_p99": _pct(during, 0.99),
        "ref_p99": _pct(sorted(log.ref_dt), 0.99),
        "ref_during_reads": len(ref_during),
        "ref_during_p99": _pct(ref_during, 0.99),
        "stale": stale,
        "max_age": max_age,
    }


def _stale(log: Log) -> tuple:
    """(stale reads, oldest value read in seconds). A read is stale when, as it returns, its
    value was computed before an invalidation more than STALE_WINDOW old; without
    invalidations (expiry), when the value is older than its PERIOD plus STALE_WINDOW."""
    inv = sorted(log.invalidations)
    stale, oldest = 0, 0.0
    for t0, dt, tc in zip(log.t0, log.dt, log.stamps):
        tr = t0 + dt
        oldest = max(oldest, tr - tc)  # a nan (bad value) leaves it alone
        if inv:
            i = bisect_right(inv, tr - STALE_WINDOW) - 1
            stale += i >= 0 and tc < inv[i]
        else:
            stale += tr - tc > PERIOD + STALE_WINDOW
    return stale, oldest


def _during(t0s: Any, dts: Any, computes: list) -> list:
    """Latencies (`dts`) of the reads that started (`t0s`) while a recompute was running."""
    if not computes:
        return []
    starts = [c[0] for c in computes]
    out = []
    for t0, dt in zip(t0s, dts):
        i = bisect_right(starts, t0) - 1
        if i >= 0 and t0 <= computes[i][1]:
            out.append(dt)
    return out


def _pct(sorted_s: list, q: float) -> float | None:
    if not sorted_s:
        return None
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * q))] * 1e3


def run(ctx: Ctx) -> None:
    if not ctx.meta_ok:
        ctx.report.emit("stampede", "Skipped: the server does not speak the meta protocol.")
        return
    n = ctx.s.stampede_seconds
    res: dict = {}
    # get_or_set, invalidate and fastmc.aio are fastmc's own: a stand-in cannot fill them in.
    with_fastmc = ctx.has_fastmc and not ctx.standin
    if not with_fastmc:
        _progress("fastmc not measured (not importable, or a stand-in): its rows fail")
    for mode in (EXPIRY, INVALIDATE):
        for shape in SHAPES:
            for cls in PATTERNS:
                if shape == SHAPES[2] and not cls.has_async:
                    continue
                if cls is Fastmc and not with_fastmc:
                    continue
                _progress(f"{mode}, {shape}: {cls.name}")
                res[(cls.name, shape, mode)] = ctx.failures.safe(
                    "stampede", cls, _measure, ctx, cls, shape, mode, n
                )
    _report(ctx, res, n)


def _report(ctx: Ctx, res: dict, n: int) -> None:
    rows = []
    for mode in (EXPIRY, INVALIDATE):
        for shape in SHAPES:
            for cls in PATTERNS:
                name = "fastmc.aio" if shape == SHAPES[2] else cls.name
                if shape == SHAPES[2] and not cls.has_async:
                    rows.append([mode, shape, cls.name, "n/a (no asyncio API)", *[""] * 8])
                    continue
                r = res.get((cls.name, shape, mode))
                if not r:
                    what = "failed" if (cls.name, shape, mode) in res else "not measured"
                    rows.append([mode, shape, name, what, *[""] * 8])
                    if cls is Fastmc:  # a target not measured is a FAIL
                        for key in ("stampede_recomputes", "stampede_p99", "stampede_stale"):
                            ctx.report.judge(key, what, None, mode=mode, shape=shape, client=name)
                    continue
                ref99 = r["ref_during_p99"]
                rows.append(
                    [
                        mode,
                        shape,
                        name,
                        f"{r['recomputes']} / {n} = {fmt_num(r['per_event'])}",
                        fmt_num(r["p50"]),
                        fmt_num(r["p99"]),
                        fmt_num(r["max"]),
                        f"{fmt_num(r['during_p99'])} ({r['during_reads']:,})",
                        f"{fmt_num(ref99)} ({r['ref_during_reads']:,})",
                        f"×{fmt_num(ratio(r['during_p99'], ref99))}",
                        f"{r['stale']:,} (max age {fmt_num(r['max_age'])} s)",
                        f"{r['reads']:,}",
                    ]
                )
                if cls is Fastmc:
                    _judge(ctx, r, ref99, mode, shape, name)
    ctx.report.emit(
        "stampede: one hot key, 50 ms to compute, expiring or invalidated every second",
        f"A window of {n} s ({n} server clock ticks, started half-way between two) of reads "
        f"of one key; each reader pauses {PAUSE * 1e3:g} ms between reads. The computation "
        f"sleeps {COMPUTE_S * 1e3:g} ms and stamps the value with its key and time; every read "
        "is checked. expiry: pylibmc and meta-memcache/fastmc store with a TTL (1 s; 2 s with "
        "a 2 s early-recompute window for meta-memcache's RecachePolicy and fastmc's "
        "recompute_early, so one caller recomputes each second while the others keep the "
        "value); dogpile uses its own expiration_time=1 (counted from when the last value was "
        "made, so its expiries come a little more than 1 s apart). invalidate: every second, pylibmc "
        "and dogpile delete the key, meta-memcache invalidates with a StalePolicy, fastmc calls "
        "`invalidate`. Recomputes: compute calls started in the window ÷ expiries or "
        "invalidations. Latencies in ms. During: p99 of the reads that started while a "
        "recompute ran (their count). The reference: after each read, every reader also reads "
        "another key that is always there with a plain fastmc `get` (its own process's "
        "`fastmc.Client`; the asyncio tasks: their `fastmc.aio.Client`), and its p99 over the "
        "same moments (the reference reads that started while a recompute ran, their count) "
        "is the plain get p99 under the same load. Stale (stale window "
        f"{STALE_WINDOW:g} s): reads returning, more than {STALE_WINDOW:g} s after an "
        "invalidation, a value computed before it; with expiry, a value computed more than "
        f"{PERIOD + STALE_WINDOW:g} s earlier. Max age: the oldest value a read returned "
        "(a reader that waits long gets an old value).\n\n"
        + md_table(
            [
                "run",
                "load",
                "client",
                "recomputes / event",
                "p50",
                "p99",
                "max",
                "p99 during recompute (reads)",
                "plain get p99 during recompute (reads)",
                "during ÷ plain",
                "stale reads",
                "reads",
            ],
            rows,
        ),
    )
    ctx.report.data["stampede"] = {"|".join(k): v for k, v in res.items()}


def _judge(ctx: Ctx, r: dict, ref99: float | None, mode: str, shape: str, name: str) -> None:
    per = r["per_event"]
    ctx.report.judge(
        "stampede_recomputes",
        f"{r['recomputes']} recomputes for {fmt_num(per and r['recomputes'] / per)} events",
        None if per is None else abs(per - 1.0),
        mode=mode,
        shape=shape,
        client=name,
    )
    rr = ratio(r["during_p99"], ref99)
    ctx.report.judge(
        "stampede_p99",
        f"{fmt_num(r['during_p99'])} ms vs plain get {fmt_num(ref99)} ms (×{fmt_num(rr)})",
        rr,
        mode=mode,
        shape=shape,
        client=name,
    )
    ctx.report.judge(
        "stampede_stale",
        f"{r['stale']:,} of {r['reads']:,} reads",
        r["stale"],
        mode=mode,
        shape=shape,
        client=name,
    )
