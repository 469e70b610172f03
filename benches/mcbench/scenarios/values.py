"""values: what the value policy costs (docs/security.md). fastmc's clients in each mode side by
side in the same rounds, on one server: pylibmc's default (pickle allowed), pickles signed with
HMAC-SHA256, the allow-list unpickler, and pickles refused (plain values only); for a 40-byte str
and for a small JSON-like dict (which needs pickle), single get/set and 100-key get_multi/
set_multi. pylibmc is the reference column. Every read is checked against what was written."""

from __future__ import annotations

import contextlib
from typing import Any

from ..context import Ctx
from ..measure import Samples, rotated, timed
from ..report import md_table
from ..settings import VALUE_SIZE

SIGNING_KEY = b"bench-signing-key-0123456789abcdef"
MODES = ("allow", "signed", "allow list", "refuse")
KINDS = ("str", "dict")
OPS = ("get", "set", "get_multi(100)", "set_multi(100)")


def _value(kind: str, i: int) -> Any:
    if kind == "str":
        return ("v%d-" % i).ljust(VALUE_SIZE, "x")
    return {"id": i, "name": "user %d" % i, "tags": ["a", "b"], "score": 1.5, "ok": True}


def _clients(ctx: Ctx) -> dict:
    fm = ctx.fastmc_mod
    servers = ctx.servers1
    clients = {
        "allow": fm.Client(servers),
        "signed": fm.Client(servers, pickle="signed", signing_keys=[SIGNING_KEY]),
        "allow list": fm.Client(servers, pickle_classes=[]),
        "refuse": fm.Client(servers, pickle="refuse"),
    }
    with contextlib.suppress(ImportError):
        import pylibmc

        if pylibmc is not fm:
            clients["pylibmc"] = pylibmc.Client(servers)
    return clients


def run(ctx: Ctx) -> None:
    if not ctx.has_fastmc or ctx.standin:
        return
    clients = _clients(ctx)
    ops = ctx.s.single_ops
    samples = Samples()
    for r in range(ctx.s.single_rounds * 3):
        for kind in KINDS:
            keys = ["val:%s:%d" % (kind, i) for i in range(100)]
            items = {k: _value(kind, i) for i, k in enumerate(keys)}
            for name in rotated(list(clients), r):
                if name == "refuse" and kind == "dict":
                    continue  # it cannot store a dict: that is the point
                _round(ctx, samples, clients[name], name, kind, keys, items, ops)
    report(ctx, samples, list(clients))


def _round(ctx, samples, mc, name, kind, keys, items, ops) -> None:
    first = keys[0]
    value = items[first]
    t, _ = timed(lambda: [mc.set(first, value) for _ in range(ops)])
    samples.add(("set", kind, name), t / ops)
    t, got = timed(lambda: [mc.get(first) for _ in range(ops)])
    samples.add(("get", kind, name), t / ops)
    if got[-1] != value:
        ctx.failures.add("values", name, f"get returned {got[-1]!r}")
    calls = max(1, ops // 20)
    t, _ = timed(lambda: [mc.set_multi(items) for _ in range(calls)])
    samples.add(("set_multi(100)", kind, name), t / calls)
    t, got = timed(lambda: [mc.get_multi(keys) for _ in range(calls)])
    samples.add(("get_multi(100)", kind, name), t / calls)
    if got[-1] != items:
        ctx.failures.add("values", name, "get_multi returned other values")


def _judge(ctx: Ctx, mode: str, kind: str, op: str, ratio: float | None) -> None:
    measured = "—" if ratio is None else f"×{ratio:.2f}"
    ctx.report.judge("values_cost", measured, ratio, mode=mode, kind=kind, op=op)


def report(ctx: Ctx, samples: Samples, names: list) -> None:
    rows, data = [], {}
    for kind in KINDS:
        for op in OPS:
            base = samples.med_us((op, kind, "allow"))
            cells = []
            for name in names:
                us = samples.med_us((op, kind, name))
                data[f"{op} {kind} {name}"] = us
                if us is None:
                    cells.append("—")
                elif name == "allow" or not base:
                    cells.append(f"{us:.2f}")
                else:
                    cells.append(f"{us:.2f} (×{us / base:.2f})")
                if name in MODES and name != "allow" and us is not None:
                    _judge(ctx, name, kind, op, us / base if base else None)
            rows.append([op, kind, *cells])
    ctx.report.data["values"] = data
    ctx.report.emit(
        "What the value policy costs (µs per call)",
        "One server, the same rounds, clients in a rotating order. Each cell: the median, then "
        "(÷ fastmc's default `allow`). `signed`: pickles carry an HMAC-SHA256 tag (str values "
        "are not pickles and are not signed); `allow list`: pickles are unpickled by a Python "
        "`Unpickler` that checks each class (this dict names none); `refuse`: no pickle at all, "
        "so it stores the str only. The dict is a small JSON-like record, pickled.\n\n"
        + md_table(["call", "value", *names], rows),
    )
