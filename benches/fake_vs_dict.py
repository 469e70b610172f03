"""How fast fastmc.testing's fake server is, next to a dict and a real memcached: single get and
set through ``fastmc.Client``, per operation, median of rounds (docs/testing.md quotes it).

    python benches/fake_vs_dict.py [--ops 2000] [--rounds 7]

A figure, not a target: nothing here passes or fails (targets live in mcbench/targets.py). The
fake answers from Python on a loopback socket, so a round trip costs what the client's round
trip costs plus the fake's parsing; the dict row is the floor of any in-process stand-in."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import fastmc
from fastmc.testing import FakeServer


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
    value = "v" * 100
    keys = ["key%d" % i for i in range(ops)]
    s = per_op(lambda i: set_(keys[i], value), ops, rounds)
    g = per_op(lambda i: get(keys[i]), ops, rounds)
    return name, g, s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    rows = []
    d: dict[str, object] = {}
    rows.append(measure("dict", d.get, d.__setitem__, a.ops, a.rounds))
    with FakeServer() as fake:
        mc = fake.client()
        rows.append(measure("fastmc on FakeServer", mc.get, mc.set, a.ops, a.rounds))
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
            "| %s | %.2f | %.2f | %.0f× | %.0f× |"
            % (name, g * 1e6, s * 1e6, g / base_g, s / base_s)
        )


if __name__ == "__main__":
    main()
