"""The command line: arguments, setup (fastmc, servers, pinning, the environment), the run of
the scenarios, the report, and the exit status."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import os
import platform
import random
import signal
import sys
import traceback
from typing import Any

import mcbench

from .columns import PEERS, load_fastmc
from .context import Ctx
from .files import write_files
from .measure import perf_counter, pinned
from .scenarios import SCENARIOS, UNPINNED, large_memory, memory
from .servers import ITEM_SIZE_MAX, server_info, start_memcached
from .settings import BANNER, FASTMC_MODULE_ENV, VALUE_SIZE, Settings

# Exit status
OK, NO_FASTMC, VERIFICATION_FAILED, TARGET_FAILED, INTERRUPTED = 0, 1, 2, 3, 130


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=(mcbench.__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scenarios: " + ", ".join(SCENARIOS),
    )
    ap.add_argument(
        "--servers",
        help="host:port,... of running memcached servers (default: "
        "start throwaway servers; three-server scenarios need three)",
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds, smaller bulk load")
    ap.add_argument("--scenarios", help="comma-separated subset (default: all)")
    ap.add_argument("--out", default="results", help="folder for the Markdown and the chart")
    ap.add_argument("--strict", action="store_true", help="exit 3 when a target fails")
    ap.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="the peers' columns of the single-, multi- and threads-style tables, comma-separated "
        "(default: %(default)s; release/pypy_bench.py names those that run on PyPy)",
    )
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)  # internal: scenario memory
    ap.add_argument("--memory-rounds", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--memory-keys", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--memory-tag", default="m", help=argparse.SUPPRESS)
    ap.add_argument("--large-child", help=argparse.SUPPRESS)  # internal: scenario large
    ap.add_argument(
        "--pin",
        choices=("auto", "off"),
        default="auto",
        help="auto (default): when bench.py started the servers, pin this process "
        "and the servers to one CPU for every scenario but threads and memory; off: "
        "let the scheduler place them",
    )
    return ap


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def wanted_scenarios(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list:
    unknown_peers = set(args.peers.split(",")) - set(PEERS) - {""}
    if unknown_peers:
        ap.error(f"unknown peer(s) {sorted(unknown_peers)}; choose from {', '.join(PEERS)}")
    if not args.scenarios:
        return list(SCENARIOS)
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    return wanted


def import_fastmc() -> tuple:
    """load_fastmc, saying loudly when the column will be missing or is a stand-in."""
    mod, modname, err = load_fastmc()
    if mod is None:
        print(
            f"\n{BANNER}\nWARNING: `import {modname}` failed: {err}\nThe fastmc column will be "
            f"MISSING; the peers are still measured, and the run exits non-zero.\n{BANNER}\n",
            file=sys.stderr,
            flush=True,
        )
    elif modname != "fastmc":
        print(
            f"\nNOTE: the fastmc column is a STAND-IN: module {modname!r} ({FASTMC_MODULE_ENV}).\n",
            file=sys.stderr,
            flush=True,
        )
    return mod, modname, err


def servers(args: argparse.Namespace, wanted: list) -> tuple:
    """(one-server list, three-server list or None, the processes started here)."""
    if args.servers:
        addrs = [a.strip() for a in args.servers.split(",") if a.strip()]
        return addrs[:1], (addrs[:3] if len(addrs) >= 3 else None), []
    need3 = "multi" in wanted or "aio" in wanted
    procs = [start_memcached() for _ in range(4 if need3 else 1)]
    servers3 = [p.address for p in procs[1:]] if need3 else None
    return [procs[0].address], servers3, procs


def setup(args: argparse.Namespace, wanted: list) -> tuple[Ctx, dict]:
    """The run context (servers started, pinning decided) and the environment it records."""
    mod, modname, err = import_fastmc()
    servers1, servers3, procs = servers(args, wanted)
    infos = [server_info(a) for a in servers1 + (servers3 or [])]
    ctx = Ctx(
        Settings.make(args.quick),
        servers1,
        servers3,
        all(i["meta"] for i in infos),
        mod,
        modname,
        err,
        run_id=f"{random.randrange(16**3):03x}",
        out=args.out,
        limit_maxbytes=infos[0].get("limit_maxbytes"),
        peers=tuple(p.strip() for p in args.peers.split(",") if p.strip()),
    )
    if procs and args.pin == "auto" and hasattr(os, "sched_setaffinity"):
        ctx.pin_pids = [p.proc.pid for p in procs]
    os.makedirs(args.out, exist_ok=True)
    env = environment(ctx, bool(procs), infos)
    print("environment:\n" + "\n".join(f"  {k}: {v}" for k, v in env.items()), flush=True)
    return ctx, env


def run(ctx: Ctx, wanted: list) -> bool:
    """Every scenario asked for, pinned unless UNPINNED; False when interrupted (Ctrl-C)."""
    try:
        for name in wanted:
            t0 = perf_counter()
            print(f"\n=== scenario {name} ===", flush=True)
            try:
                pin = (
                    pinned(ctx.pin_pids) if name not in UNPINNED else contextlib.nullcontext(False)
                )
                with pin as ctx.pinned_now:
                    SCENARIOS[name](ctx)
            except Exception as e:  # one broken scenario must not hide the rest
                traceback.print_exc()
                ctx.failures.add(name, "bench.py", f"scenario crashed: {e!r}")
            print(f"=== {name}: {perf_counter() - t0:.1f} s ===", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: writing what was measured so far", file=sys.stderr)
        return False
    return True


def finish(ctx: Ctx, env: dict, wanted: list, elapsed: float) -> None:
    """Write the Markdown and the JSON; print the summary."""
    env["runtime"] = f"{elapsed:.1f} s"
    md_path, summ = write_files(ctx, env)
    print("\n## Summary: targets\n\n" + summ)
    print(
        f"\nwrote {md_path} (+ .json{', multi_speedup.png' if 'speedup' in wanted else ''}); "
        f"runtime {elapsed:.1f} s"
    )


def exit_status(ctx: Ctx, args: argparse.Namespace, completed: bool) -> int:
    code = OK
    if args.strict and any(t.ok is False for t in ctx.report.outcomes):
        code = TARGET_FAILED
    if ctx.failures.items:
        print(
            f"\n{BANNER}\n{len(ctx.failures.items)} VERIFICATION FAILURE(S):\n"
            + "\n".join(f"  - {m}" for m in ctx.failures.items)
            + f"\n{BANNER}",
            file=sys.stderr,
        )
        code = VERIFICATION_FAILED
    if not ctx.has_fastmc:
        print(
            f"\n{BANNER}\nfastmc WAS NOT MEASURED: `import {ctx.fastmc_name}` failed: "
            f"{ctx.fastmc_error}\n{BANNER}",
            file=sys.stderr,
        )
        code = code or NO_FASTMC
    if not completed:
        code = code or INTERRUPTED
    return code


def main(argv: list | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.memory_child:
        return memory.child(
            args.memory_child, args.servers, args.memory_rounds, args.memory_keys, args.memory_tag
        )
    if args.large_child:
        return large_memory.child(args.large_child)
    signal.signal(signal.SIGTERM, _sigterm)
    started = perf_counter()
    wanted = wanted_scenarios(ap, args)
    ctx, env = setup(args, wanted)
    completed = run(ctx, wanted)
    finish(ctx, env, wanted, perf_counter() - started)
    return exit_status(ctx, args, completed)


def pkg_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    return ""


def _fastmc_version(ctx: Ctx) -> str:
    if not ctx.has_fastmc:
        return "not importable"
    if ctx.standin:
        return f"STAND-IN {ctx.fastmc_name} ({getattr(ctx.fastmc_mod, '__file__', '?')})"
    return getattr(ctx.fastmc_mod, "__version__", None) or pkg_version(ctx.fastmc_name)


def environment(ctx: Ctx, spawned: bool, infos: list) -> dict:
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": ctx.mode,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "python": sys.version.split()[0] + " " + platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "memcached": "; ".join(
            f"{i['address']} {i['version']} (threads={i.get('threads')}, "
            f"memory={i.get('limit_maxbytes', 0) >> 20} MiB)"
            for i in infos
        ),
        "servers": "started by bench.py" if spawned else "given with --servers",
        "pinning": (
            "client and servers on one CPU, except threads and memory" if ctx.pin_pids else "off"
        ),
        "fastmc": _fastmc_version(ctx),
        "pylibmc": pkg_version("pylibmc"),
        "pymemcache": pkg_version("pymemcache"),
        "libmc": pkg_version("libmc"),
        "python-memcached": pkg_version("python-memcached"),
        "matplotlib": pkg_version("matplotlib"),
        "value size": f"{VALUE_SIZE} bytes",
        "servers' item size limit": (
            f"-I {ITEM_SIZE_MAX}"
            if spawned
            else "as given (`large` needs 2 MiB for its 1 MiB rows)"
        ),
    }
