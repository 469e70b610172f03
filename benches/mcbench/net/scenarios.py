"""What `make bench-net` measures at each round-trip time, through the simulated network: single
operations, multi operations over 3 and over 10 servers (100 and 1,000 keys), 8 threads; with
the same columns, steps and checks as bench.py (the floor, the bound, fastmc and the peers), and
the network targets."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from ..columns import PEER_MAKERS, Bound, Floor, fastmc_col, floors, make_fastmc, peer_cols
from ..context import Ctx
from ..measure import Samples, median
from ..report import LEGEND, fmt_num, fmt_ratio, md_table, ratio, ratio_headers, ratio_row
from ..scenarios import single, threads
from ..scenarios.multi import _round as multi_round
from ..scenarios.steps import interleaved
from ..settings import VALUE_SIZE
from ..targets import TARGETS

NET_PEERS = ("pylibmc", "pymemcache", "libmc")
SIZES = (100, 1_000)
OPS = ("set_multi", "get_multi", "delete_multi")
MULTI_ROUNDS = {100: 11, 1_000: 9}


@dataclass
class NetCtx(Ctx):
    """bench.py's run context with the peers of the network run only, and its servers."""

    peers: tuple = NET_PEERS
    servers10: list = field(default_factory=list)

    @property
    def mode(self) -> str:  # the Markdown's title: "fastmc benchmarks (network run)"
        return "network"

    def _make_columns(self, servers: list) -> list:
        tags = (f"{self.run_id}{i}" for i in range(100))
        cols: list = [Floor("floor text", next(tags), servers, "text", self.meta_ok)]
        if self.meta_ok:
            cols.append(Floor("floor meta", next(tags), servers, "meta", True))
        if self.has_fastmc:
            try:
                cols.append(make_fastmc(self.fastmc_mod, self.fastmc_name, servers, next(tags)))
            except Exception as e:  # reported loudly, the run goes on
                self.failures.add("setup", "fastmc", f"Client({servers}) raised {e!r}")
        for name in self.peers:
            try:
                cols.append(PEER_MAKERS[name](servers, next(tags)))
            except Exception as e:
                self.failures.add("setup", name, f"could not create client: {e!r}")
        return cols


def run_all(ctx: NetCtx, rtt: str, rtt_us: float) -> dict:
    """Every net scenario at one round-trip time (`rtt`, e.g. "RTT 0.2 ms"); the medians."""
    out = {
        "single": run_single(ctx, rtt),
        "multi": run_multi(ctx, rtt),
        "threads": run_threads(ctx, rtt, rtt_us),
    }
    ctx.report.data.setdefault("net", {})[rtt] = out
    return out


def run_single(ctx: NetCtx, rtt: str) -> dict:
    cols = ctx.columns(ctx.servers1)
    wall, _cpu = single.measure(ctx, cols)
    res = {op: {c.name: wall.med_us((op, c.name)) for c in cols} for op in single.OPS}
    rows = []
    for op in single.OPS:
        cells, _f, _fl, _best = ratio_row(res[op], cols)
        rows.append([op, *cells])
    ctx.report.emit(
        f"{rtt}: single operations, one server (µs per operation)",
        f"{ctx.s.single_ops:,} operations per loop, {ctx.s.single_rounds} rounds, median wall "
        "time per operation; each is one round trip through the simulated network. The floor "
        f"makes one raw round trip per operation. {LEGEND}\n\n"
        + md_table(["op", *ratio_headers(cols, "µs")], rows),
    )
    return res


def run_multi(ctx: NetCtx, rtt: str) -> dict:
    res = {}
    for i, (label, servers) in enumerate(
        (("3 servers", ctx.servers3), ("10 servers", ctx.servers10))
    ):
        cols = ctx.columns(servers)
        ref = Bound("raw floor", f"{ctx.run_id}n{i}", servers, ctx.meta_ok)
        samples = Samples()
        where = f"net {rtt} multi {label}"
        for n in SIZES:
            for r in range(MULTI_ROUNDS[n]):
                interleaved(ctx, samples, [*cols, ref], r, where, multi_round, n, r, where)
        ref.close()
        res[label] = _multi_report(ctx, rtt, label, cols, ref, samples)
    return res


def _multi_report(
    ctx: NetCtx, rtt: str, label: str, cols: list, ref: Bound, samples: Samples
) -> dict:
    headers = [
        "op",
        "keys",
        "raw floor (µs)",
        "fastmc ÷ raw floor",
        *ratio_headers(cols, "µs"),
        "target",
    ]
    rows, res = [], {}
    for op in OPS:
        for n in SIZES:
            meds = {c.name: samples.med_us((op, n, c.name)) for c in cols}
            rb = samples.med_us((op, n, ref.name))
            meds[ref.name] = rb
            res[f"{op} {n}"] = meds
            cells, f, _fl, best = ratio_row(meds, cols)
            r_bound, r_best = ratio(f, rb), ratio(f, best)
            ok_b, ok_p = TARGETS["net_bound"].met(r_bound), TARGETS["net_peers"].met(r_best)
            where = dict(rtt=rtt, label=label, op=op, n=n)
            ctx.report.judge(
                "net_bound",
                f"×{fmt_ratio(r_bound)} ({fmt_num(f)} vs {fmt_num(rb)} µs)",
                r_bound,
                **where,
            )
            ctx.report.judge(
                "net_peers",
                f"×{fmt_ratio(r_best)} ({fmt_num(f)} vs {fmt_num(best)} µs)",
                r_best,
                **where,
            )
            mark = "PASS" if ok_b and ok_p else ("n/a" if f is None else "FAIL")
            rows.append([op, f"{n:,}", fmt_num(rb), fmt_ratio(r_bound), *cells, mark])
    rounds = ", ".join(f"{n:,} keys: {r}" for n, r in MULTI_ROUNDS.items())
    ctx.report.emit(
        f"{rtt}: multi operations, {label} (µs per call)",
        f"Rounds: {rounds}; set_multi, then get_multi (checked), then delete_multi (checked), "
        f"{VALUE_SIZE}-byte values, keys spread over the servers. The **raw floor** is bench.py's "
        "bound through the same network: the same batch prebuilt before the clock starts, "
        "quiet writes and one `get k1 … kN` line per server, every server written before any "
        "is read, nothing parsed. Target: fastmc ≤ 1.1× the raw floor and faster than every "
        f"peer. {LEGEND}\n\n" + md_table(headers, rows),
    )
    return res


def run_threads(ctx: NetCtx, rtt: str, rtt_us: float) -> dict:
    cols = ctx.columns(ctx.servers1)
    factories, notes = threads._factories(ctx, cols)
    samples = threads.measure(ctx, [c for c in cols if c.name in factories], factories)
    T = ctx.s.threads
    ideal = T / (rtt_us / 1e6)
    fc = fastmc_col(cols)
    rows, res = [], {}
    for op in threads.OPS:
        meds = {c.name: median(samples.get((op, c.name), [])) for c in cols}
        res[op] = meds
        f = meds.get(fc.name) if fc else None
        fl = max((meds[c.name] or 0 for c in floors(cols)), default=None) or None
        r = ratio(f, ideal)
        ctx.report.judge(
            "net_threads",
            f"×{fmt_ratio(r)} ({fmt_num(f)} vs {fmt_num(ideal)} ops/s)",
            r,
            rtt=rtt,
            op=op,
            T=T,
        )
        cells = [f"{op}s", fmt_num(ideal), fmt_num(fl), fmt_ratio(ratio(fl, ideal))]
        cells += [fmt_num(f), fmt_ratio(r)]
        for p in peer_cols(cols):
            v = meds.get(p.name)
            cells.append(f"{fmt_num(v)} ({fmt_ratio(ratio(f, v))})" if v and f else fmt_num(v))
        rows.append(cells)
    headers = [
        "op",
        f"{T} ÷ RTT (ops/s)",
        "floor (ops/s)",
        "floor ÷ ideal",
        "fastmc (ops/s)",
        "fastmc ÷ ideal",
        *[p.name for p in peer_cols(cols)],
    ]
    how = "\n".join(f"- {k}: {v}" for k, v in notes.items())
    ctx.report.emit(
        f"{rtt}: {T} threads, single operations, one server (operations per second)",
        f"{T} threads × {ctx.s.thread_ops:,} operations each, {ctx.s.thread_rounds} rounds "
        f"after a warm-up round, median of total operations ÷ wall time. The ideal is {T} ÷ the "
        f"calibrated RTT ({rtt_us:.0f} µs): every thread always waiting on exactly one round "
        "trip. Each peer cell: ops/s, then (fastmc ÷ peer): above 1 means fastmc is faster. "
        f"How each client is shared:\n{how}\n\n" + md_table(headers, rows),
    )
    res["ideal"] = ideal
    return res


def draw(ctx: NetCtx, results: dict, path: str) -> None:
    """One panel per RTT: every multi row's time ÷ the raw floor's, per client (log scale)."""
    if not results:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"WARNING: matplotlib unavailable, no chart: {e!r}", file=sys.stderr)
        return
    names = ["fastmc", "floor text", "floor meta", *ctx.peers]
    colors = ["#d62728", "#555555", "#999999", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd"]
    fig, axes = plt.subplots(len(results), 1, figsize=(15, 4.8 * len(results)), squeeze=False)
    for ax, (rtt, res) in zip(axes[:, 0], results.items()):
        rows = [
            (f"{label}\n{op} {n:,}", meds)
            for label, table in res["multi"].items()
            for op in OPS
            for n in SIZES
            for meds in [table.get(f"{op} {n}", {})]
        ]
        width = 0.8 / len(names)
        for j, name in enumerate(names):
            ys = [ratio(m.get(name), m.get("raw floor")) for _, m in rows]
            xs = [i + (j - len(names) / 2 + 0.5) * width for i in range(len(rows))]
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if pts:
                ax.bar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    width,
                    label=name,
                    color=colors[j % len(colors)],
                )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(TARGETS["net_bound"].limit, color="black", linewidth=0.8, linestyle="--")
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r[0] for r in rows], fontsize=7)
        ax.set_ylabel("time ÷ raw floor (log)")
        ax.set_title(f"{rtt}: multi operations through the simulated network")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0, 0].legend(ncol=len(names), fontsize=8, loc="upper left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"chart: {path}")
