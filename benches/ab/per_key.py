"""Instructions per key that fastmc's own process spends in one multi-key call, counted by
callgrind (load on the machine does not move them): the call is repeated R and 2R times after a
warm-up (with the garbage collector off, as bench.py times them), in two runs under valgrind, and the difference is divided by R × keys. The kernel's and
memcached's share is not counted. Prints the whole process's figure and the functions that cost
the most per key (their own instructions, not their callees').

    python benches/ab/per_key.py [--keys 1000] [--reps 5] [--ops get_multi,set_multi,...]

Needs valgrind and a fastmc build importable by this Python (a release build for figures worth
quoting). Ops: get_multi (every key a hit), set_multi, delete_multi (every key missing, so every
key is answered), delete_multi_hit (each rep sets the keys first; set_multi's own figure is
subtracted).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))

OPS = ("get_multi", "set_multi", "delete_multi", "delete_multi_hit")


def child(op: str, address: str, n: int, reps: int) -> None:
    """The measured process: warm up, then `reps` calls of `op` on `n` keys of 40-byte values."""
    import gc

    import fastmc

    gc.disable()  # as bench.py times each call
    mc = fastmc.Client([address])
    keys = [f"pk:{op}:{i:06d}" for i in range(n)]
    mapping = {k: b"v" * 40 for k in keys}
    calls = {
        "get_multi": lambda: mc.get_multi(keys),
        "set_multi": lambda: mc.set_multi(mapping),
        "delete_multi": lambda: mc.delete_multi(keys),
        "delete_multi_hit": lambda: (mc.set_multi(mapping), mc.delete_multi(keys)),
    }
    call = calls[op]
    if op == "get_multi":
        mc.set_multi(mapping)
    else:
        mc.delete_multi(keys)
    for _ in range(3):
        call()
    for _ in range(reps):
        call()


def callgrind(op: str, address: str, n: int, reps: int, out: str) -> None:
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    cmd += [__file__, "--child", op, address, str(n), str(reps)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict collisions in every run
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def costs(path: str) -> tuple[int, dict[str, int]]:
    """The whole process's instructions, and each function's own."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    total = 0
    per_fn: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*?)\s*$", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        name = m.group(2)
        if "PROGRAM TOTALS" in name:
            total = ir
        elif ":" in name:
            fn = name.split(":", 1)[1].split(" [", 1)[0]
            per_fn[fn] = per_fn.get(fn, 0) + ir
    return total, per_fn


def measure(op: str, address: str, n: int, reps: int) -> tuple[float, dict[str, float]]:
    with tempfile.TemporaryDirectory() as d:
        runs = []
        for r in (reps, 2 * reps):
            out = os.path.join(d, f"cg.{r}")
            callgrind(op, address, n, r, out)
            runs.append(costs(out))
    (t1, f1), (t2, f2) = runs
    keys = reps * n
    per_fn = {fn: (f2.get(fn, 0) - f1.get(fn, 0)) / keys for fn in set(f1) | set(f2)}
    return (t2 - t1) / keys, per_fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ops", default="get_multi,set_multi,delete_multi")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    from memcached import Memcached

    server = Memcached(memory_mb=256)
    try:
        results = {}
        for op in a.ops.split(","):
            if op not in OPS:
                sys.exit(f"unknown op {op!r}: one of {', '.join(OPS)}")
            results[op] = measure(op, server.address, a.keys, a.reps)
        if "delete_multi_hit" in results:
            base = results.get("set_multi") or measure("set_multi", server.address, a.keys, a.reps)
            t, f = results["delete_multi_hit"]
            bt, bf = base
            results["delete_multi_hit"] = (t - bt, {k: v - bf.get(k, 0.0) for k, v in f.items()})
        for op, (total, per_fn) in results.items():
            print(f"\n{op}, {a.keys:,} keys: {total:,.0f} instructions per key")
            top = sorted(per_fn.items(), key=lambda kv: -abs(kv[1]))[: a.top]
            for fn, ir in top:
                print(f"  {ir:8.1f}  {fn[:110]}")
    finally:
        server.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
