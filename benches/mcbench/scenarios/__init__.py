"""The scenarios, in the order a run takes them; each is a module with `run(ctx)`."""

from __future__ import annotations

from typing import Callable

from . import (
    aio,
    bulk,
    compression,
    hotkey,
    large,
    memory,
    multi,
    near,
    noreply,
    simple_vs_multi,
    single,
    speedup,
    stampede,
    threads,
    values,
)

SCENARIOS: dict[str, Callable] = {
    "single": single.run,
    "multi": multi.run,
    "simple_vs_multi": simple_vs_multi.run,
    "speedup": speedup.run,
    "noreply": noreply.run,
    "bulk": bulk.run,
    "threads": threads.run,
    "memory": memory.run,
    "aio": aio.run,
    "hotkey": hotkey.run,
    "stampede": stampede.run,
    "values": values.run,
    "compression": compression.run,
    "large": large.run,
    "near": near.run,
}

# Run without pinning to one CPU: threads need every CPU (so do the asyncio client's I/O
# threads, beside the event loop's; so do hotkey's and stampede's threads and processes), memory
# times nothing.
UNPINNED = ("threads", "memory", "aio", "hotkey", "stampede")
