"""large: values of 100 KB and 1 MiB, as real workloads carry them. Single get and set of each size,
and a 100-key set_multi/get_multi in which 5 values are 100 KB and the others the suite's usual
40 bytes; fastmc and every peer in the same rounds, every value uncompressed (each client's
default, checked on the server), every read checked. Then the peak memory of one large read
(`large_memory`)."""

from __future__ import annotations

from ..columns import Column, fastmc_col, peer_cols
from ..context import Ctx
from ..measure import Samples, rotated, timed
from ..report import fmt_num, fmt_ratio, md_table, pin_note, ratio
from ..servers import item_size_max, server_command
from ..settings import VALUE_SIZE
from ..verify import diff, values_for
from . import large_memory

KB = 1000
MB = 1 << 20
SIZES = (100 * KB, MB)  # the single-key rows
MULTI_KEYS = 100
MULTI_LARGE_EVERY = 20  # every 20th key of the batch holds a 100 KB value: 5%
MULTI_LARGE = 100 * KB
# Bytes that fill a large value after the 40 that name its key and round (not compressible
# by a run of one byte, although no client compresses here).
_FILL = bytes(range(256)) * (MB // 256 + 1)


def big_values(keys: list[str], salt: str, size: int) -> list[bytes]:
    """Values of `size` bytes that open with the 40 bytes naming their key and round."""
    return [head + _FILL[: size - len(head)] for head in values_for(keys, salt)]


def multi_mapping(c: Column, salt: str) -> tuple[list, dict]:
    """The batch: 100 keys, every 20th one with a 100 KB value, the rest 40 bytes."""
    keys = c.keys("Lm", MULTI_KEYS)
    vals = values_for(keys, salt)
    for i in range(0, MULTI_KEYS, MULTI_LARGE_EVERY):
        vals[i] = big_values([keys[i]], salt, MULTI_LARGE)[0]
    return keys, dict(zip(keys, vals))


def label(size: int) -> str:
    return f"{size // MB} MiB" if size >= MB else f"{size // KB} KB"


ROWS = [("set", s) for s in SIZES] + [("get", s) for s in SIZES]
ROWS += [("set_multi", MULTI_KEYS), ("get_multi", MULTI_KEYS)]


def row_name(op: str, n: int) -> str:
    if op.endswith("_multi"):
        return f"{op}({n}), 5 × 100 KB + 95 × {VALUE_SIZE} B"
    return f"{op} {label(n)}"


def run(ctx: Ctx) -> None:
    cols = [c for c in ctx.columns(ctx.servers1) if c.kind != "floor"]
    biggest = item_size_max(ctx.servers1[0])
    sizes = [s for s in SIZES if biggest is None or s + 1024 <= biggest]
    if len(sizes) < len(SIZES):
        ctx.report.emit(
            "Large values",
            f"The server's item size limit ({biggest} bytes) leaves out the "
            f"{', '.join(label(s) for s in SIZES if s not in sizes)} rows: start it with "
            "`-I 2m` or more (bench.py's own servers have `-I 32m`).",
        )
    samples = Samples()
    for c in cols:  # warm-up, and the check that no client compressed
        ctx.failures.safe("large warm-up", c, _round, ctx, Samples(), c, -1, sizes)
        ctx.failures.safe("large", c, _check_uncompressed, ctx, c, sizes)
    for r in range(ctx.s.large_rounds):
        for c in rotated(cols, r):
            ctx.failures.safe("large", c, _round, ctx, samples, c, r, sizes)
    report(ctx, cols, samples, sizes)
    large_memory.run(ctx)


def _round(ctx: Ctx, samples: Samples, c: Column, r: int, sizes: list) -> None:
    check = ctx.failures.check
    for size in sizes:
        n = ctx.s.large_ops[size]
        keys = c.keys(f"L{size}", n)
        vals = big_values(keys, f"|L{r}", size)
        t, bad = timed(c.loop_set, list(zip(keys, vals)))
        if check(f"large set {label(size)}", c, bad == 0, f"{bad} of {n} sets failed"):
            samples.add(("set", size, c.name), t / n)
        get = c.get
        t, got = timed(lambda: [get(k) for k in keys])  # noqa: B023 (called at once)
        ok = got == vals
        if check(f"large get {label(size)}", c, ok, "a value read back differs"):
            samples.add(("get", size, c.name), t / n)
    keys, mapping = multi_mapping(c, f"|L{r}")
    for _ in range(ctx.s.large_multi_calls):
        t, res = timed(c.set_multi, mapping)
        if check("large set_multi", c, c.stored_ok(res, MULTI_KEYS), f"returned {res!s:.80}"):
            samples.add(("set_multi", MULTI_KEYS, c.name), t)
        t, res = timed(c.get_multi, keys)
        got = c.decode_get(res, keys)
        if check("large get_multi", c, got == mapping, diff(got, mapping)):
            samples.add(("get_multi", MULTI_KEYS, c.name), t)


def _stored_size(server: str, key: str) -> int | None:
    line = server_command(server, f"mg {key} s\r\nmn\r\n".encode())
    return int(line.split()[1][1:]) if line.startswith(b"HD s") else None


def _check_uncompressed(ctx: Ctx, c: Column, sizes: list) -> None:
    """What the warm-up round stored is on the server at its full size: nobody compressed.
    libmc splits a value over 1,000,000 bytes into items of its own (`~<len><key>/<i>`, and a
    small head item under the key): their sizes add up to the value's."""
    if not ctx.meta_ok:
        return
    server = ctx.servers1[0]
    for size in sizes:
        key = c.keys(f"L{size}", 1)[0]
        stored = _stored_size(server, key)
        if stored != size and c.name == "libmc":
            parts = [
                _stored_size(server, f"~{len(key)}{key}/{i}") for i in range(size // 10**6 + 1)
            ]
            if None not in parts and sum(parts) == size:  # type: ignore[arg-type]
                continue
        ctx.failures.check("large", c, stored == size, f"{label(size)} stored as {stored} bytes")


def report(ctx: Ctx, cols: list, samples: Samples, sizes: list) -> None:
    fc, peers = fastmc_col(cols), peer_cols(cols)
    rows, data = [], {}
    for op, n in ROWS:
        if not op.endswith("_multi") and n not in sizes:
            continue
        meds = {c.name: samples.med_us((op, n, c.name)) for c in cols}
        data[row_name(op, n)] = meds
        f = meds.get(fc.name) if fc else None
        cells = [fmt_num(f)]
        for p in peers:
            v = meds.get(p.name)
            cells.append("n/a" if v is None else f"{fmt_num(v)} ({fmt_ratio(ratio(f, v))})")
        best = min((v for p in peers if (v := meds.get(p.name)) is not None), default=None)
        rb = ratio(f, best)
        cells.append(fmt_ratio(rb))
        rows.append([row_name(op, n), *cells])
        measured = f"{fmt_num(f)} vs {fmt_num(best)} µs (×{fmt_ratio(rb)})"
        ctx.report.judge("large_peers", measured, rb, row=row_name(op, n))
    ctx.report.data["large"] = data
    s = ctx.s
    note = (
        f"One server, {s.large_rounds} rounds, clients in a rotating order; median µs per "
        f"call. Single rows: loops of {', '.join(f'{s.large_ops[n]} × {label(n)}' for n in sizes)} "
        f"(distinct keys and values), per call; multi rows: {s.large_multi_calls} calls per "
        "round. Every value is stored uncompressed: each client's default (no client "
        "compresses unless asked), checked on the server (`mg <key> s` gives the full size). "
        "Every read is compared with what was written, outside the clock. Each peer cell: the "
        "peer's median, then (fastmc ÷ peer): below 1 means fastmc is faster. "
        + pin_note(ctx.pinned_now)
    )
    headers = ["call", "fastmc (µs)", *[p.name for p in peers], "fastmc ÷ best peer"]
    ctx.report.emit("Large values: time per call (µs)", note + "\n\n" + md_table(headers, rows))
