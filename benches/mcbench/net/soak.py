"""The soak under loss and reordering (`make bench-net-soak`, `bench_net.py --soak`).

One fastmc Client, shared by `--soak-threads` threads, against `--soak-servers` servers through
the simulated network at `--soak-rtt`, with `--loss` of the packets dropped and `--reorder` held
back each way, for `--soak-seconds`; then the loss and reordering stop and the load goes on for
`--heal-seconds`. Timeouts (connect, send, receive, poll) are `--timeout-ms`.

Each thread owns its keys and keeps, for each key, the versions it may hold: the last write that
was acknowledged, plus any write whose outcome is unknown because it raised. Every value names
its key and version (`key|version`). The threads mix gets, sets, get_multi and set_multi of
their own keys, and check every value read:

- a wrong value: another key's, or a version that cannot be there (must be 0);
- a get that returned None for a key known to be stored (a failure reported as a miss; must be 0);
- a get_multi that left out keys known to be stored (pylibmc's behaviour when a server fails:
  its keys are left out), counted per call;
- every exception, by class; for each call that raised a timeout, how long it took;
- recovery: the calls that failed among those started more than retry_timeout after the loss
  stopped (must be 0), and when the last failure happened.

Only the Python standard library and fastmc are needed, so the soak runs with any build's
interpreter: `make bench-net-soak NET_PYTHON=/path/to/worktree/.venv/bin/python`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..cli import import_fastmc
from ..report import fmt_num, md_table
from ..settings import REPO_DIR
from ..targets import TARGETS
from .calibrate import calibrate


def _where(mod: Any) -> str:
    """Where the build under test lives, without this machine's paths (the report is kept in
    the repository): relative to this checkout, else the other checkout's folder name."""
    path = os.path.dirname(os.path.abspath(mod.__file__))
    if os.path.commonpath([path, REPO_DIR]) == REPO_DIR:
        return os.path.relpath(path, REPO_DIR)
    checkout = os.path.dirname(os.path.dirname(path))  # <checkout>/python/fastmc
    return "another checkout, %s" % os.path.join(os.path.basename(checkout), "python", "fastmc")


KEYS_PER_THREAD = 300
MULTI_KEYS = 12


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("the soak (--soak)")
    g.add_argument("--soak-seconds", type=float, default=60, help="under loss (default 60)")
    g.add_argument("--heal-seconds", type=float, default=10, help="after it (default 10)")
    g.add_argument("--loss", type=float, default=0.01, help="per packet, each way (0.01)")
    g.add_argument("--reorder", type=float, default=0.01, help="per packet, each way (0.01)")
    g.add_argument("--reorder-extra-us", type=float, default=300, help="held longer (300)")
    g.add_argument("--soak-rtt", type=float, default=0.2, help="round trip in ms (0.2)")
    g.add_argument("--soak-threads", type=int, default=8, help="threads (8)")
    g.add_argument("--soak-servers", type=int, default=3, help="servers (3)")
    g.add_argument("--timeout-ms", type=int, default=500, help="every timeout (500)")
    g.add_argument("--retry-timeout", type=int, default=2, help="retry_timeout, s (2)")


@dataclass
class Tally:
    """One thread's counts; merged at the end."""

    calls: dict = field(default_factory=dict)  # op -> calls
    errors: dict = field(default_factory=dict)  # exception class -> count
    timeouts: list = field(default_factory=list)  # seconds each call that timed out took
    failures: list = field(default_factory=list)  # (start, end, op, exception class)
    durations: list = field(default_factory=list)  # (start, seconds) of every call
    wrong: list = field(default_factory=list)  # descriptions of wrong values
    missed: int = 0  # gets of a stored key that returned None
    multi_left_out: int = 0  # get_multi calls that left out stored keys
    left_out_durations: list = field(default_factory=list)  # seconds each of those took
    keys_left_out: int = 0


def _is_timeout(e: Exception) -> bool:
    return getattr(e, "retcode", None) == 31 or "TIMEOUT" in str(e).upper()


class Worker:
    def __init__(self, mc: Any, tid: int, run: str, stop: threading.Event) -> None:
        self.mc, self.stop, self.t = mc, stop, Tally()
        self.rng = random.Random(tid)
        self.keys = [f"soak:{run}:{tid}:{i:04d}" for i in range(KEYS_PER_THREAD)]
        self.maybe: dict = {k: {None} for k in self.keys}  # versions a key may hold
        self.version = 0

    def value(self, key: str) -> tuple[int, bytes]:
        self.version += 1
        return self.version, f"{key}|{self.version}".encode()

    def check(self, key: str, got: Any) -> None:
        if got is None:
            if None not in self.maybe[key]:
                self.t.missed += 1
            return
        k, _, v = got.decode(errors="replace").rpartition("|")
        if k != key or not v.isdigit() or int(v) not in self.maybe[key]:
            self.t.wrong.append(
                f"{key!r} read {got!r}, may hold {sorted(map(str, self.maybe[key]))}"
            )
            return
        self.maybe[key] = {int(v)}

    def call(self, op: str, fn: Any, *args: Any) -> tuple[bool, Any]:
        self.t.calls[op] = self.t.calls.get(op, 0) + 1
        t0 = time.monotonic()
        try:
            res = fn(*args)
            self.t.durations.append((t0, time.monotonic() - t0))
            return True, res
        except Exception as e:  # every failure is counted by class
            t1 = time.monotonic()
            self.t.durations.append((t0, t1 - t0))
            name = type(e).__name__ + (" (timeout)" if _is_timeout(e) else "")
            self.t.errors[name] = self.t.errors.get(name, 0) + 1
            self.t.failures.append((t0, t1, op, name))
            if _is_timeout(e):
                self.t.timeouts.append(t1 - t0)
            return False, None

    def step(self) -> None:
        x = self.rng.random()
        if x < 0.4:
            k = self.rng.choice(self.keys)
            ok, got = self.call("get", self.mc.get, k)
            if ok:
                self.check(k, got)
        elif x < 0.7:
            k = self.rng.choice(self.keys)
            v, val = self.value(k)
            ok, res = self.call("set", self.mc.set, k, val)
            self.maybe[k] = {v} if ok and res else self.maybe[k] | {v}
        elif x < 0.9:
            keys = self.rng.sample(self.keys, MULTI_KEYS)
            t0 = time.monotonic()
            ok, got = self.call("get_multi", self.mc.get_multi, keys)
            if ok:
                left = [k for k in keys if k not in got and None not in self.maybe[k]]
                if left:
                    self.t.multi_left_out += 1
                    self.t.left_out_durations.append(time.monotonic() - t0)
                    self.t.keys_left_out += len(left)
                for k, val in got.items():
                    self.check(k, val)
        else:
            keys = self.rng.sample(self.keys, MULTI_KEYS)
            vals = {k: self.value(k) for k in keys}
            ok, failed = self.call(
                "set_multi", self.mc.set_multi, {k: v[1] for k, v in vals.items()}
            )
            bad = set(failed or []) if ok else set(keys)
            for k, (v, _) in vals.items():
                self.maybe[k] = self.maybe[k] | {v} if k in bad else {v}

    def loop(self) -> None:
        while not self.stop.is_set():
            self.step()


def run(args: argparse.Namespace, net: Any, holder: Any, servers: list, echo: str) -> int:
    mod, modname, _err = import_fastmc()
    if mod is None:
        return 1
    cal = calibrate(holder, echo, args.soak_rtt * 1000, 500)
    tmo = args.timeout_ms
    behaviors = {
        "connect_timeout": tmo,
        "_poll_timeout": tmo,
        "receive_timeout": tmo * 1000,
        "send_timeout": tmo * 1000,
        "retry_timeout": args.retry_timeout,
    }
    mc = mod.Client(servers, behaviors=behaviors)
    stop = threading.Event()
    run_id = f"{random.randrange(16**4):04x}"
    workers = [Worker(mc, i, run_id, stop) for i in range(args.soak_threads)]
    base = holder.stats()
    holder.set(loss=args.loss, reorder=args.reorder, reorder_extra_us=args.reorder_extra_us)
    t_start = time.monotonic()
    ths = [threading.Thread(target=w.loop, daemon=True) for w in workers]
    for th in ths:
        th.start()
    print(
        f"soak: {args.soak_seconds:g} s under loss {args.loss} and reorder {args.reorder}"
        f" each way, then {args.heal_seconds:g} s healed",
        flush=True,
    )
    try:
        time.sleep(args.soak_seconds)
        lossy = holder.stats()
        holder.set(loss=0, reorder=0)
        t_heal = time.monotonic()
        time.sleep(args.heal_seconds)
    finally:
        stop.set()
        for th in ths:
            th.join(timeout=10)
    end = holder.stats()
    cal["mechanism"] = holder.name
    return report(args, modname, mod, cal, workers, t_start, t_heal, base, lossy, end)


def _merge(workers: list) -> Tally:
    t = Tally()
    for w in workers:
        for op, n in w.t.calls.items():
            t.calls[op] = t.calls.get(op, 0) + n
        for name, n in w.t.errors.items():
            t.errors[name] = t.errors.get(name, 0) + n
        t.timeouts += w.t.timeouts
        t.failures += w.t.failures
        t.durations += w.t.durations
        t.wrong += w.t.wrong
        t.missed += w.t.missed
        t.multi_left_out += w.t.multi_left_out
        t.left_out_durations += w.t.left_out_durations
        t.keys_left_out += w.t.keys_left_out
    return t


def report(
    args: argparse.Namespace,
    modname: str,
    mod: Any,
    cal: dict,
    workers: list,
    t_start: float,
    t_heal: float,
    base: dict,
    lossy: dict,
    end: dict,
) -> int:
    t = _merge(workers)
    total = sum(t.calls.values())
    tmo_s = args.timeout_ms / 1000
    late = [f for f in t.failures if f[0] > t_heal + args.retry_timeout]
    after = [f for f in t.failures if f[1] > t_heal]
    last_fail = max((f[1] - t_heal for f in after), default=None)
    packets = lossy["packets"] - base["packets"]
    dropped = lossy["dropped"] - base["dropped"]
    reordered = lossy["reordered"] - base["reordered"]
    down = sum(n for name, n in t.errors.items() if name.startswith("ServerDown"))
    # A get_multi that left out a server's keys after waiting about a timeout hit that timeout
    # too (it does not raise while another server answered): held to the same limit.
    absorbed = [d for d in t.left_out_durations if d >= 0.9 * tmo_s]
    failed = [f[1] - f[0] for f in t.failures]  # every call that raised, timeouts included
    longest = max(failed + absorbed, default=None)
    outcomes = [
        ("soak_wrong", len(t.wrong), f"{len(t.wrong)} of {total:,} calls"),
        (
            "soak_timeout",
            (longest / tmo_s) if longest is not None else 0.0,
            f"{len(failed)} raised ({len(t.timeouts)} a timeout), {len(absorbed)} get_multi "
            f"partial after ≥ 0.9× the timeout; longest {fmt_num(longest and longest * 1e3)} ms"
            f" (×{fmt_num(longest and longest / tmo_s)})",
        ),
        (
            "soak_recovery",
            len(late),
            f"{len(late)} failed after heal + retry_timeout; last failure "
            f"{fmt_num(last_fail)} s after the loss stopped",
        ),
    ]
    rows = [
        ["build", f"{modname} {getattr(mod, '__version__', '')} ({_where(mod)})"],
        [
            "network",
            f"RTT {args.soak_rtt:g} ms (raw ping-pong median "
            f"{cal['final']['median_us']:.0f} µs, {cal['delay_us']:.0f} µs held each way by {cal['mechanism']})",
        ],
        [
            "load",
            f"{args.soak_threads} threads, one shared Client, {args.soak_servers} servers, "
            "40% get, 30% set, 20% get_multi and 10% set_multi of 12 keys",
        ],
        [
            "timeouts",
            f"{args.timeout_ms} ms (connect, send, receive, poll); retry_timeout "
            f"{args.retry_timeout} s",
        ],
        [
            "lossy phase",
            f"{args.soak_seconds:g} s: {packets:,.0f} packets, {dropped:,.0f} dropped "
            f"({dropped / max(packets, 1):.2%}), {reordered:,.0f} held back "
            f"({reordered / max(packets, 1):.2%})",
        ],
        [
            "healed phase",
            f"{args.heal_seconds:g} s, {end['packets'] - lossy['packets']:,.0f} packets",
        ],
        ["call latency, lossy phase", _latency([d for t0, d in t.durations if t0 < t_heal])],
        ["call latency, healed phase", _latency([d for t0, d in t.durations if t0 >= t_heal])],
        [
            "calls",
            f"{total:,} (" + ", ".join(f"{k} {v:,}" for k, v in sorted(t.calls.items())) + ")",
        ],
        ["exceptions", ", ".join(f"{k} {v:,}" for k, v in sorted(t.errors.items())) or "none"],
        ["exceptions by operation", _by_op(t.failures)],
        ["calls that raised ServerDown", f"{down:,} ({_pct(down, total)})"],
        ["all calls that raised", f"{len(t.failures):,} ({_pct(len(t.failures), total)})"],
        [
            "get_multi calls that left out stored keys",
            f"{t.multi_left_out:,} of {t.calls.get('get_multi', 0):,} ({t.keys_left_out:,} keys)",
        ],
        ["those get_multi calls: duration", _durations(t.left_out_durations, tmo_s)],
        ["gets of a stored key that returned None", f"{t.missed:,}"],
        ["wrong values", f"{len(t.wrong):,}" + (f" (first: {t.wrong[0]})" if t.wrong else "")],
        ["calls that raised a timeout: duration", _durations(t.timeouts, tmo_s)],
        ["every call that raised: duration", _durations(failed, tmo_s)],
        ["failures after the loss stopped", f"{len(after):,}; last {fmt_num(last_fail)} s after"],
    ]
    results = []
    for key, value, measured in outcomes:
        ok = TARGETS[key].met(value)
        results.append([TARGETS[key].label, measured, "PASS" if ok else "FAIL"])
    ok_missed = t.missed == 0
    results.append(
        ["no failure reported as a miss", f"{t.missed} gets", "PASS" if ok_missed else "FAIL"]
    )
    md = (
        "# fastmc under packet loss and reordering (bench_net.py --soak)\n\n"
        + md_table(["", ""], rows)
        + "\n\n## Targets\n\n"
        + md_table(["target", "measured", "result"], results)
        + "\n"
    )
    print("\n" + md, flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench-net-soak.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "bench-net-soak.json"), "w") as f:
        json.dump(
            {
                "rows": rows,
                "targets": results,
                "calibration": cal,
                "errors": t.errors,
                "timeouts_s": t.timeouts,
            },
            f,
            indent=1,
        )
    if t.wrong or not ok_missed:
        return 2
    if args.strict and any(r[2] == "FAIL" for r in results):
        return 3
    return 0


def _pct(n: int, total: int) -> str:
    return f"{100 * n / max(total, 1):.2g}%"


def _by_op(failures: list) -> str:
    count: dict = {}
    for _t0, _t1, op, name in failures:
        count[op, name] = count.get((op, name), 0) + 1
    return ", ".join(f"{op}: {name} {n:,}" for (op, name), n in sorted(count.items())) or "none"


def _latency(xs: list) -> str:
    if len(xs) < 100:
        return f"{len(xs)} calls"
    q = statistics.quantiles([x * 1e3 for x in xs], n=1000)
    return (
        f"{len(xs):,} calls: p50 {fmt_num(q[499])}, p99 {fmt_num(q[989])}, p99.9 "
        f"{fmt_num(q[998])}, max {fmt_num(max(xs) * 1e3)} ms"
    )


def _durations(xs: list, tmo_s: float) -> str:
    if not xs:
        return "none"
    ms = sorted(x * 1e3 for x in xs)
    over = sum(1 for x in xs if x > tmo_s * TARGETS["soak_timeout"].limit)
    under = sum(1 for x in xs if x < tmo_s * 0.9)
    return (
        f"min {fmt_num(ms[0])}, median {fmt_num(statistics.median(ms))}, max {fmt_num(ms[-1])} "
        f"ms; {over} over 1.1× the timeout, {under} under 0.9×"
    )
