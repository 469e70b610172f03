"""Every PASS/FAIL threshold of the summary, in one table.

Each entry names the scenario that checks it, the label of its summary row (a template the
scenario fills in), the measured figure it applies to, how that figure compares with the limit,
and what the target asks of fastmc. Scenarios look thresholds up here (`TARGETS[key].met(value)`)
and never write a limit inline.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

_COMPARE = {"<": operator.lt, "<=": operator.le, ">=": operator.ge}


@dataclass(frozen=True)
class Threshold:
    scenario: str
    label: str  # the summary row, a str.format template filled in by the scenario
    figure: str  # what `met` is given
    compare: str  # "<", "<=" or ">="
    limit: float
    meaning: str  # the target this threshold implements

    def met(self, value: float | None) -> bool:
        """Whether the measured figure meets the target (a figure not measured never does)."""
        return value is not None and _COMPARE[self.compare](value, self.limit)


TARGETS = {
    "single_cpu": Threshold(
        "single",
        "{op}: client CPU/op below pylibmc's",
        "fastmc's client CPU per operation ÷ pylibmc's",
        "<",
        1.0,
        "A single get, set, delete or incr costs the client less CPU than pylibmc's does.",
    ),
    "single_wall": Threshold(
        "single",
        "{op}: wall/op not above pylibmc's (5% noise allowance)",
        "fastmc's wall time per operation ÷ pylibmc's",
        "<=",
        1.05,
        "A single operation takes no longer than pylibmc's; both are one loopback round trip, "
        "so 5% is allowed for noise.",
    ),
    "multi_floor": Threshold(
        "multi",
        "{label}: {op} {n:,} keys ≤ floor",
        "fastmc's time per multi call ÷ the floor's",
        "<=",
        1.0,
        "Every multi row (get/set/delete, 100 to 10,000 keys, one and three servers) is at or "
        "below the floor: a raw pipelined batch from Python of N commands and a marker.",
    ),
    "multi_half_peer": Threshold(
        "multi",
        "{label}: {op} {n:,} keys ≤ ½ best peer",
        "fastmc's time per multi call ÷ the fastest peer's",
        "<=",
        0.5,
        "Every multi row takes at most half the fastest peer's time (where half of it lies "
        "under the bound, no client can reach it, and the summary says so).",
    ),
    "multi_bound": Threshold(
        "multi",
        "{label}: {op} {n:,} keys ≤ 1.15× the bound as sent, arguments and results",
        "fastmc's time per multi call ÷ (the bound's, its writes as fastmc sends them, + the "
        "arguments and results alone)",
        "<=",
        1.15,
        "Large batches (1,000 and 10,000 keys) come within 15% of what the server, the kernel "
        "and the caller's Python objects cost alone: the bound (requests built ahead, nothing "
        "parsed; its writes as fastmc sends them: a token on each quiet delete, so that a key "
        "not found is known, and a large write in pieces) plus reading the arguments once "
        "(keys, and values for set_multi) "
        "and, for get_multi, building the dict of new bytes values.",
    ),
    "multi_write_per_key": Threshold(
        "multi",
        "{label}: {op} per key ≤ 1.5× get_multi's, {n:,} keys",
        "fastmc's set_multi (or delete_multi) time ÷ its get_multi time, same keys",
        "<=",
        1.5,
        "Writes in a multi call cost about what reads cost per key: a multi call speeds up "
        "writes as much as reads.",
    ),
    "bulk_rate": Threshold(
        "bulk",
        "bulk load: ≥ 1,000,000 keys/s {what}{scope}",
        "keys per second, written or read back, in batches of 1,000",
        ">=",
        1_000_000,
        "Loading 2,000,000 distinct keys with set_multi, and reading them back with get_multi, "
        "both run at a million keys per second or more.",
    ),
    "threads_pool": Threshold(
        "threads",
        "8 threads, single {op}s: ≥ 1.5× pylibmc ClientPool ops/s",
        "ops/s of one fastmc Client shared by 8 threads ÷ pylibmc ClientPool's",
        ">=",
        1.5,
        "One Client shared by 8 threads does at least 1.5 times the operations per second of "
        "pylibmc's ClientPool.",
    ),
    "memory_growth": Threshold(
        "memory",
        "resident memory does not grow over {rounds} rounds (≤ 1 MiB after round {after})",
        "bytes of resident memory gained from the warm-up round to the last",
        "<=",
        2**20,
        "Resident memory does not grow across repeated rounds of mixed operations.",
    ),
    "aio_tasks": Threshold(
        "aio",
        "asyncio, 100 tasks, single {op}s: ≥ 2× the best async peer's ops/s",
        "fastmc.aio's ops/s ÷ the best async peer's (aiomcache, emcache, memcachio)",
        ">=",
        2.0,
        "With 100 concurrent tasks on one shared client, fastmc.aio does at least twice the "
        "gets and sets per second of the best async peer.",
    ),
    "aio_multi_sync": Threshold(
        "aio",
        "asyncio, {where}: {op} {n:,} keys ≤ 1.1× the blocking client",
        "fastmc.aio's time per multi call ÷ the blocking fastmc client's",
        "<=",
        1.1,
        "A multi-key call through the asyncio client costs at most 10% more than through the "
        "blocking client.",
    ),
    "aio_multi_peer": Threshold(
        "aio",
        "asyncio, {where}: {op} {n:,} keys ≤ ½ best async peer",
        "fastmc.aio's time per multi call ÷ the fastest async peer's",
        "<=",
        0.5,
        "A multi-key call through the asyncio client takes at most half the fastest async "
        "peer's time.",
    ),
    "aio_p99": Threshold(
        "aio",
        "asyncio: p99 of a get while 100 tasks ask 20,000 gets/s ≤ best async peer's",
        "fastmc.aio's p99 ÷ the best async peer's p99",
        "<=",
        1.0,
        "While 100 tasks load one client, a get's 99th-percentile latency is no worse than the "
        "best async peer's.",
    ),
    "hotkey_get_or_set": Threshold(
        "hotkey",
        "hotkey, {tasks} asyncio tasks: get_or_set hits ≥ ½ plain get's calls/s",
        "calls/s of get_or_set on one hot key that every call finds ÷ a plain get's of it, "
        "same client, same run",
        ">=",
        0.5,
        "Reads of one key never queue behind each other: a get_or_set that finds the value "
        "waits only for an earlier write of its key.",
    ),
    "hotkey_p50": Threshold(
        "hotkey",
        "hotkey, {tasks} asyncio tasks: get_or_set hit p50 ≤ 2 ms",
        "p50 of a get_or_set of the hot key, in ms",
        "<=",
        2.0,
        "Many tasks reading one hot key through get_or_set each wait about one round trip.",
    ),
    "stampede_recomputes": Threshold(
        "stampede",
        "stampede, {mode}, {shape}: {client} recomputes exactly once per event",
        "|recomputes ÷ expiries (or invalidations) − 1|",
        "<=",
        0.0,
        "A hot key that expires, or is invalidated, every second is recomputed exactly once "
        "each time, whatever the number of threads, processes or tasks reading it.",
    ),
    "stampede_p99": Threshold(
        "stampede",
        "stampede, {mode}, {shape}: {client} p99 during a recompute ≤ 1.5× plain get's",
        "p99 of the reads that start while a recompute runs ÷ p99 of the plain gets that "
        "start then too (each reader does one after each read)",
        "<=",
        1.5,
        "While one caller recomputes a key that still has a value, everyone else reads at "
        "about the speed of a plain get.",
    ),
    "stampede_stale": Threshold(
        "stampede",
        "stampede, {mode}, {shape}: {client} no read beyond the stale window",
        "reads of a value computed more than a period plus STAMPEDE_STALE_WINDOW earlier",
        "<=",
        0,
        "No reader ever gets a value older than the configured stale window.",
    ),
    "net_bound": Threshold(
        "net",
        "{rtt}, {label}: {op} {n:,} keys ≤ 1.1× raw floor",
        "fastmc's time per multi call ÷ the raw floor's (bench.py's bound) through the same network",
        "<=",
        1.1,
        "Over a simulated datacenter network, every multi row is within 1.1x of the raw "
        "pipelined batch through the same network (prebuilt, read back unparsed).",
    ),
    "net_peers": Threshold(
        "net",
        "{rtt}, {label}: {op} {n:,} keys ahead of every peer",
        "fastmc's time per multi call ÷ the fastest peer's, through the same network",
        "<",
        1.0,
        "Over a simulated datacenter network, every multi row is faster than every peer's.",
    ),
    "net_threads": Threshold(
        "net",
        "{rtt}: {T} threads, single {op}s ≥ 90% of threads ÷ RTT",
        "ops/s of one fastmc Client shared by the threads ÷ (threads ÷ the calibrated RTT)",
        ">=",
        0.9,
        "Over a simulated network, one Client shared by 8 threads keeps all 8 round trips in "
        "flight: within 10% of threads ÷ RTT operations per second.",
    ),
    "soak_wrong": Threshold(
        "net soak",
        "wrong values read under loss and reordering",
        "values read that do not belong to the key, or are not a value written to it",
        "<=",
        0,
        "Loss and reordering never give a caller another key's value or a value never written.",
    ),
    "soak_timeout": Threshold(
        "net soak",
        "calls that failed (timeouts included) took ≤ 1.1× the timeout",
        "the longest call that raised (or get_multi that left out a server's keys after at least "
        "0.9× the timeout) ÷ the configured timeout",
        "<=",
        1.1,
        "A timeout is honoured within 10% under loss and reordering: no failing call waits longer.",
    ),
    "soak_recovery": Threshold(
        "net soak",
        "no failure once retry_timeout has passed after the loss stopped",
        "calls that failed among those started more than retry_timeout after the loss stopped",
        "<=",
        0,
        "When the network heals, every server is back within retry_timeout.",
    ),
    "values_cost": Threshold(
        "values",
        "{mode} {kind} {op}: ≤ 1.1× the default",
        "fastmc's time per call in the mode ÷ in its default mode (pickles allowed), same value",
        "<=",
        1.10,
        "Safe values (signed, allow-listed or pickle-free) cost at most 10% over the default on "
        "single and 100-key calls.",
    ),
    "near_zipf": Threshold(
        "near",
        "near cache: Zipf-like reads over 1,000 keys ≥ 5× without it",
        "fastmc's calls/s with the near cache ÷ without it, 99% reads, same calls",
        ">=",
        5.0,
        "A near cache makes a Zipf-like, read-mostly workload at least five times faster.",
    ),
    "near_bound": Threshold(
        "near",
        "near cache: held items and bytes stay within max_items and max_bytes",
        "1 when the most it held stayed within both bounds",
        ">=",
        1.0,
        "max_items and max_bytes are hard bounds, whatever is read.",
    ),
    "large_peers": Threshold(
        "large",
        "{row}: at least as fast as every peer",
        "fastmc's time per call ÷ the fastest peer's, same values, all uncompressed",
        "<=",
        1.0,
        "Large values (100 KB and 1 MB, single get and set; 100-key batches with 5% of 100 KB "
        "values) are read and written at least as fast as by every peer.",
    ),
    "large_memory": Threshold(
        "large",
        "{row}: peak memory ≤ 2× the value's size",
        "growth of the process's peak resident memory during one read ÷ the value's size "
        "(the value returned included), in a fresh process",
        "<=",
        2.05,
        "Reading a large value costs at most twice its size at the peak: the bytes the call "
        "returns and one buffer the socket was read into (2.05: pages and the reply's small "
        "allocations, 0.4% of 1 MiB each).",
    ),
}

# The stampede scenario's stale window: a value may be served this many seconds past the end of
# its period (its expiry or invalidation) while it is recomputed.
STAMPEDE_STALE_WINDOW = 1.0

# The bulk target is stated for this many keys; a smaller load says so in its summary row.
BULK_TARGET_KEYS = 2_000_000
