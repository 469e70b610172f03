"""large (memory): how much a client's process grows at the peak of reading one large value, with
get and inside a 100-key get_multi, as a multiple of the value's size. Each figure comes from a
fresh process (`bench.py --large-child`) whose peak is reset (`/proc/self/clear_refs`) after a
warm-up, so it counts what this one read allocated and touched (its VmHWM, the process's own
peak, less its resident size before the call); it includes the value returned. glibc's malloc
is told to map every block of 64 KiB or more by itself (`MMAP_THRESHOLD`)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

from ..columns import PEER_MAKERS, PEERS, load_fastmc, make_fastmc
from ..context import Ctx
from ..report import md_table
from ..servers import item_size_max, split_addr
from ..settings import BENCH_SCRIPT, VALUE_SIZE

KB, MB = 1000, 1 << 20
# (op, value size, how many of the 100 keys hold a value of that size; the others 40 bytes).
# One 100 KB value is under what the kernel's resident-memory counters resolve (they are
# summed per CPU in batches of up to 32 pages each), so 100 KB is measured as a batch of 100.
CASES = (
    ("get", MB, 1),
    ("get", 16 * MB, 1),
    ("get_multi", MB, 1),
    ("get_multi", 16 * MB, 1),
    ("get_multi", 100 * KB, 100),
)
RESULT = "LARGE-RESULT "  # the child's line with its result
# In the child, glibc's malloc maps every block from this size on by itself (a fixed threshold,
# which also turns off its adjustment upwards): such a buffer's pages count when touched and
# are given back when it is freed, so a figure does not depend on what free memory the heap
# happened to hold (a 100 KB read measured 0.0 to 3.3× its size without it).
MMAP_THRESHOLD = 64 * 1024


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


def child(arg: str) -> int:
    """Entry point of the fresh process (`bench.py --large-child JSON`): one client reads the
    large value once (get, or get_multi of it and 99 other keys); prints one RESULT line."""
    a = json.loads(arg)
    out: dict = {"grew": None, "error": None}
    try:
        if a["client"] == "fastmc":
            mod, modname, err = load_fastmc()
            if mod is None:
                raise RuntimeError(f"import failed: {err}")
            c = make_fastmc(mod, modname, [a["server"]], "x")
        else:
            c = PEER_MAKERS[a["client"]]([a["server"]], "x")
        keys = [a["key"]] + [f"{a['key']}:{i}" for i in range(1, 100)]
        c.get(f"{a['key']}:warm")  # connected, code paths warm
        c.get_multi([f"{a['key']}:warm", f"{a['key']}:cold"])
        gc.collect()
        gc.disable()
        base = _status("VmRSS")
        _reset_peak()
        got = {keys[0]: c.get(keys[0])} if a["op"] == "get" else c.get_multi(keys)
        out["grew"] = _status("VmHWM") - base
        sizes = [len(v) if isinstance(v, bytes) else -1 for v in got.values()]
        if sizes.count(a["size"]) != a["count"]:
            out["error"] = f"read {sizes.count(a['size'])} values of {a['size']} bytes"
    except Exception as e:  # reported to the parent
        out["error"] = repr(e)
    print(RESULT + json.dumps(out), flush=True)
    return 0


def _store(server: str, key: str, size: int, count: int) -> None:
    """The 100 values, `count` of `size` bytes and the others 40 (flags 0: plain bytes for every
    client), by a raw socket from this process: nothing of the writing is in the child's heap."""
    import socket

    keys = [key] + [f"{key}:{i}" for i in range(1, 100)]
    with socket.create_connection(split_addr(server), timeout=30) as s:
        for i, k in enumerate(keys):
            n = size if i < count else VALUE_SIZE
            s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), n, b"v" * n))
        want, got = b"STORED\r\n" * 100, b""
        while len(got) < len(want):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        if got != want:
            raise RuntimeError(f"the server refused a {size}-byte value: {got[:60]!r}")


def _measure(ctx: Ctx, client: str, case: tuple, key: str) -> float:
    op, size, count = case
    arg = {"client": client, "op": op, "size": size, "count": count, "server": ctx.servers1[0]}
    arg["key"] = key
    cmd = [sys.executable, BENCH_SCRIPT, "--large-child", json.dumps(arg)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)), None)
    if line is None:
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr[-300:]}")
    out = json.loads(line.split(" ", 1)[1])
    if out["error"]:
        raise RuntimeError(out["error"])
    return out["grew"] / (size * count)


def run(ctx: Ctx) -> None:
    if not os.path.exists("/proc/self/clear_refs"):
        ctx.report.emit("Large values: peak memory per read", "Not measured: Linux only.")
        return
    biggest = item_size_max(ctx.servers1[0]) or 0
    cases = [c for c in CASES if c[1] + 1024 <= biggest]
    names = (["fastmc"] if ctx.has_fastmc else []) + list(PEERS[:1] if ctx.s.quick else PEERS)
    res: dict = {}
    for i, case in enumerate(cases):
        key = f"{ctx.run_id}:big{i}"
        _store(ctx.servers1[0], key, case[1], case[2])
        for name in names:
            try:
                res[(case, name)] = _measure(ctx, name, case, key)
            except Exception as e:
                ctx.failures.add("large memory", name, f"{case_label(case)}: {e}")
    report(ctx, res, cases, names)


def case_label(case: tuple) -> str:
    op, size, count = case
    size_label = f"{size // MB} MiB" if size >= MB else f"{size // KB} KB"
    if count > 1:
        return f"{op} of {count} × {size_label} (per value)"
    return f"{op} of 1 × {size_label}" + (" + 99 × 40 B" if op == "get_multi" else "")


def report(ctx: Ctx, res: dict, cases: list, names: list) -> None:
    rows, data = [], {}
    for case in cases:
        label = case_label(case)
        cells = []
        for name in names:
            x = res.get((case, name))
            data[f"{label} {name}"] = x
            cells.append("n/a" if x is None else f"{x:.2f}")
        rows.append([label, *cells])
        if "fastmc" in names:
            x = res.get((case, "fastmc"))
            measured = "n/a" if x is None else f"×{x:.2f}"
            ctx.report.judge("large_memory", measured, x, row=label)
    ctx.report.data["large_memory"] = data
    missing = "" if len(cases) == len(CASES) else " (the server's item size limit left some out)"
    peers = " (--quick: pylibmc only among the peers)" if ctx.s.quick else ""
    ctx.report.emit(
        "Large values: peak memory per read (× the value's size)",
        "A fresh process per figure: plain bytes values (flags 0) read once, by `get` or "
        "by a `get_multi` of 100 keys, after a warm-up; the growth of the process's peak "
        "resident memory (VmHWM, reset just before the call) over its resident memory before "
        "it, ÷ the bytes of the large values read. It includes the values returned (1.00): "
        "what a client holds at once beyond them is the rest. One 100 KB value is below what "
        "the kernel's resident-memory counters resolve, so 100 KB is read as a batch of 100. "
        "In these processes glibc's malloc maps every block of 64 KiB or more on its own "
        "(`MALLOC_MMAP_THRESHOLD_=65536`), so that such a buffer counts whatever free memory "
        "the heap held, and is given back when freed."
        + missing
        + peers
        + "\n\n"
        + md_table(["read", *names], rows),
    )
