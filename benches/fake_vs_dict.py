"""How fast fastmc.testing's fake server is, next to a dict and a real memcached: single get and
set through ``fastmc.Client`` (and ``fastmc.aio.Client``), per operation, median of rounds
(docs/testing.md quotes it).

    python benches/fake_vs_dict.py [--ops 2000] [--rounds 7] [--old-fake REV]

A figure, not a target: nothing here passes or fails (targets live in mcbench/targets.py).
Rows: a dict (the floor of any stand-in), a dict behind a method (what a hand-written mock
costs), the fake in-process (``fake.client()``: no socket, no thread), the same fake over its
loopback socket (``in_process=False``, as pylibmc or any other client meets it), a real
memcached, and with ``--old-fake REV`` the fake as it was at git revision REV (the Python
brain on a loopback socket, extracted from the repository for this run). The ratios are to the
dict's get and set."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import fastmc
import fastmc.aio
from fastmc.testing import FakeServer

ROOT = Path(__file__).resolve().parents[1]

VALUE = "v" * 100
OLD_FILES = ["__init__", "_server", "_store", "_protocol", "_meta", "_binary"]


def per_op(fn, ops: int, rounds: int) -> float:
    """Median seconds per call of `fn(i)` over `rounds` loops of `ops` calls."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(ops):
            fn(i)
        times.append((time.perf_counter() - t0) / ops)
    return statistics.median(times)


def measure(name: str, get, set_, ops: int, rounds: int) -> tuple[str, float, float]:
    keys = ["key%d" % i for i in range(ops)]
    s = per_op(lambda i: set_(keys[i], VALUE), ops, rounds)
    g = per_op(lambda i: get(keys[i]), ops, rounds)
    return name, g, s


def measure_aio(name: str, address: str, ops: int, rounds: int) -> tuple[str, float, float]:
    """The same loops, each call awaited in turn on one event loop."""

    async def run() -> tuple[float, float]:
        mc = fastmc.aio.Client([address])
        keys = ["key%d" % i for i in range(ops)]

        async def timed(call) -> float:
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                for i in range(ops):
                    await call(i)
                times.append((time.perf_counter() - t0) / ops)
            return statistics.median(times)

        s = await timed(lambda i: mc.set(keys[i], VALUE))
        g = await timed(lambda i: mc.get(keys[i]))
        return g, s

    g, s = asyncio.run(run())
    return name, g, s


class Mock:
    """A hand-written stand-in: a dict behind methods."""

    def __init__(self) -> None:
        self.d: dict[str, object] = {}

    def get(self, key: str) -> object:
        return self.d.get(key)

    def set(self, key: str, value: object) -> bool:
        self.d[key] = value
        return True


def old_fake(rev: str, tmp: str):
    """The FakeServer class of `rev`, imported from its files under `tmp`."""
    pkg = Path(tmp) / "old_fake"
    pkg.mkdir()
    for name in OLD_FILES:
        src = "%s:python/fastmc/testing/%s.py" % (rev, name)
        text = subprocess.run(["git", "-C", str(ROOT), "show", src], capture_output=True)
        if text.returncode == 0:
            (pkg / ("%s.py" % name)).write_bytes(text.stdout)
    sys.path.insert(0, tmp)
    return importlib.import_module("old_fake").FakeServer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--old-fake", metavar="REV", help="also time the fake of git revision REV")
    a = ap.parse_args()
    rows = []
    d: dict[str, object] = {}
    rows.append(measure("dict", d.get, d.__setitem__, a.ops, a.rounds))
    m = Mock()
    rows.append(measure("dict behind a method (a mock)", m.get, m.set, a.ops, a.rounds))
    try:  # the in-process stand-in most Python suites use today: not exact, but the bar
        from pymemcache.test.utils import MockMemcacheClient
    except ImportError as e:
        print("(no pymemcache: %s)" % e)
    else:
        pm = MockMemcacheClient()
        rows.append(measure("pymemcache's MockMemcacheClient", pm.get, pm.set, a.ops, a.rounds))
    with FakeServer() as fake:
        mc = fake.client()
        rows.append(measure("fastmc on FakeServer, in-process", mc.get, mc.set, a.ops, a.rounds))
        rows.append(
            measure_aio("fastmc.aio on FakeServer, in-process", fake.address, a.ops, a.rounds)
        )
    with FakeServer(in_process=False) as fake:
        mc = fake.client()
        rows.append(measure("fastmc on FakeServer, loopback", mc.get, mc.set, a.ops, a.rounds))
        rows.append(
            measure_aio("fastmc.aio on FakeServer, loopback", fake.address, a.ops, a.rounds)
        )
    if a.old_fake:
        with tempfile.TemporaryDirectory() as tmp, old_fake(a.old_fake, tmp)() as fake:
            mc = fastmc.Client([fake.address])
            name = "fastmc on the fake of %s (loopback)" % a.old_fake
            rows.append(measure(name, mc.get, mc.set, a.ops, a.rounds))
    try:
        from memcached import Memcached

        proc = Memcached()
    except Exception as e:  # no memcached here: the row is left out
        print("(no real memcached: %s)" % e)
    else:
        try:
            mc = fastmc.Client([proc.address])
            rows.append(measure("fastmc on memcached", mc.get, mc.set, a.ops, a.rounds))
        finally:
            proc.stop()
    base_g, base_s = rows[0][1], rows[0][2]
    print("| stand-in | get µs/op | set µs/op | get × dict | set × dict |")
    print("|---|---|---|---|---|")
    for name, g, s in rows:
        print(
            "| %s | %.3f | %.3f | %.0f× | %.0f× |"
            % (name, g * 1e6, s * 1e6, g / base_g, s / base_s)
        )


if __name__ == "__main__":
    main()
