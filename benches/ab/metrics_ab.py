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

from loops import LOOPS

CHILD = (
    r"""
import json, sys, time, fastmc
mc = fastmc.Client([sys.argv[1]])"""
    + LOOPS
    + r"""timed("set_multi 100", 800, lambda: mc.set_multi(d))
print(json.dumps(out))
"""
)


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
