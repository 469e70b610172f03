"""Interleaved A/B timing of two builds of fastmc for one Python: the per-version wheel against
the abi3 wheel (or any two directories holding an installed `fastmc`).

    python release/abi3_ab.py --python python3.11 A=/tmp/ab/cp311 B=/tmp/ab/abi3 [--rounds 20]

Each directory is a `pip install --target` of one wheel. Every round runs one fresh process per
build (the order alternates round by round), with PYTHONPATH set to that build's directory,
against one throwaway memcached on a free loopback port. A process times single-key `get` and
`set` and 100-key `get_multi` and `set_multi` (40-byte values): wall time and client CPU
(`time.process_time`) per call, the median of its batches. The report is the median over rounds
per build and the median of the per-round ratios B/A with a 95% confidence interval for that
median (order statistics; no distribution assumed), so a difference can be told from noise (the
machine's other load moves single rounds a lot). Client CPU is the figure to read on a busy
machine: waiting for a CPU counts in wall time, not in process time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from memcached import Memcached

# Runs in the child process, with only the build under test on PYTHONPATH.
CHILD = r"""
import gc, json, statistics, sys, time
import fastmc
address, loops, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mc = fastmc.Client([address])
value = b"v" * 40
keys = ["ab:%d" % i for i in range(100)]
mapping = {k: value for k in keys}
mc.set_multi(mapping)
mc.set("ab:one", value)

def run(fn, n):
    walls, cpus = [], []
    for _ in range(batches):
        gc.disable()
        c0 = time.process_time(); t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter(); c1 = time.process_time()
        gc.enable()
        walls.append((t1 - t0) / n)
        cpus.append((c1 - c0) / n)
    return statistics.median(walls), statistics.median(cpus)

ops = {
    "get": (lambda: mc.get("ab:one"), loops),
    "set": (lambda: mc.set("ab:one", value), loops),
    "get_multi 100": (lambda: mc.get_multi(keys), loops // 10),
    "set_multi 100": (lambda: mc.set_multi(mapping), loops // 10),
}
assert mc.get("ab:one") == value and len(mc.get_multi(keys)) == 100
for fn, n in ops.values():  # warm-up
    for _ in range(n // 10):
        fn()
out = {"file": fastmc._fastmc.__file__}
for name, (fn, n) in ops.items():
    out[name] = run(fn, n)
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("builds", nargs=2, help="NAME=DIR, twice (A then B)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--loops", type=int, default=2000)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.builds]
    server = Memcached(threads=1)
    samples: dict[str, list[dict]] = {name: [] for name, _ in builds}
    try:
        for r in range(-1, args.rounds):  # round -1 warms the server up and is not kept
            order = builds if r % 2 == 0 else builds[::-1]
            for name, path in order:
                env = dict(os.environ, PYTHONPATH=path)
                out = subprocess.run(
                    [args.python, "-c", CHILD, server.address, str(args.loops), str(args.batches)],
                    env=env,
                    cwd="/",
                    capture_output=True,
                    text=True,
                    check=True,
                )
                res = json.loads(out.stdout)
                assert res["file"].startswith(path), (res["file"], path)
                if r >= 0:
                    samples[name].append(res)
    finally:
        server.stop()
    report(builds, samples)
    return 0


def median_ci(xs: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval for the median: the order statistics of ranks
    n/2 - 1.96 sqrt(n)/2 and 1 + n/2 + 1.96 sqrt(n)/2 (1-based, rounded outwards; the normal
    approximation of the binomial)."""
    xs = sorted(xs)
    n = len(xs)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(1, math.floor(n / 2 - half))
    hi = min(n, math.ceil(1 + n / 2 + half))
    return xs[lo - 1], xs[hi - 1]


def report(builds: list[list[str]], samples: dict[str, list[dict]]) -> None:
    (a, _), (b, _) = builds
    ops = [k for k in samples[a][0] if k != "file"]
    print(
        f"{len(samples[a])} rounds; µs per call, median over rounds; ratio {b}/{a} (95% CI of the median)"
    )
    print(f"| operation | {a} wall | {b} wall | ratio | {a} CPU | {b} CPU | ratio |")
    print("|---|---|---|---|---|---|---|")
    for op in ops:
        cells = []
        for i in (0, 1):  # wall, CPU
            xa = [s[op][i] * 1e6 for s in samples[a]]
            xb = [s[op][i] * 1e6 for s in samples[b]]
            ratios = [y / x for x, y in zip(xa, xb)]
            lo, hi = median_ci(ratios)
            cells += [
                f"{statistics.median(xa):.2f}",
                f"{statistics.median(xb):.2f}",
                f"{statistics.median(ratios):.3f} ({lo:.3f}-{hi:.3f})",
            ]
        print(f"| {op} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
