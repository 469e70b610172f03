"""bulk: 2,000,000 distinct keys (200,000 with --quick) written with set_multi in batches of
1,000, then read back with get_multi and checked; keys per second each way."""

from __future__ import annotations

from dataclasses import dataclass

from ..columns import Column, fastmc_col, floors, peer_cols
from ..context import Ctx
from ..measure import timed
from ..report import bullets, fmt_ratio, md_table, pin_note, ratio
from ..targets import BULK_TARGET_KEYS
from ..verify import diff, values_for

ITEM_BYTES = 160  # ~memcached's item size for 40-byte values and 15-byte keys, with slack


@dataclass
class Load:
    """One client's load: batches written and read back, and the seconds spent in the calls."""

    written: int = 0
    read: int = 0
    write_s: float = 0.0
    read_s: float = 0.0
    ok: bool = True


def _batch_keys(tag: str, scope: str, b: int, batch: int) -> list[str]:
    return [f"{tag}:{scope}:{i:08d}" for i in range(b * batch, (b + 1) * batch)]


def run(ctx: Ctx) -> None:
    cols = ctx.columns(ctx.servers1)
    total, note = _size(ctx)
    batch = ctx.s.bulk_batch
    _warm_up(ctx, floors(cols)[-1], total // batch, batch)
    rows = []
    res: dict = {}
    for c in cols:
        load = _load(ctx, c, total // batch, batch)
        rows.append(_row(c, load, total // batch, batch, res))
    ctx.report.data["bulk"] = {"keys": total, "batch": batch, "rates": res}
    report(ctx, cols, res, rows, total, note)


def _size(ctx: Ctx) -> tuple[int, str]:
    """The keys to load, fewer (and a note saying so) when the server's memory is too small."""
    total, batch = ctx.s.bulk_keys, ctx.s.bulk_batch
    limit = ctx.limit_maxbytes
    if limit and limit < total * ITEM_BYTES:
        total = max(batch, int(limit / ITEM_BYTES) // batch * batch)
        return total, (
            f" Server memory ({limit >> 20} MiB) is too small for {ctx.s.bulk_keys:,} keys; "
            f"loaded {total:,} instead."
        )
    return total, ""


def _warm_up(ctx: Ctx, w: Column, nb: int, batch: int) -> None:
    """Not timed: the server allocates its memory for this many items once, so the first client
    measured does not pay for it (deleted items leave their slab pages for reuse)."""
    for b in range(nb):
        keys = _batch_keys(w.tag, "w", b, batch)
        stored = w.stored_ok(w.set_multi(dict(zip(keys, values_for(keys, "|w")))), batch)
        ctx.failures.check("bulk warm-up", w, stored, f"batch {b} not stored")
    for b in range(nb):
        w.delete_multi(_batch_keys(w.tag, "w", b, batch))


def _load(ctx: Ctx, c: Column, nb: int, batch: int) -> Load:
    """Write every batch, read every batch written back, then delete them (not timed). A peer
    stops a phase once its time budget is spent; fastmc and the floor always load everything."""
    budget = ctx.s.bulk_peer_budget if c.kind == "peer" else None
    load = Load()
    try:
        _write(ctx, c, load, nb, batch, budget)
        if load.ok:
            _read(ctx, c, load, batch, budget)
        for b in range(load.written):  # free the server's memory for the next client
            c.delete_multi(_batch_keys(c.tag, "b", b, batch))
    except Exception as e:
        ctx.failures.add("bulk", c.name, f"raised {e!r}")
        load.ok = False
    return load


def _write(ctx: Ctx, c: Column, load: Load, nb: int, batch: int, budget: float | None) -> None:
    for b in range(nb):
        keys = _batch_keys(c.tag, "b", b, batch)
        t, r = timed(c.set_multi, dict(zip(keys, values_for(keys, "|b"))))
        load.write_s += t
        if not c.stored_ok(r, batch):
            load.ok = ctx.failures.check("bulk write", c, False, f"batch {b}: {str(r)[:80]}")
            return
        load.written += 1
        if budget is not None and load.write_s > budget:
            return


def _read(ctx: Ctx, c: Column, load: Load, batch: int, budget: float | None) -> None:
    for b in range(load.written):
        keys = _batch_keys(c.tag, "b", b, batch)
        t, r = timed(c.get_multi, keys)
        load.read_s += t
        got = c.decode_get(r, keys)
        want = dict(zip(keys, values_for(keys, "|b")))
        if len(got) != batch or any(got.get(k) != v for k, v in want.items()):
            load.ok = ctx.failures.check("bulk read", c, False, f"batch {b}: {diff(got, want)}")
            return
        load.read += 1
        if budget is not None and load.read_s > budget:
            return


def _row(c: Column, load: Load, nb: int, batch: int, res: dict) -> list:
    """The client's table row; its rates go to `res` (None when it failed)."""
    if not load.ok:
        res[c.name] = None
        return [c.name, "failed", "", "failed", ""]
    w_rate = load.written * batch / load.write_s if load.write_s else None
    r_rate = load.read * batch / load.read_s if load.read_s else None
    partial = "" if load.written == nb else f" ({load.written * batch:,} keys in the time budget)"
    partial_r = "" if load.read == nb else f" ({load.read * batch:,} keys)"
    res[c.name] = {
        "write_keys_per_s": w_rate,
        "read_keys_per_s": r_rate,
        "keys_written": load.written * batch,
        "keys_read": load.read * batch,
    }
    print(
        f"  bulk {c.name}: write {w_rate or 0:,.0f} keys/s, read {r_rate or 0:,.0f} keys/s",
        flush=True,
    )
    return [
        c.name,
        f"{w_rate:,.0f}{partial}" if w_rate else "n/a",
        f"{load.write_s:.2f}",
        f"{r_rate:,.0f}{partial_r}" if r_rate else "n/a",
        f"{load.read_s:.2f}",
    ]


def _ratios(cols: list, res: dict, fr: dict) -> list:
    """fastmc's rates against the floor's and each peer's, one line each."""

    def best_floor(key: str) -> float | None:
        return max((res[c.name][key] for c in floors(cols) if res.get(c.name)), default=None)

    w, r = "write_keys_per_s", "read_keys_per_s"
    lines = [
        f"fastmc ÷ floor (keys/s, higher is better): write "
        f"×{fmt_ratio(ratio(fr[w], best_floor(w)))}, read ×{fmt_ratio(ratio(fr[r], best_floor(r)))}"
    ]
    for p in peer_cols(cols):
        pr = res.get(p.name)
        if pr:
            lines.append(
                f"fastmc ÷ {p.name}: write ×{fmt_ratio(ratio(fr[w], pr[w]))}, "
                f"read ×{fmt_ratio(ratio(fr[r], pr[r]))}"
            )
    return lines


def report(ctx: Ctx, cols: list, res: dict, rows: list, total: int, note: str) -> None:
    fc = fastmc_col(cols)
    fr = res.get(fc.name) if fc else None
    ratios = _ratios(cols, res, fr) if fr else []
    scope = "" if total == BULK_TARGET_KEYS else f" (on {total:,} keys)"
    for what, key in (("written", "write_keys_per_s"), ("read back", "read_keys_per_s")):
        v = fr[key] if fr else None
        measured = f"{v:,.0f} keys/s" if v else ("fastmc missing" if not fc else "failed")
        ctx.report.judge("bulk_rate", measured, v, what=what, scope=scope)
    batch = ctx.s.bulk_batch
    headers = ["client", "write (keys/s)", "write (s)", "read (keys/s)", "read (s)"]
    ctx.report.emit(
        f"Bulk load: {total:,} distinct keys in batches of {batch:,}",
        f"set_multi of every batch, then get_multi of every batch (checked); time is the "
        f"sum of the calls. Peers that cannot load everything in {ctx.s.bulk_peer_budget:g} s "
        f"per phase are measured on the keys they did load (rate = keys ÷ time). An untimed "
        f"warm-up load first makes the server allocate its memory, so no client pays for "
        f"that.{note} {pin_note(ctx.pinned_now)}\n\n"
        + md_table(headers, rows)
        + ("\n\n" + bullets(ratios) if ratios else ""),
    )
