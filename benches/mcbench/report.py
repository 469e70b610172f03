"""What a run prints and writes: cells and ratios, Markdown tables, the sections and the target
rows the scenarios add, the summary, the Markdown and JSON files, and the speed-up chart."""

from __future__ import annotations

import datetime
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from .columns import fastmc_col, floors, peer_cols
from .settings import FASTMC_MODULE_ENV
from .targets import TARGETS

if TYPE_CHECKING:
    from .context import Ctx

LEGEND = (
    "Each peer cell: the peer's median, then (fastmc ÷ peer): below 1 means fastmc is "
    "faster. The floor is the lower of the raw text and meta batches (`text`/`meta`): "
    "N commands and a marker, as benches/README.md defines it."
)


def fmt_num(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


fmt_ratio = fmt_num  # ratios are rounded as the figures are


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def bullets(lines: list[str]) -> str:
    return "\n".join(f"- {x}" for x in lines)


def pin_note(pinned_now: bool) -> str:
    if pinned_now:
        return (
            "Client and servers pinned to one CPU (`--pin auto`; see the README: on a small "
            "VM an unpinned loopback round trip flips between ~7 and ~80 µs)."
        )
    return "Not pinned: round trips may be noisy."


def best_floor(meds: dict, cols: list) -> tuple:
    """The floor is the lower of the raw variants measured in this run."""
    cands = [(meds.get(c.name), c.name) for c in floors(cols) if meds.get(c.name) is not None]
    if not cands:
        return None, ""
    v, name = min(cands)
    return v, name.split()[-1]


def ratio_row(
    meds: dict, cols: list, fmt: Callable = fmt_num, lower_is_better: bool = True
) -> tuple:
    """Cells for: floor, fastmc, fastmc/floor, each peer (with fastmc/peer), fastmc/best peer."""
    fl, fl_name = best_floor(meds, cols)
    fc = fastmc_col(cols)
    f = meds.get(fc.name) if fc else None
    cells = [
        f"{fmt(fl)} {fl_name}" if fl is not None else "n/a",
        fmt(f) if fc else "missing",
        fmt_ratio(ratio(f, fl)),
    ]
    best = None
    for p in peer_cols(cols):
        v = meds.get(p.name)
        if v is None:
            cells.append("n/a")
            continue
        if best is None or (v < best if lower_is_better else v > best):
            best = v
        cells.append(f"{fmt(v)} ({fmt_ratio(ratio(f, v))})" if f is not None else fmt(v))
    cells.append(fmt_ratio(ratio(f, best)))
    return cells, f, fl, best


def ratio_headers(cols: list, unit: str) -> list:
    return [
        f"floor ({unit})",
        f"fastmc ({unit})",
        "fastmc ÷ floor",
        *[p.name + (f" [{p.note}]" if p.note else "") for p in peer_cols(cols)],
        "fastmc ÷ best peer",
    ]


@dataclass
class Outcome:
    """One row of the summary."""

    scenario: str
    target: str
    measured: str
    ok: bool | None  # None: not measurable in this run


@dataclass
class Report:
    """The sections, summary rows and raw medians the scenarios add, in the order they ran."""

    sections: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    data: dict = field(default_factory=dict)  # scenario -> raw medians, for the JSON

    def emit(self, title: str, body: str) -> None:
        text = f"## {title}\n\n{body}\n"
        self.sections.append(text)
        print("\n" + text, flush=True)

    def target(self, scenario: str, target: str, measured: str, ok: bool | None) -> None:
        self.outcomes.append(Outcome(scenario, target, measured, ok))

    def judge(
        self, key: str, measured: str, value: float | None, also: bool = True, **label: object
    ) -> None:
        """A summary row for the threshold TARGETS[key]: PASS when `value` meets it (and
        `also` holds), its label filled in with `label`."""
        t = TARGETS[key]
        self.target(t.scenario, t.label.format(**label), measured, t.met(value) and also)


def summary(ctx: Ctx) -> str:
    rows = []
    for t in ctx.report.outcomes:
        mark = "PASS" if t.ok else ("n/a" if t.ok is None else "FAIL")
        rows.append([t.scenario, t.target, t.measured, mark])
    npass = sum(1 for t in ctx.report.outcomes if t.ok)
    nfail = sum(1 for t in ctx.report.outcomes if t.ok is False)
    head = f"{npass} PASS, {nfail} FAIL."
    if not ctx.has_fastmc:
        head += f" **fastmc could not be imported ({ctx.fastmc_error}): every target FAILS.**"
    elif ctx.standin:
        head += (
            f" **The fastmc column is a stand-in ({ctx.fastmc_name}, via "
            f"{FASTMC_MODULE_ENV}); these are not fastmc's results.**"
        )
    return head + "\n\n" + md_table(["scenario", "target", "measured", "result"], rows)


def markdown(ctx: Ctx, env: dict, summ: str) -> str:
    """The whole Markdown report: title, warnings, environment, every section, the summary."""
    parts = [
        f"# fastmc benchmarks ({ctx.mode} run)\n",
        "Generated by `benches/bench.py`; see `benches/README.md`. All figures are from "
        "this one run: medians, clients interleaved round by round.\n",
    ]
    if not ctx.has_fastmc:
        parts.append(
            f"> **WARNING: fastmc could not be imported ({ctx.fastmc_error}). Its column is "
            "missing.**\n"
        )
    elif ctx.standin:
        parts.append(
            f"> **The fastmc column is a stand-in: {ctx.fastmc_name} via {FASTMC_MODULE_ENV} "
            "(development aid). These are not fastmc's results.**\n"
        )
    if ctx.failures.items:
        parts.append(
            "> **VERIFICATION FAILURES:**\n"
            + "\n".join(f"> - {m}" for m in ctx.failures.items)
            + "\n"
        )
    env_rows = [[k, str(v)] for k, v in env.items()]
    parts.append("## Environment\n\n" + md_table(["", ""], env_rows) + "\n")
    parts += ctx.report.sections
    parts.append("## Summary: targets\n\n" + summ + "\n")
    return "\n".join(parts)


def write_files(ctx: Ctx, env: dict) -> tuple[str, str]:
    """bench-<mode>.md and bench-<mode>.json under --out; returns (Markdown path, summary)."""
    summ = summary(ctx)
    md_path = os.path.join(ctx.out, f"bench-{ctx.mode}.md")
    with open(md_path, "w") as f:
        f.write(markdown(ctx, env, summ))
    data = dict(ctx.report.data)
    data["environment"] = env
    data["targets"] = [t.__dict__ for t in ctx.report.outcomes]
    data["failures"] = ctx.failures.items
    with open(os.path.join(ctx.out, f"bench-{ctx.mode}.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    return md_path, summ


_CHART_TITLES = {
    "get": "reads: get_multi vs loop of get",
    "set": "writes: set_multi vs loop of set",
    "delete": "writes: delete_multi vs loop of delete",
}
_PALETTE = ["#d62728", "#1f77b4", "#8c564b", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf"]


def _plot_curves(ax: object, curves: dict, names: list, xs: tuple) -> None:
    """One panel: a curve per client (fastmc bold, the floor dashed), log-log."""
    for i, name in enumerate(names):
        pts = [(x, y) for x, y in zip(xs, curves.get(name) or []) if y is not None]
        if not pts:
            continue
        if name == "floor":
            st: dict = dict(color="black", linestyle="--", linewidth=1.5)
        elif name.startswith("fastmc"):
            st = dict(color=_PALETTE[0], linewidth=3)
        else:
            st = dict(color=_PALETTE[(i - 1) % len(_PALETTE)], linewidth=1.5)
        ax.plot(  # type: ignore[attr-defined]
            [p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, label=name, **st
        )


def draw_speedup(ctx: Ctx, curves: dict, cols: list, xs: tuple) -> None:
    """multi_speedup.png under --out: the speed-up of one multi call over a loop of singles
    against keys per call, one panel per operation."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"WARNING: matplotlib unavailable, no chart: {e!r}", file=sys.stderr)
        return
    names = ["floor"] + [c.name for c in cols if c.kind != "floor"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5), sharey=True)
    for ax, op in zip(axes, ("get", "set", "delete")):
        _plot_curves(ax, curves.get(op, {}), names, xs)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(_CHART_TITLES[op])
        ax.set_xlabel("keys per call")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("speed-up of one multi call (×)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle(
        f"Multi over a loop of singles, one server, medians ({ctx.mode} run, "
        f"{datetime.date.today().isoformat()})"
    )
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    path = os.path.join(ctx.out, "multi_speedup.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")
