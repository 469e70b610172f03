"""multi: set_multi, get_multi, delete_multi of 100, 1,000 and 10,000 keys, on one server and on
three, with fastmc binary=True and the bound (a reference) in the same rounds."""

from __future__ import annotations

from ..columns import Bound, Column, Results, fastmc_col, make_fastmc, peer_cols
from ..context import Ctx
from ..measure import Samples
from ..report import LEGEND, fmt_num, fmt_ratio, md_table, pin_note, ratio, ratio_headers, ratio_row
from ..settings import VALUE_SIZE
from ..targets import TARGETS
from .steps import Steps, interleaved, workload

SIZES = (100, 1_000, 10_000)
OPS = ("set_multi", "get_multi", "delete_multi")

REF_NOTE = (
    "Last column, a reference and not a target: the **bound**, what the server and the "
    "kernel alone cost. Its requests are built before the clock starts, writes are quiet "
    "(`ms`/`md ... q` and one `mn`), reads are one `get k1 … kN` line per server (one "
    "request for memcached; fastmc sends such lines, 1,000 keys each), and nothing is "
    "parsed. A client must also read its arguments, build its requests and the Python "
    "results, so the bound is close to a lower limit; a client only goes under it where "
    "memcached is slow on the bound's one huge `get` line (10,000 keys) or where the bound's "
    "Python poll loop (batches over 16 KiB, or three servers) costs more than the client's. "
    "After it, the bound **as sent, + arguments and results**. As sent: a second bound, in "
    "the same rounds, whose writes go out as fastmc's do: each `md` with an opaque token "
    "(`md k q O<n>`: a key not found answers `NF`, and only its token says which key), and "
    "a write of 2,048 keys or more in fastmc's pieces (1,024 keys, then each twice the last), "
    "each sent before the next is built, so that servers on other CPUs start early; for the "
    "other rows the requests are the bound's, and so is the time. Then what any client must do "
    "with Python objects, measured alone at C speed in the same rounds: every key's "
    "characters (and for set_multi every value's bytes) copied once, 1,000 keys at a time "
    '(`"".join(...).encode()`, `b"".join(...)`), and for get_multi the dict of new bytes '
    "values the caller asked for, built from one prepared buffer "
    '(`dict(zip(keys, blob.split(b"\\r\\n")))`). The 1,000- and 10,000-key rows are judged '
    "against it (≤ 1.15×)."
)


def run(ctx: Ctx) -> None:
    configs = [("one server", ctx.servers1)]
    if ctx.servers3:
        configs.append(("three servers", ctx.servers3))
    else:
        ctx.report.emit("Multi operations, three servers", "_Skipped: fewer than three servers._")
        ctx.report.target("multi", "three-server rows", "skipped (fewer than three servers)", None)
    ctx.report.data["multi"] = {}
    for i, (label, servers) in enumerate(configs):
        cols = ctx.columns(servers)
        bcols = _binary_column(ctx, servers, i)
        ref = Bound("bound", f"{ctx.run_id}r{i}", servers, ctx.meta_ok)
        sent = Bound("bound as sent", f"{ctx.run_id}t{i}", servers, ctx.meta_ok, as_sent=True)
        res = Results("arguments + results", f"{ctx.run_id}o{i}")
        samples = measure(ctx, label, [*cols, *bcols, ref, sent, res])
        ctx.report.data["multi"][label] = report(ctx, label, cols, (ref, sent), res, samples)
        ref.close()
        sent.close()
        if bcols:
            _binary_table(ctx, label, cols, bcols[0], samples)


def _binary_column(ctx: Ctx, servers: list, i: int) -> list:
    """fastmc with binary=True, run in the same rounds; its table follows the main one."""
    if not ctx.has_fastmc:
        return []
    try:
        tag = f"{ctx.run_id}b{i}"
        return [make_fastmc(ctx.fastmc_mod, ctx.fastmc_name, servers, tag, binary=True)]
    except Exception as e:  # reported loudly, the run goes on
        ctx.failures.add("setup", "fastmc binary", f"Client({servers}, binary=True) raised {e!r}")
        return []


def measure(ctx: Ctx, label: str, cols: list) -> Samples:
    """Seconds per call by (op, keys, client): each size's rounds, the order rotating."""
    samples = Samples()
    where = f"multi {label}"
    for n in SIZES:
        for r in range(ctx.s.multi_rounds[n]):
            interleaved(ctx, samples, cols, r, where, _round, n, r, where)
    return samples


def _round(steps: Steps, n: int, r: int, where: str) -> None:
    c = steps.c
    keys, _, mapping = workload(c, "m", n, f"|m{r}")
    c.prepare("set_multi", mapping)  # the bound builds its requests ahead, untimed
    if c.set_multi is not None:
        what = f"set_multi({n}) returned {{res:.100}}"
        steps.set_multi(("set_multi", n, c.name), where, mapping, what)
    c.prepare("get_multi", keys)
    steps.get_multi(("get_multi", n, c.name), where, keys, mapping, f"get_multi({n}) read back ")
    if c.delete_multi is None:
        return
    c.prepare("delete_multi", keys)
    what = f"delete_multi({n}) returned {{res:.80}}, {{left}} keys left"
    steps.delete_multi(("delete_multi", n, c.name), where, keys, what)


def report(
    ctx: Ctx, label: str, cols: list, refs: tuple, res_col: Results, samples: Samples
) -> dict:
    """The table and the targets of one server set; returns its medians (µs) by row. `refs`:
    the bound, and the bound as fastmc sends its writes."""
    ref, sent = refs
    headers = [
        "op",
        "keys",
        *ratio_headers(cols, "µs"),
        "target",
        "bound (µs) (fastmc ÷ it)",
        "as sent, + arguments and results (µs) (fastmc ÷ it)",
    ]
    rows = []
    res: dict = {}
    per_key: dict = {}
    for op in OPS:
        for n in SIZES:
            meds = {c.name: samples.med_us((op, n, c.name)) for c in cols}
            res[f"{op} {n}"] = meds
            rl = samples.med_us((op, n, ref.name))
            if rl is not None:
                meds[ref.name] = rl
            f, cells = _row(ctx, label, op, n, cols, meds, rl)
            built = samples.med_us((op, n, res_col.name))
            # Where fastmc's requests are the bound's, the bound itself.
            as_sent = Bound.as_sent_differs(op, n)
            rt = samples.med_us((op, n, sent.name)) if as_sent else rl
            if rt is not None and as_sent:
                meds[sent.name] = rt
            cells.append(_vs_bound(ctx, label, op, n, f, rt, built))
            if built:
                meds[res_col.name] = built
            rows.append([op, f"{n:,}", *cells])
            per_key[op, n] = f
            per_key[op, n, "bound"] = rl
    _judge_per_key(ctx, label, per_key)
    rounds = ", ".join(f"{n:,} keys: {r}" for n, r in ctx.s.multi_rounds.items())
    ctx.report.emit(
        f"Multi operations, {label} (µs per call)",
        f"Rounds: {rounds}; set_multi, then get_multi (checked), then delete_multi "
        f"(checked), {VALUE_SIZE}-byte values. Target: fastmc ≤ floor and ≤ ½ the best "
        f"peer. {pin_note(ctx.pinned_now)}\n\n{LEGEND} {REF_NOTE}\n\n" + md_table(headers, rows),
    )
    return res


def _row(ctx: Ctx, label: str, op: str, n: int, cols: list, meds: dict, rl: float | None) -> tuple:
    """One row's cells after op and keys (and its two targets); returns (fastmc's µs, cells)."""
    cells, f, fl, best = ratio_row(meds, cols)
    rf, rb = ratio(f, fl), ratio(f, best)
    floor_t, half_t = TARGETS["multi_floor"], TARGETS["multi_half_peer"]
    ok = floor_t.met(rf) and half_t.met(rb)
    cells += [
        ("PASS" if ok else "FAIL") if f is not None else "n/a",
        f"{fmt_num(rl)} ({fmt_ratio(ratio(f, rl))})" if rl else "n/a",
    ]
    measured = f"×{fmt_ratio(rf)} ({fmt_num(f)} vs {fmt_num(fl)} µs)"
    ctx.report.judge("multi_floor", measured, rf, label=label, op=op, n=n)
    share = best * half_t.limit if best is not None else None
    below = (
        f"; ½ best peer is under the bound, {fmt_num(rl)} µs: what server and kernel alone take"
        if share is not None and rl is not None and share < rl
        else ""
    )
    measured = f"×{fmt_ratio(rb)} ({fmt_num(f)} vs {fmt_num(best)} µs{below})"
    ctx.report.judge("multi_half_peer", measured, rb, label=label, op=op, n=n)
    return f, cells


def _vs_bound(
    ctx: Ctx, label: str, op: str, n: int, f: float | None, rl: float | None, built: float | None
) -> str:
    """The bound as fastmc sends its requests plus the arguments and results alone, fastmc's
    ratio to it, and (from 1,000 keys) its target."""
    if f is None or rl is None or built is None:
        return "n/a"
    whole = rl + built
    r = ratio(f, whole)
    if n >= 1_000:
        what = f"×{fmt_ratio(r)} ({fmt_num(f)} vs {fmt_num(rl)} + {fmt_num(built)} µs)"
        ctx.report.judge("multi_bound", what, r, label=label, op=op, n=n)
    return f"{fmt_num(whole)} ({fmt_ratio(r)})"


def _judge_per_key(ctx: Ctx, label: str, per_key: dict) -> None:
    """Writes per key against reads per key, fastmc's and (for reference) the bound's."""
    for op in ("set_multi", "delete_multi"):
        for n in SIZES:
            rr = ratio(per_key[op, n], per_key["get_multi", n])
            rbound = ratio(per_key[op, n, "bound"], per_key["get_multi", n, "bound"])
            measured = f"×{fmt_ratio(rr)} (the bound's own: ×{fmt_ratio(rbound)})"
            ctx.report.judge("multi_write_per_key", measured, rr, label=label, op=op, n=n)


def _binary_table(ctx: Ctx, label: str, cols: list, bcol: Column, samples: Samples) -> None:
    """fastmc binary=True next to pylibmc binary=True and fastmc's text protocol."""
    fc = fastmc_col(cols)
    pb = next((c for c in peer_cols(cols) if c.name == "pylibmc binary"), None)
    rows = []
    for op in OPS:
        for n in SIZES:
            b = samples.med_us((op, n, bcol.name))
            t = samples.med_us((op, n, fc.name)) if fc else None
            p = samples.med_us((op, n, pb.name)) if pb else None
            rows.append(
                [
                    op,
                    f"{n:,}",
                    fmt_num(b),
                    fmt_num(t),
                    fmt_ratio(ratio(b, t)),
                    fmt_num(p),
                    fmt_ratio(ratio(b, p)),
                ]
            )
    headers = [
        "op",
        "keys",
        "fastmc binary (µs)",
        "fastmc text (µs)",
        "binary ÷ text",
        "pylibmc binary (µs)",
        "fastmc binary ÷ pylibmc binary",
    ]
    ctx.report.emit(
        f"Multi operations, {label}, binary protocol (µs per call)",
        "The same rounds with `binary=True` (quiet opcodes and one NOOP per server).\n\n"
        + md_table(headers, rows),
    )
