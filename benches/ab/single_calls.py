"""Instructions one single-key call costs the client process, fastmc against pylibmc, counted by
callgrind (load on the machine does not move them): each call is made N and 2N times after a
warm-up, in two runs under valgrind, and the difference is divided by N. The kernel's and
memcached's share is not counted. Also `import` (the whole process's instructions with the
import, minus one that imports nothing) and the resident memory an import adds.

    python benches/ab/single_calls.py [--calls 2000] [--calls-list get_hit,get_miss,...]
                                       [--top 0] [--clients fastmc,pylibmc] [--aio]
                                       [--behaviors '{"hot_keys": 32}']

With `--aio`, the asyncio clients instead (fastmc.aio, aiomcache, emcache): each call awaited
alone in a running event loop, the loop's own work counted with the client's, and fastmc.aio ÷
the best peer. `--behaviors` (JSON) are given to fastmc's clients only: what an opt-in costs.
Prints a table of instructions per call and fastmc ÷ pylibmc; with --top N, fastmc's N most
costly functions per call (their own instructions, not their callees'). Needs valgrind and a
fastmc build importable by this Python (a release build for figures worth quoting: `make
develop-release`), and pylibmc (the venv has it). One memcached on a free port, text protocol,
40-byte values, the garbage collector off.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))
sys.path.insert(0, HERE)
from per_key import costs as per_function  # noqa: E402 (callgrind_annotate's totals, per function)

CALLS = ("get_hit", "get_miss", "set", "delete_miss", "incr", "get_multi_10")
# Not in the default table: a miss of a different key each call (200,000 keys in turn), the
# worst case of hot-key sampling (every sampled key is new to its summary); and the lone
# `noreply` writes (`set_noreply`, `delete_noreply`: fastmc only, pylibmc has no per-call
# `noreply`), which take a path of their own.
EXTRA_CALLS = ("get_tail", "set_noreply", "delete_noreply")
CLIENTS = ("fastmc", "pylibmc")
AIO_CLIENTS = ("fastmc.aio", "aiomcache", "emcache")
VALUE = b"v" * 40


def fastmc_options(client: str) -> dict:
    """The `--behaviors` asked for, for a fastmc client (handed down in the environment)."""
    import json

    given = os.environ.get("SINGLE_CALLS_BEHAVIORS")
    return {"behaviors": json.loads(given)} if given and client.startswith("fastmc") else {}


def child(client: str, call: str, address: str, n: int) -> None:
    """The measured process: a client, a warm-up, then `n` calls of `call`."""
    import gc

    gc.disable()
    mod = __import__(client)
    mc = mod.Client([address], **fastmc_options(client))
    keys = [f"sc:{i}" for i in range(10)]
    mc.set_multi({k: VALUE for k in keys})
    mc.set("sc:n", 1)
    mc.delete("sc:gone")
    tail = iter([f"tail:{i}" for i in range(200_000)])
    calls = {
        "get_tail": lambda: mc.get(next(tail)),
        "get_hit": lambda: mc.get("sc:0"),
        "get_miss": lambda: mc.get("sc:gone"),
        "set": lambda: mc.set("sc:1", VALUE),
        "delete_miss": lambda: mc.delete("sc:gone"),
        "incr": lambda: mc.incr("sc:n"),
        "get_multi_10": lambda: mc.get_multi(keys),
        "set_noreply": lambda: mc.set("sc:1", VALUE, noreply=True),
        "delete_noreply": lambda: mc.delete("sc:gone", noreply=True),
    }
    f = calls[call]
    for _ in range(200):
        f()
    for _ in range(n):
        f()


def child_aio(client: str, call: str, address: str, n: int) -> None:
    """The measured process of an asyncio client: a warm-up, then `n` awaited calls, one at a
    time, in one running loop."""
    import asyncio
    import gc

    gc.disable()
    host, port = address.rsplit(":", 1)
    keys = [b"sc:%d" % i for i in range(10)]

    async def main() -> None:
        if client == "fastmc.aio":
            import fastmc.aio

            mc = fastmc.aio.Client([address], **fastmc_options(client))
            calls = {
                "get_hit": lambda: mc.get(b"sc:0"),
                "get_miss": lambda: mc.get(b"sc:gone"),
                "set": lambda: mc.set(b"sc:1", VALUE),
                "delete_miss": lambda: mc.delete(b"sc:gone"),
                "incr": lambda: mc.incr(b"sc:n"),
                "get_multi_10": lambda: mc.get_multi(keys),
            }
        elif client == "aiomcache":
            import aiomcache

            mc = aiomcache.Client(host, int(port))
            calls = {
                "get_hit": lambda: mc.get(b"sc:0"),
                "get_miss": lambda: mc.get(b"sc:gone"),
                "set": lambda: mc.set(b"sc:1", VALUE),
                "delete_miss": lambda: mc.delete(b"sc:gone"),
                "incr": lambda: mc.incr(b"sc:n"),
                "get_multi_10": lambda: mc.multi_get(*keys),
            }
        else:
            import emcache

            mc = await emcache.create_client([emcache.MemcachedHostAddress(host, int(port))])

            async def delete_miss() -> None:
                with contextlib.suppress(emcache.NotFoundCommandError):  # raised for a miss
                    await mc.delete(b"sc:gone")

            calls = {
                "get_hit": lambda: mc.get(b"sc:0"),
                "get_miss": lambda: mc.get(b"sc:gone"),
                "set": lambda: mc.set(b"sc:1", VALUE),
                "delete_miss": delete_miss,
                "incr": lambda: mc.increment(b"sc:n", 1),
                "get_multi_10": lambda: mc.get_many(keys),
            }
        for k in keys:
            await mc.set(k, VALUE)
        await mc.set(b"sc:n", b"1")
        f = calls[call]
        for _ in range(200):
            await f()
        for _ in range(n):
            await f()

    asyncio.run(main())


def instructions(client: str, call: str, address: str, n: int, out: str) -> int:
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    if call == "import":  # a bare interpreter: this script's own imports would be shared
        cmd += ["-c", f"import {client}" if n else "pass"]
    else:
        cmd += [__file__, "--child", client, call, address, str(n)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return per_function(out)[0]


def per_call(client: str, call: str, address: str, n: int, top: int) -> tuple[float, list]:
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        if call == "import":
            lo, hi = (
                instructions(client, call, address, 0, a),
                instructions(client, call, address, 1, b),
            )
            return float(hi - lo), []
        lo = instructions(client, call, address, n, a)
        hi = instructions(client, call, address, 2 * n, b)
        fns: list = []
        if top:
            (_, fa), (_, fb) = per_function(a), per_function(b)
            diff = {k: (fb.get(k, 0) - fa.get(k, 0)) / n for k in set(fa) | set(fb)}
            fns = sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]
        return (hi - lo) / n, fns


def resident_mib(client: str) -> float:
    """The resident memory `import client` adds to a fresh process."""
    code = (
        "import re\n"
        "def rss(): return int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"
        f"a = rss(); import {client}; print((rss() - a) / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--calls-list", default=",".join((*CALLS, "import")))
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("--aio", action="store_true", help="the asyncio clients instead")
    ap.add_argument("--behaviors", default="", help="JSON behaviors for fastmc's clients")
    a = ap.parse_args()
    if a.behaviors:
        os.environ["SINGLE_CALLS_BEHAVIORS"] = a.behaviors
    if a.aio and a.clients == ",".join(CLIENTS):
        a.clients = ",".join(AIO_CLIENTS)
    if a.aio and "import" in a.calls_list.split(","):
        a.calls_list = ",".join(CALLS)
    from memcached import Memcached

    clients = a.clients.split(",")
    server = Memcached()
    try:
        rows = []
        tops = {}
        for call in a.calls_list.split(","):
            if call not in (*CALLS, *EXTRA_CALLS, "import"):
                sys.exit(f"unknown call {call!r}: one of {', '.join(CALLS)}, import")
            row = {}
            for c in clients:
                ours = c in ("fastmc", "fastmc.aio")
                row[c], fns = per_call(c, call, server.address, a.calls, a.top if ours else 0)
                if fns:
                    tops[call] = fns
            rows.append((call, row))
    finally:
        server.stop()
    ratio = "fastmc.aio ÷ the best peer" if a.aio else "fastmc ÷ pylibmc"
    head = "| call | " + " | ".join(clients) + f" | {ratio} |"
    print(head + "\n|" + "---|" * (len(clients) + 2))
    for call, row in rows:
        cells = " | ".join(f"{row[c]:,.0f}" for c in clients)
        if a.aio:
            peers = [v for c, v in row.items() if c != "fastmc.aio"]
            r = row["fastmc.aio"] / min(peers) if "fastmc.aio" in row and peers else None
        else:
            r = row["fastmc"] / row["pylibmc"] if {"fastmc", "pylibmc"} <= set(row) else None
        print(f"| {call} | {cells} | {'%.2f' % r if r else 'n/a'} |")
    if "import" in a.calls_list.split(","):
        mem = {c: resident_mib(c) for c in clients}
        print(
            "\nresident memory an import adds (MiB): "
            + ", ".join(f"{c} {v:.1f}" for c, v in mem.items())
        )
    for call, fns in tops.items():
        print(f"\nfastmc {call}: the most costly functions, instructions per call")
        for fn, ir in fns:
            print(f"  {ir:8.1f}  {fn[:110]}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run = child_aio if sys.argv[2] in AIO_CLIENTS else child
        run(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
