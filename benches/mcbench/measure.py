"""How a figure is taken: one timed call, the median of a round's samples, resident memory, and
the pinning of this process and the servers to one CPU."""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any, Callable

perf_counter = time.perf_counter
process_time = time.process_time


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def med_us(xs: list | None) -> float | None:
    """The median of samples in seconds, in microseconds (None without samples)."""
    m = median(xs or [])
    return m * 1e6 if m is not None else None


class Samples(dict):
    """Samples by key (a tuple naming operation, size, client...), kept in the order taken."""

    def add(self, key: tuple, value: float) -> None:
        self.setdefault(key, []).append(value)

    def med_us(self, key: tuple) -> float | None:
        return med_us(self.get(key))


def rotated(seq: list, r: int) -> list:
    """The clients in a different order each round, so no client always runs first."""
    if not seq:
        return []
    r %= len(seq)
    return seq[r:] + seq[:r]


def timed(fn: Callable, *args: Any) -> tuple[float, Any]:
    """Wall time of one call, garbage collector off as in timeit."""
    gc.disable()
    try:
        t0 = perf_counter()
        res = fn(*args)
        t1 = perf_counter()
    finally:
        gc.enable()
    return t1 - t0, res


def timed_cpu(fn: Callable, *args: Any) -> tuple[float, float, Any]:
    """Wall and client CPU (time.process_time: all threads of this process) of one call."""
    gc.disable()
    try:
        c0 = process_time()
        t0 = perf_counter()
        res = fn(*args)
        t1 = perf_counter()
        c1 = process_time()
    finally:
        gc.enable()
    return t1 - t0, c1 - c0, res


def read_rss() -> int:
    """Resident set size of this process in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _tasks(pid: str) -> list:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(pids: list) -> Iterator[bool]:
    """Run this process (all its threads) and the given servers' processes on one CPU; yields
    whether it did (no pids, or no sched_setaffinity: nothing is pinned).

    On a small VM a loopback round trip costs ~7 µs when client and server share a CPU and
    ~80 µs when the server must be woken on another (idle) vCPU; the scheduler flips between the
    two every few milliseconds, so unpinned measurements record placement luck, in wall time and
    in client CPU alike (the wake-up is charged to the client). On one CPU every client pays for
    the server's work the same way and the medians repeat from run to run."""
    if not pids or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    cpu = max(os.sched_getaffinity(0))
    saved = []
    try:
        for pid in ["self"] + [str(p) for p in pids]:
            for tid in _tasks(pid):
                with contextlib.suppress(OSError):
                    saved.append((tid, os.sched_getaffinity(tid)))
                    os.sched_setaffinity(tid, {cpu})
        yield True
    finally:
        for tid, cpus in saved:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)
