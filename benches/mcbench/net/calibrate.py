"""Calibration: a raw TCP ping-pong through the simulated link, timed.

A tiny echo server runs in the server namespace (`bench_net.py --echo-server host:port`); the
client sends one 40-byte message and waits for it to come back, `count` times, one at a time. The
median of those round trips is the network's RTT as a raw socket sees it: what the holder adds,
plus the veth pair, the two TCP stacks, the holder's own wake-ups and the echo process's.
"""

from __future__ import annotations

import socket
import statistics
import sys
import time
from typing import Any

MESSAGE = b"p" * 40


def echo_server(addr: str) -> None:
    """Serve forever: echo every byte back, one connection at a time (the calibration's peer)."""
    host, _, port = addr.rpartition(":")
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, int(port)))
    srv.listen(8)
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(data)


def ping_pong(addr: str, count: int, warmup: int = 50) -> dict:
    """Round trips of one 40-byte message, in µs: median, p10, p90, p99, min."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for i in range(warmup + count):
            t0 = time.perf_counter()
            s.sendall(MESSAGE)
            got = 0
            while got < len(MESSAGE):
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("echo server closed the connection")
                got += len(chunk)
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e6)
    times.sort()
    q = statistics.quantiles(times, n=100)
    return {
        "median_us": statistics.median(times),
        "p10_us": q[9],
        "p90_us": q[89],
        "p99_us": q[98],
        "min_us": times[0],
        "count": count,
    }


def calibrate(holder: Any, echo: str, rtt_us: float, pings: int, tries: int = 6) -> dict:
    """Set the holder for `rtt_us` and check it with a raw ping-pong: first half the RTT each
    way, then corrected by what the ping-pong measured beyond it (the fixed costs of the path:
    veth, TCP, the holder's and the echo process's wake-ups), up to `tries` times, until the
    median is within 5% of `rtt_us`. `steps` lists every (delay each way, median) tried;
    `converged` says whether the last one is within 5%."""
    first = delay = rtt_us / 2
    holder.set(delay_us=delay)
    m1 = m = ping_pong(echo, pings)
    steps = [(delay, m["median_us"])]
    for _ in range(tries):
        if abs(m["median_us"] - rtt_us) <= 0.05 * rtt_us:
            break
        delay = max(0.0, delay + (rtt_us - m["median_us"]) / 2)
        holder.set(delay_us=delay)
        m = ping_pong(echo, pings)
        steps.append((delay, m["median_us"]))
    converged = abs(m["median_us"] - rtt_us) <= 0.05 * rtt_us
    if not converged:
        print(
            f"WARNING: calibration did not converge: {m['median_us']:.0f} µs for {rtt_us:.0f} "
            f"(steps: {steps}); the machine is busy",
            file=sys.stderr,
            flush=True,
        )
    return {
        "target_us": rtt_us,
        "first_delay_us": first,
        "first": m1,
        "delay_us": delay,
        "final": m,
        "steps": steps,
        "converged": converged,
    }
