"""memory: resident memory across repeated rounds of mixed operations, in a fresh process per
client, so the RSS is the client's own and not what earlier scenarios left in the heap."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from ..columns import PEER_MAKERS, PEERS, Column, load_fastmc, make_fastmc
from ..context import Ctx
from ..measure import read_rss
from ..report import md_table
from ..settings import BENCH_SCRIPT
from ..verify import Failures, diff, values_for

RESULT = "MEMORY-RESULT "  # the child's line with its results


def workload(c: Column, rounds: int, n: int, failures: Failures) -> list:
    """Repeated rounds of mixed operations; RSS after each (garbage collected) round."""
    check = failures.check
    rss = []
    for r in range(rounds):
        keys = c.keys("r", n)
        mapping = dict(zip(keys, values_for(keys, f"|r{r}")))
        check("memory", c, c.stored_ok(c.set_multi(mapping), n), "set_multi failed")
        got = c.get_multi(keys)
        check("memory", c, got == mapping, diff(got, mapping))
        misses = c.get_multi(c.keys("x", 100))
        check("memory", c, not misses, f"{len(misses)} unexpected hits")
        items = list(mapping.items())[:500]
        check("memory", c, c.loop_get(items) == 0, "wrong single get")
        check("memory", c, c.loop_set(items) == 0, "single set failed")
        check("memory", c, c.get(c.keys("x", 1)[0]) is None, "hit on a missing key")
        c.set_counter(f"{c.tag}:rc")
        c.loop_incr(f"{c.tag}:rc", 500)
        check("memory", c, c.read_counter(f"{c.tag}:rc") == 500, "wrong counter")
        check("memory", c, c.deleted_ok(c.delete_multi(keys), n), "delete_multi failed")
        del got, misses, items, mapping, keys
        gc.collect()
        rss.append(read_rss())
    return rss


def child(name: str, server: str, rounds: int, n: int, tag: str) -> int:
    """Entry point of the fresh process that measures one client (`bench.py --memory-child`):
    prints one RESULT line with the RSS after each round and the failures."""
    failures = Failures()
    out: dict = {"rss": None}
    try:
        if name == "fastmc":
            mod, modname, err = load_fastmc()
            if mod is None:
                raise RuntimeError(f"import failed: {err}")
            c = make_fastmc(mod, modname, [server], tag)
        else:
            c = PEER_MAKERS[name]([server], tag)
        out["rss"] = workload(c, rounds, n, failures)
    except Exception as e:  # reported to the parent
        failures.items.append(f"memory: {name}: raised {e!r}")
    out["failures"] = failures.items
    print(RESULT + json.dumps(out), flush=True)
    return 0


def _run_child(ctx: Ctx, name: str, i: int) -> dict:
    cmd = [
        sys.executable,
        BENCH_SCRIPT,
        "--memory-child",
        name,
        "--servers",
        ctx.servers1[0],
        "--memory-rounds",
        str(ctx.s.memory_rounds),
        "--memory-keys",
        str(ctx.s.memory_keys),
        "--memory-tag",
        f"{ctx.run_id}m{i}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)), None)
    if line is None:
        raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr[-500:]}")
    return json.loads(line.split(" ", 1)[1])


def run(ctx: Ctx) -> None:
    R = ctx.s.memory_rounds
    names = (["fastmc"] if ctx.has_fastmc else []) + list(PEERS)
    rows, res = [], {}
    warm = min(2, R - 1)
    for i, name in enumerate(names):
        label = name
        if name == "fastmc" and ctx.standin:
            label = f"fastmc [stand-in: {ctx.fastmc_name}]"
        try:
            out = _run_child(ctx, name, i)
        except Exception as e:
            ctx.failures.add("memory", label, f"child process failed: {e!r}")
            rows.append([label, "failed", "", "", ""])
            continue
        for msg in out["failures"]:
            ctx.failures.add("memory (child)", label, msg)
        rss = out["rss"]
        if not rss:
            rows.append([label, "failed", "", "", ""])
            continue
        growth = rss[-1] - rss[warm]  # from after the warm-up rounds to after the last
        res[label] = {"rss": rss, "growth_bytes": growth}
        rows.append(
            [
                label,
                f"{rss[0] / 2**20:.1f}",
                f"{rss[warm] / 2**20:.1f}",
                f"{rss[-1] / 2**20:.1f}",
                f"{growth / 2**10:+,.0f}",
            ]
        )
        if name == "fastmc":
            ctx.report.judge(
                "memory_growth",
                f"{growth / 2**10:+,.0f} KiB",
                growth,
                also=not out["failures"],
                rounds=R,
                after=warm + 1,
            )
    if not ctx.has_fastmc:
        ctx.report.target("memory", "resident memory does not grow", "fastmc missing", False)
    ctx.report.data["memory"] = res
    report(ctx, rows, warm)


def report(ctx: Ctx, rows: list, warm: int) -> None:
    R, n = ctx.s.memory_rounds, ctx.s.memory_keys
    headers = [
        "client",
        "RSS after round 1 (MiB)",
        f"after round {warm + 1} (MiB)",
        f"after round {R} (MiB)",
        "growth (KiB)",
    ]
    ctx.report.emit(
        "Resident memory across repeated rounds",
        f"A fresh Python process per client, {R} rounds each: set_multi/get_multi/"
        f"delete_multi of {n:,} keys, get_multi of 100 missing keys, 500 single get and "
        f"set, a miss, 500 incr (all checked); gc.collect() then the process's RSS after "
        f"each round. Growth = RSS after the last round − after round {warm + 1}.\n\n"
        + md_table(headers, rows),
    )
