"""Calibration: a raw TCP ping-pong through the simulated link, timed.

A tiny echo server runs in the server namespace (`bench_net.py --echo-server host:port`); the
client sends one 40-byte message and waits for it to come back, `count` times, one at a time. The
median of those round trips is the network's RTT as a raw socket sees it: what the holder adds,
plus the veth pair, the two TCP stacks, the holder's own wake-ups and the echo process's.
"""

from __future__ import annotations

import socket
import statistics
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


def calibrate(holder: Any, echo: str, rtt_us: float, pings: int) -> dict:
    """Set the holder for `rtt_us` and check it with a raw ping-pong: first half the RTT each
    way, then corrected once by what the ping-pong measured beyond it (the fixed costs of the
    path: veth, TCP, the holder's and the echo process's wake-ups)."""
    first = rtt_us / 2
    holder.set(delay_us=first)
    m1 = ping_pong(echo, pings)
    final = max(0.0, first + (rtt_us - m1["median_us"]) / 2)
    holder.set(delay_us=final)
    m2 = ping_pong(echo, pings)
    return {
        "target_us": rtt_us,
        "first_delay_us": first,
        "first": m1,
        "delay_us": final,
        "final": m2,
    }
