"""Interleaved A/B of two fastmc builds (for the metrics overhead): single get/set loops and
100-key get_multi/set_multi, each build in its own child process, alternating, medians of the
rounds. Usage: python metrics_ab.py DIR_A DIR_B host:port [rounds]  (each DIR holds an
installed fastmc, e.g. from `pip install --target DIR fastmc-*.whl`)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time, fastmc
mc = fastmc.Client([sys.argv[1]])
keys = ["ab%d" % i for i in range(100)]
d = {k: b"v" * 40 for k in keys}
mc.set_multi(d)
out = {}
def timed(name, n, fn):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    out[name] = (time.perf_counter() - t) / n * 1e6
timed("get", 3000, lambda: mc.get("ab1"))
timed("set", 3000, lambda: mc.set("ab1", b"v" * 40))
timed("get_multi 100", 800, lambda: mc.get_multi(keys))
timed("set_multi 100", 800, lambda: mc.set_multi(d))
print(json.dumps(out))
"""


def run(path: str, server: str) -> dict:
    env = dict(os.environ, PYTHONPATH=path)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, server], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(r.stdout)


def main() -> None:
    a, b, server = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 11
    got: dict = {"A": [], "B": []}
    for r in range(rounds):
        order = [("A", a), ("B", b)] if r % 2 == 0 else [("B", b), ("A", a)]
        for tag, path in order:
            got[tag].append(run(path, server))
    print(f"{'operation':<16}{'A (µs)':>10}{'B (µs)':>10}{'B ÷ A':>8}")
    for op in got["A"][0]:
        ma = statistics.median(x[op] for x in got["A"])
        mb = statistics.median(x[op] for x in got["B"])
        print(f"{op:<16}{ma:>10.2f}{mb:>10.2f}{mb / ma:>8.3f}")


if __name__ == "__main__":
    main()
