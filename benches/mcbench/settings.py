"""What a run is made of: --quick versus the full run, the value size, where things are."""

from __future__ import annotations

import os
from dataclasses import dataclass

VALUE_SIZE = 40  # bytes: every value of every scenario
FASTMC_MODULE_ENV = "FASTMC_BENCH_MODULE"  # development aid: a stand-in for the fastmc column
BANNER = "!" * 78

BENCHES_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_SCRIPT = os.path.join(BENCHES_DIR, "bench.py")  # the entry point (memory's child runs it)
REPO_DIR = os.path.dirname(BENCHES_DIR)


@dataclass
class Settings:
    quick: bool
    single_ops: int  # single operations per timed loop
    single_rounds: int
    multi_rounds: dict  # keys -> rounds
    simple_keys: int
    simple_rounds: int
    speedup_rounds: int
    noreply_keys: int
    noreply_rounds: int
    bulk_keys: int
    bulk_batch: int
    bulk_peer_budget: float  # seconds per phase for a peer too slow to load everything
    threads: int
    thread_ops: int  # operations per thread per round
    thread_rounds: int
    memory_rounds: int
    memory_keys: int
    aio_ops: int  # single operations per concurrency row, spread over the tasks
    aio_rounds: int
    aio_multi_rounds: dict  # keys -> rounds of fastmc.aio and the blocking client, interleaved
    aio_multi_peer_rounds: dict  # keys -> of those, the first rounds that time the peers too
    aio_probes: int  # gets timed one by one for the latency row
    stampede_seconds: int  # expiries (and invalidations) per stampede run, one a second
    large_rounds: int
    large_ops: dict  # value size -> single gets (and sets) per loop
    large_multi_calls: int  # set_multi and get_multi calls per round

    @classmethod
    def make(cls, quick: bool) -> Settings:
        return cls(quick=quick, **{k: v[0] if quick else v[1] for k, v in _QUICK_FULL.items()})


# Every setting as (--quick, full run).
_QUICK_FULL: dict = {
    "single_ops": (1_000, 3_000),
    "single_rounds": (3, 7),
    "multi_rounds": ({100: 25, 1_000: 9, 10_000: 3}, {100: 101, 1_000: 41, 10_000: 11}),
    "simple_keys": (10_000, 10_000),
    "simple_rounds": (1, 3),
    "speedup_rounds": (2, 5),
    "noreply_keys": (1_000, 1_000),
    "noreply_rounds": (2, 5),
    "bulk_keys": (200_000, 2_000_000),
    "bulk_batch": (1_000, 1_000),
    "bulk_peer_budget": (1.5, 6.0),
    "threads": (8, 8),
    "thread_ops": (500, 1_000),
    "thread_rounds": (3, 5),
    "memory_rounds": (20, 40),
    "memory_keys": (2_000, 2_000),
    "aio_ops": (4_000, 20_000),
    "aio_rounds": (3, 5),
    "aio_multi_rounds": ({100: 61, 1_000: 31, 10_000: 25}, {100: 101, 1_000: 61, 10_000: 41}),
    "aio_multi_peer_rounds": ({100: 15, 1_000: 5, 10_000: 2}, {100: 51, 1_000: 21, 10_000: 5}),
    "aio_probes": (500, 3_000),
    "stampede_seconds": (5, 10),
    "large_rounds": (5, 15),
    "large_ops": ({100_000: 10, 1 << 20: 3}, {100_000: 20, 1 << 20: 5}),
    "large_multi_calls": (3, 5),
}
