"""What a run reports: cells and ratios, Markdown tables, the sections and the target rows the
scenarios add (`Report`). What it writes from them is `files.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .columns import fastmc_col, floors, peer_cols
from .targets import TARGETS

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
