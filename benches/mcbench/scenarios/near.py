"""near: the near cache (docs/near-cache.md), in three parts, on one server.

1. **Zipf reads**: 1,000 keys read with Zipf-like popularity (exponent 1), 99% reads and 1%
   writes of a random key (chosen the same way), one thread: calls/s of fastmc without and with
   ``near_cache=NearCache(ttl=1, max_items=1000, hot_after=2)``, pylibmc, meta-memcache's
   ``CacheClient`` and its ``ProbabilisticHotCache`` (meta-memcache 4.3: a dict store,
   cache_ttl=1 s, max_last_access_age_seconds=1, probability_factor=10). Every client runs the
   same sequence of calls, after an untimed warm-up pass of it (so each near cache holds what it
   will). Each read is checked against the client's own last write of the key: a read that
   returns an older value is counted (``stale``); fastmc must have none (read-your-writes).
2. **A hot 100 KB value** read in a loop for a little over two revalidation periods (1 s, each
   client's shortest): the server's ``bytes_written`` divided by the revalidations it answered
   (its ``cmd_get``), on Debian's memcached (1.6.18: ``mg <key> c``) and, where it is unpacked,
   Debian sid's (1.6.45: the conditional fetch, ``mg <key> C<cas>``).
3. **The memory bound**: 20,000 distinct keys of 1 KB each read twice (so each is admitted) by
   a client with ``max_items=1000, max_bytes=256 KiB``: the most items and bytes it ever held.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import statistics
import time
from typing import Any, Callable

from ..context import Ctx
from ..measure import Samples, rotated, timed
from ..report import md_table
from ..settings import VALUE_SIZE

KEYS = 1000
WRITE_SHARE = 0.01
BIG = 100_000


def _sequence(n: int, seed: int) -> list[tuple[bool, int]]:
    """(is a write, key index) for n calls, Zipf-like over KEYS."""
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(KEYS)))
    idx = rng.choices(range(KEYS), cum_weights=cum, k=n)
    return [(rng.random() < WRITE_SHARE, i) for i in idx]


def _meta_client(servers: list) -> Any:
    import meta_memcache as m

    host, port = servers[0].rsplit(":", 1)
    return m.CacheClient.cache_client_from_servers(
        servers=[m.ServerAddress(host, int(port))],
        connection_pool_factory_fn=m.connection_pool_factory_builder(),
    )


def _hot_cache(servers: list) -> Any:
    from meta_memcache.extras.probabilistic_hot_cache import ProbabilisticHotCache

    return ProbabilisticHotCache(
        client=_meta_client(servers),
        store={},
        cache_ttl=1,
        max_last_access_age_seconds=1,
        probability_factor=10,
    )


def _meta_set(mc: Any) -> Callable:
    return lambda key, value: mc.set(key, value, ttl=0)


def _clients(ctx: Ctx) -> dict[str, tuple[Callable, Callable]]:
    """name: (get, set) of each client."""
    fm, servers = ctx.fastmc_mod, ctx.servers1
    out: dict[str, tuple[Callable, Callable]] = {}
    plain = fm.Client(servers)
    near = fm.Client(servers, near_cache=fm.NearCache(ttl=1, max_items=KEYS, hot_after=2))
    out["fastmc"] = (plain.get, plain.set)
    out["fastmc near"] = (near.get, near.set)
    with contextlib.suppress(ImportError):
        import pylibmc

        if pylibmc is not fm:
            mc = pylibmc.Client(servers)
            out["pylibmc"] = (mc.get, mc.set)
    with contextlib.suppress(ImportError):
        meta = _meta_client(servers)
        out["meta-memcache"] = (meta.get, _meta_set(meta))
        hot = _hot_cache(servers)
        out["meta-memcache hot cache"] = (hot.get, _meta_set(hot))
    return out


def run(ctx: Ctx) -> None:
    if not ctx.has_fastmc or ctx.standin:
        return
    clients = _clients(ctx)
    n = 20_000 if ctx.s.quick else 50_000
    seq = _sequence(n, 7)
    samples, stale = Samples(), dict.fromkeys(clients, 0)
    state = {name: _prepare(i, get, set_) for i, (name, (get, set_)) in enumerate(clients.items())}
    for name in clients:  # the warm-up pass: untimed, checked
        stale[name] += _pass(state[name], seq)()
    for r in range(3 if ctx.s.quick else 7):
        for name in rotated(list(clients), r):
            t, wrong = timed(_pass(state[name], seq))
            samples.add(("zipf", name), n / t)
            stale[name] += wrong
    if stale["fastmc"] or stale["fastmc near"]:
        ctx.failures.add("near", "fastmc", f"stale reads: {stale['fastmc near']}")
    _report_zipf(ctx, samples, stale, list(clients))
    _report_big(ctx)
    _report_bound(ctx)


def _prepare(i: int, get: Callable, set_: Callable) -> dict[str, Any]:
    keys = ["near%d:%04d" % (i, k) for k in range(KEYS)]
    values = [("%s=0" % k).ljust(VALUE_SIZE, "x") for k in keys]
    for k, v in zip(keys, values):
        set_(k, v)
    return {"get": get, "set": set_, "keys": keys, "values": values, "round": itertools.count(1)}


def _pass(st: dict[str, Any], seq: list[tuple[bool, int]]) -> Callable[[], int]:
    """One pass over ``seq`` for one client; returns the reads that saw an older value."""
    get, set_, keys, values = st["get"], st["set"], st["keys"], st["values"]
    tag = next(st["round"])

    def go() -> int:
        wrong = 0
        for j, (write, i) in enumerate(seq):
            k = keys[i]
            if write:
                v = ("%s=%d.%d" % (k, tag, j)).ljust(VALUE_SIZE, "x")
                set_(k, v)
                values[i] = v
            elif get(k) != values[i]:
                wrong += 1
        return wrong

    return go


def _report_zipf(ctx: Ctx, samples: Samples, stale: dict[str, int], names: list[str]) -> None:
    def rate_of(name: str) -> float | None:
        xs = samples.get(("zipf", name))
        return statistics.median(xs) if xs else None

    base = rate_of("fastmc")
    rows, data = [], {}
    for name in names:
        rate = rate_of(name)
        data[name] = {"calls_per_s": rate, "stale_reads": stale[name]}
        ratio = f" (×{rate / base:.2f})" if rate and base else ""
        rows.append([name, f"{rate:,.0f}{ratio}" if rate else "—", f"{stale[name]:,}"])
    near = rate_of("fastmc near")
    gain = near / base if near and base else None
    ctx.report.judge("near_zipf", "—" if gain is None else f"×{gain:.1f}", gain)
    ctx.report.data["near_zipf"] = data
    ctx.report.emit(
        "Near cache: Zipf-like reads over 1,000 keys, 99% reads (calls/s)",
        "One thread, one server, the same calls for every client, rounds in a rotating order. "
        "Each cell: the median calls/s, then (÷ fastmc without a near cache). `stale`: reads "
        "(warm-up and timed) that returned an older value than the client's own last write of "
        "the key.\n\n" + md_table(["client", "calls/s", "stale reads"], rows),
    )


def _big_servers() -> list[tuple[str, Any]]:
    from memcached import Memcached
    from sid_memcached import proxy_binary

    out = [("Debian memcached", Memcached())]
    sid = proxy_binary()
    if sid is not None:
        out.append(("Debian sid memcached", Memcached(binary=sid)))
    return out


def _wire(address: str) -> tuple[int, int]:
    import fastmc

    s = fastmc.Client([address]).get_stats()[0][1]
    return int(s["bytes_written"]), int(s["cmd_get"])


def _one_big(address: str, get: Callable, set_: Callable) -> tuple[float, int]:
    """Bytes the server sent per revalidation of a hot 100 KB value, and how many there were."""
    value = random.Random(BIG).randbytes(BIG)  # incompressible: no client shrinks it
    set_("big", value)
    end = time.monotonic() + 1.2  # warm: admitted, and a first check (which may teach)
    while time.monotonic() < end:
        get("big")
    w0, g0 = _wire(address)
    w1, g1 = _wire(address)  # what reading the counters costs
    end = time.monotonic() + 2.1
    while time.monotonic() < end:
        if get("big") != value:
            raise AssertionError("the hot value read back wrong")
    w2, g2 = _wire(address)
    checks = (g2 - g1) - (g1 - g0)
    sent = (w2 - w1) - (w1 - w0)
    return (sent / checks if checks else float("nan")), checks


def _report_big(ctx: Ctx) -> None:
    import fastmc

    rows, data = [], {}
    for label, server in _big_servers():
        try:
            address = server.address
            near = fastmc.Client([address], near_cache=fastmc.NearCache(ttl=1, hot_after=1))
            cells: list[str] = [label]
            per, checks = _one_big(address, near.get, near.set)
            data[f"fastmc near, {label}"] = per
            cells.append(f"{per:,.0f} ({checks})")
            with contextlib.suppress(ImportError):
                hot = _hot_cache([address])
                hot_per, hot_checks = _one_big(address, hot.get, _meta_set(hot))
                data[f"meta-memcache hot cache, {label}"] = hot_per
                cells.append(f"{hot_per:,.0f} ({hot_checks})")
            rows.append(cells)
        finally:
            server.stop()
    ctx.report.data["near_big"] = data
    ctx.report.emit(
        "Near cache: a hot 100 KB value, bytes the server sent per revalidation",
        "The value read in a loop for 2.1 s after a 1.2 s warm-up, both clients revalidating "
        "every second; each cell: the server's bytes_written ÷ the reads it answered (their "
        "count in brackets). fastmc checks by CAS alone; meta-memcache re-reads the value.\n\n"
        + md_table(["server", "fastmc near", "meta-memcache hot cache"], rows),
    )


def _report_bound(ctx: Ctx) -> None:
    fm = ctx.fastmc_mod
    bound = fm.NearCache(ttl=60, max_items=1000, max_bytes=256 << 10, hot_after=2)
    mc = fm.Client(ctx.servers1, near_cache=bound)
    value = b"m" * 1000
    most_items = most_bytes = 0
    for start in range(0, 20_000, 1000):
        keys = ["bound:%d" % i for i in range(start, start + 1000)]
        mc.set_multi(dict.fromkeys(keys, value))
        for k in keys:
            mc.get(k)
            mc.get(k)
            m = bound.metrics()
            most_items = max(most_items, m["items"])
            most_bytes = max(most_bytes, m["bytes"])
    ok = most_items <= 1000 and most_bytes <= 256 << 10
    ctx.report.judge("near_bound", f"{most_items:,} items, {most_bytes:,} bytes", 1.0, also=ok)
    ctx.report.data["near_bound"] = {"items": most_items, "bytes": most_bytes}
    ctx.report.emit(
        "Near cache: the memory bound",
        "20,000 keys of 1,000 bytes, each read twice (so each is admitted), with max_items=1000 "
        f"and max_bytes=262,144: the most it ever held was {most_items:,} items and "
        f"{most_bytes:,} bytes (values as stored, plus keys and 64 bytes each); "
        f"{bound.metrics()['evictions']:,} evictions.",
    )
