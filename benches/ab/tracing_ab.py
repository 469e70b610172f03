"""Interleaved A/B of what tracing costs (fastmc.opentelemetry): the same loops (single get/set,
100-key get_multi, the asyncio client's get) in a child process per mode, the modes alternating
in rotated order each round, medians of the rounds. Usage: python tracing_ab.py host:port
[rounds]; or python tracing_ab.py --callgrind host:port for instructions per call (off and
each mode), counted by valgrind. Modes:

- ``off``: fastmc.opentelemetry never imported (what every user without tracing runs);
- ``uninstrumented``: instrumented, then ``uninstrument()`` (the native methods are back);
- ``unsampled``: instrumented, the SDK's tracer provider with the ALWAYS_OFF sampler;
- ``on``: instrumented, the SDK's tracer provider, every span recorded and handed to a
  SimpleSpanProcessor whose exporter drops it (the cost of the spans, not of a network).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from loops import LOOPS

MODES = ("off", "uninstrumented", "unsampled", "on")

# Each child's first lines: the mode's tracer set-up (`mode` is its first argument).
SETUP = r"""
if mode != "off":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from fastmc.opentelemetry import FastMCInstrumentor

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ALWAYS_OFF) if mode == "unsampled" else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    FastMCInstrumentor().instrument(tracer_provider=provider)
    if mode == "uninstrumented":
        FastMCInstrumentor().uninstrument()
"""

CHILD = (
    r"""
import asyncio, json, sys, time
import fastmc, fastmc.aio
mode, server = sys.argv[1], sys.argv[2]
"""
    + SETUP
    + r"""mc = fastmc.Client([server])"""
    + LOOPS
    + r"""async def aio():
    async with fastmc.aio.Client([server]) as amc:
        await amc.get("ab1")
        t = time.perf_counter()
        for _ in range(3000):
            await amc.get("ab1")
        out["aio get"] = (time.perf_counter() - t) / 3000 * 1e6
asyncio.run(aio())
print(json.dumps(out))
"""
)


# Instructions per call, exactly (valgrind's callgrind): the child runs one operation LOOPS or
# 2 × LOOPS times; the difference of the two counts, divided by LOOPS, is one call's count
# without the interpreter's start-up and imports.
COUNTED = (
    r"""
import asyncio, sys
import fastmc, fastmc.aio
mode, server, op, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
"""
    + SETUP
    + r"""mc = fastmc.Client([server])
keys = ["ab%d" % i for i in range(100)]
mc.set_multi(dict.fromkeys(keys, b"v" * 40))
mc.get("ab1"); mc.get_multi(keys)
if op == "get":
    for _ in range(n):
        mc.get("ab1")
elif op == "get_multi 100":
    for _ in range(n):
        mc.get_multi(keys)
elif op == "bare span":  # OpenTelemetry's own span, no fastmc call
    from opentelemetry.trace import SpanKind
    tracer = provider.get_tracer("bare")
    attributes = {"db.system.name": "memcached", "db.operation.name": "get"}
    for _ in range(n):
        with tracer.start_as_current_span("get", kind=SpanKind.CLIENT, attributes=attributes):
            pass
else:
    async def aio():
        async with fastmc.aio.Client([server]) as amc:
            await amc.get("ab1")
            for _ in range(n):
                await amc.get("ab1")
    asyncio.run(aio())
"""
)


def instructions(mode: str, server: str, op: str, n: int) -> int:
    import re
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                *("valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out"),
                *(sys.executable, "-c", COUNTED, mode, server, op, str(n)),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))  # type: ignore[union-attr]


def counted(server: str, loops: int = 500) -> None:
    print(f"{'operation':<16}" + "".join(f"{m:>24}" for m in MODES))
    for op in ("get", "get_multi 100", "aio get"):
        per = {}
        for mode in MODES:
            one = instructions(mode, server, op, loops)
            two = instructions(mode, server, op, 2 * loops)
            per[mode] = (two - one) / loops
        cells = [f"{per['off']:>24.0f}"]
        cells += [f"{per[m]:>14.0f} ({per[m] - per['off']:>+7.0f})" for m in MODES[1:]]
        print(f"{op:<16}" + "".join(f"{c:>24}" for c in cells))
    one = instructions("on", server, "bare span", loops)
    two = instructions("on", server, "bare span", 2 * loops)
    print(f"a bare SDK span, as 'on' makes it, without fastmc: {(two - one) / loops:.0f}")


def run(mode: str, server: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", CHILD, mode, server], capture_output=True, text=True, check=True
    )
    return json.loads(r.stdout)


def main() -> None:
    if sys.argv[1] == "--callgrind":
        counted(sys.argv[2])
        return
    server = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 11
    got: dict = {m: [] for m in MODES}
    for r in range(rounds):
        for i in range(len(MODES)):
            mode = MODES[(r + i) % len(MODES)]
            got[mode].append(run(mode, server))
    print(f"{'operation':<16}" + "".join(f"{m + ' (µs)':>22}" for m in MODES))
    for op in got["off"][0]:
        med = {m: statistics.median(x[op] for x in got[m]) for m in MODES}
        cells = [f"{med['off']:>22.2f}"]
        cells += [f"{med[m]:>10.2f} ({med[m] - med['off']:+6.2f})" for m in MODES[1:]]
        print(f"{op:<16}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
