"""`benches/bench_net.py`: the comparison over a simulated datacenter network (`make bench-net`),
and the loss-and-reordering soak (`make bench-net-soak`). Needs root (namespaces, iptables)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import sys

from ..cli import INTERRUPTED, OK, _sigterm, environment, exit_status, import_fastmc
from ..files import markdown, summary
from ..measure import perf_counter
from ..report import fmt_num, md_table
from ..servers import server_info
from ..settings import REPO_DIR, Settings
from . import calibrate, soak
from .netns import SERVER_IP, Net, clean_stale, setns
from .scenarios import NET_PEERS, NetCtx, draw, run_all

HOLDER = os.path.join(REPO_DIR, "target", "netdelay", "release", "netdelay")
ECHO = f"{SERVER_IP}:7"
MECHANISM = {
    "netdelay": "sch_netem is not in this kernel, so the delay is made by netdelay "
    "(benches/netdelay): iptables sends every packet crossing the veth pair, both ways, to "
    "NFQUEUE, and netdelay holds each one for half the round trip before its verdict (accept, "
    "or drop for loss); a reordered packet is held longer, so later packets overtake it",
    "netem": "sch_netem on both ends of the veth pair, half the round trip each way",
}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rtts", default="0.2,1", help="round-trip times in ms (default 0.2,1)")
    ap.add_argument("--servers", type=int, default=10, help="memcached servers (default 10)")
    ap.add_argument("--peers", default=",".join(NET_PEERS), help="peers (default: %(default)s)")
    ap.add_argument("--out", default="results", help="folder for bench-net.md/.json, net.png")
    ap.add_argument("--strict", action="store_true", help="exit 3 when a target fails")
    ap.add_argument(
        "--delay",
        choices=("auto", "netem", "netdelay"),
        default="auto",
        help="what makes the delay: netem where the kernel has it (auto), or netdelay",
    )
    ap.add_argument("--holder", default=HOLDER, help="the netdelay binary")
    ap.add_argument(
        "--slow-start-after-idle",
        action="store_true",
        help="keep Linux's default, net.ipv4.tcp_slow_start_after_idle=1 (default: 0)",
    )
    ap.add_argument("--pings", type=int, default=1000, help="calibration round trips per step")
    ap.add_argument("--soak", action="store_true", help="run the loss and reordering soak")
    soak.add_arguments(ap)
    ap.add_argument("--echo-server", help=argparse.SUPPRESS)  # internal: calibration's peer
    return ap


def main(argv: list | None = None) -> int:
    args = parser().parse_args(argv)
    if args.echo_server:
        calibrate.echo_server(args.echo_server)
        return OK
    if os.geteuid() != 0:
        print("bench_net.py needs root (network namespaces, iptables)", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _sigterm)
    for ns in clean_stale():
        print(f"removed namespace {ns}, left by an earlier run", flush=True)
    net = Net(args.holder, args.slow_start_after_idle)
    try:
        net.up()
        # Whole offloaded writes through the holder (one verdict each), except where a loss
        # must hit single packets.
        holder = net.start_delay(args.delay, delay_us=0, gso=0 if args.soak else 1)
        print(f"delay: {holder.name}", flush=True)
        count = args.soak_servers if args.soak else args.servers
        servers = net.start_memcached(count)
        script = os.path.join(REPO_DIR, "benches", "bench_net.py")
        net.spawn(net.server_ns, [sys.executable, script, "--echo-server", ECHO])
        setns(net.client_ns)  # from here on this process's sockets are the client's
        for addr in [*servers, ECHO]:
            net.wait_listening(addr)
        if args.soak:
            return soak.run(args, net, holder, servers, ECHO)
        return bench(args, net, holder, servers)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        net.down()


def _calib_rows(name: str, delay: float, m: dict) -> list:
    return [name, fmt_num(delay)] + [
        fmt_num(m[k]) for k in ("median_us", "p10_us", "p90_us", "p99_us", "min_us")
    ]


def bench(args: argparse.Namespace, net: Net, holder: object, servers: list) -> int:
    started = perf_counter()
    mod, modname, err = import_fastmc()
    infos = [server_info(a) for a in servers]
    s = dataclasses.replace(
        Settings.make(True), single_ops=200, single_rounds=5, thread_ops=500, thread_rounds=3
    )
    ctx = NetCtx(
        s,
        servers[:1],
        servers[:3],
        all(i["meta"] for i in infos),
        mod,
        modname,
        err,
        run_id=f"{random.randrange(16**3):03x}",
        out=args.out,
        peers=tuple(p for p in args.peers.split(",") if p),
        servers10=servers[:10],
    )
    os.makedirs(args.out, exist_ok=True)
    base = calibrate.ping_pong(ECHO, args.pings)
    calib: dict = {"baseline": base}
    results: dict = {}
    completed = True
    try:
        for rtt_ms in (float(x) for x in args.rtts.split(",")):
            label = f"RTT {rtt_ms:g} ms"
            print(f"\n=== {label} ===", flush=True)
            c = calibrate.calibrate(holder, ECHO, rtt_ms * 1000, args.pings)
            calib[label] = c
            t0 = perf_counter()
            at = len(ctx.report.sections)
            results[label] = run_all(ctx, label, c["final"]["median_us"])
            c["after"] = calibrate.ping_pong(ECHO, args.pings // 4)
            _emit_calibration(ctx, label, base, c)
            ctx.report.sections.insert(at, ctx.report.sections.pop())  # before the run's tables
            print(f"=== {label}: {perf_counter() - t0:.1f} s ===", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: writing what was measured so far", file=sys.stderr)
        completed = False
    ctx.report.data["calibration"] = calib
    env = environment(ctx, True, infos)
    env["servers"] = f"{len(servers)} memcached in the server namespace, {SERVER_IP} only"
    env["pinning"] = "off (client, servers and netdelay share the machine's CPUs)"
    env["network"] = MECHANISM[holder.name]  # type: ignore[attr-defined]
    env["tcp"] = _tcp_settings(net)
    env["holder stats"] = str(holder.stats())  # type: ignore[attr-defined]
    env["runtime"] = f"{perf_counter() - started:.1f} s"
    summ = summary(ctx)
    md_path = os.path.join(args.out, "bench-net.md")
    with open(md_path, "w") as f:
        f.write(markdown(ctx, env, summ))
    data = dict(ctx.report.data, environment=env)
    data["targets"] = [t.__dict__ for t in ctx.report.outcomes]
    data["failures"] = ctx.failures.items
    with open(os.path.join(args.out, "bench-net.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    draw(ctx, results, os.path.join(args.out, "net.png"))
    print("\n## Summary: targets\n\n" + summ)
    print(f"\nwrote {md_path} (+ .json, net.png)")
    return exit_status(ctx, args, completed)


def _tcp_settings(net: Net) -> str:
    """The TCP settings of the client namespace that shape a batch's round trips."""
    keys = ("tcp_congestion_control", "tcp_slow_start_after_idle")
    out = []
    for k in keys:
        with open(f"/proc/sys/net/ipv4/{k}") as f:  # this process is in the client namespace
            out.append(f"{k}={f.read().strip()}")
    return ", ".join(out) + ", MTU 1500 (veth)"


def _emit_calibration(ctx: NetCtx, label: str, base: dict, c: dict) -> None:
    headers = ["", "delay each way (µs)", "median", "p10", "p90", "p99", "min"]
    rows = [
        _calib_rows("no delay (the path alone)", 0, base),
        _calib_rows("half the RTT each way", c["first_delay_us"], c["first"]),
        _calib_rows("corrected (used for the run)", c["delay_us"], c["final"]),
        _calib_rows("after the run", c["delay_us"], c["after"]),
    ]
    ctx.report.emit(
        f"{label}: calibration (raw TCP ping-pong, µs per round trip)",
        f"One 40-byte message echoed back, {c['final']['count']:,} round trips per step (a "
        "quarter as many after the run), one at a time, through the same veth pair and holder "
        "as the clients. The run uses the corrected delay, so that the raw ping-pong's median is "
        f"the nominal RTT; the threads target uses that median ({c['final']['median_us']:.0f} "
        "µs). Steps (delay each way → median, µs): "
        + ", ".join(f"{d:.0f} → {m:.0f}" for d, m in c["steps"])
        + ("" if c["converged"] else " — **did not converge to within 5%: the machine was busy**")
        + ".\n\n"
        + md_table(headers, rows),
    )
