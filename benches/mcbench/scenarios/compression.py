"""compression: zlib (pylibmc's) against fastmc's opt-in zstd (docs/features.md#compression-zstd),
on realistic values made deterministically: JSON API responses, HTML fragments and pickled
objects.

Two tables. The codecs alone, in this process: the size of each value compressed (÷ its size),
then compress and decompress time per value, for zlib at levels 1, 6 (pylibmc's default,
`compress_level=-1`) and 9 through CPython's `zlib` (the module fastmc and pylibmc compress with),
and zstd at levels 1 and 3, without and with a dictionary trained on other values of the same
kind, through python-zstandard (the same libzstd, 1.5.7, that fastmc links). Then end to end
through fastmc against memcached, in the same rounds: single set/get and 100-key
set_multi/get_multi, uncompressed, zlib, zstd 1, zstd 3 and zstd 3 with the dictionary, with
pylibmc's zlib as the reference. Every read is checked against what was written."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import pickle
import random
import zlib
from typing import Any, Callable

from ..context import Ctx
from ..measure import Samples, rotated, timed
from ..report import md_table

KINDS = ("json", "html", "pickle")
KEYS = 100
DICT_SIZE = 16 << 10
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "cache",
    "server",
    "client",
    "value",
    "shipping",
    "order",
    "status",
    "pending",
    "paid",
    "refund",
    "customer",
    "product",
    "price",
    "quantity",
    "color",
    "size",
    "small",
    "medium",
    "large",
    "review",
    "rating",
    "account",
    "premium",
    "basic",
    "trial",
    "active",
    "region",
    "europe",
    "america",
    "asia",
    "warehouse",
    "stock",
]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _json(rng: random.Random) -> str:
    """An API response: a page of orders, each with a customer and its lines."""
    orders = []
    for _ in range(rng.randrange(4, 12)):
        orders.append(
            {
                "id": rng.randrange(10**6, 10**7),
                "status": rng.choice(["pending", "paid", "shipped", "refunded"]),
                "created_at": "2026-%02d-%02dT%02d:%02d:%02dZ"
                % tuple(rng.randrange(1, m) for m in (13, 29, 24, 60, 60)),
                "customer": {
                    "id": rng.randrange(10**5),
                    "name": _words(rng, 2).title(),
                    "email": "%s@example.com" % rng.choice(WORDS),
                    "tier": rng.choice(["basic", "premium", "trial"]),
                },
                "lines": [
                    {
                        "sku": "SKU-%06d" % rng.randrange(10**6),
                        "title": _words(rng, rng.randrange(2, 6)),
                        "quantity": rng.randrange(1, 5),
                        "unit_price": round(rng.uniform(1, 500), 2),
                    }
                    for _ in range(rng.randrange(1, 5))
                ],
                "notes": _words(rng, rng.randrange(0, 20)),
            }
        )
    return json.dumps({"data": orders, "page": rng.randrange(1, 50), "has_more": True})


def _html(rng: random.Random) -> str:
    """A rendered fragment: a list of product cards."""
    cards = []
    for _ in range(rng.randrange(6, 20)):
        pid = rng.randrange(10**5)
        cards.append(
            '<li class="card product-card" data-id="%d">\n'
            '  <a href="/products/%d"><img src="/static/img/%d.jpg" alt="%s" loading="lazy"></a>\n'
            '  <h3 class="card-title">%s</h3>\n'
            '  <p class="card-text">%s</p>\n'
            '  <span class="price">$%.2f</span> <span class="badge badge-%s">%s</span>\n'
            "</li>"
            % (
                pid,
                pid,
                pid,
                _words(rng, 3),
                _words(rng, 4).title(),
                _words(rng, rng.randrange(8, 30)),
                rng.uniform(1, 500),
                rng.choice(["new", "sale", "stock"]),
                rng.choice(WORDS),
            )
        )
    return '<ul class="product-list">\n%s\n</ul>' % "\n".join(cards)


def _object(rng: random.Random) -> Any:
    """A cached object graph: rows as a Django queryset's values() might cache them."""
    return [
        {
            "id": rng.randrange(10**6),
            "name": _words(rng, 2),
            "joined": datetime.date(2020 + rng.randrange(6), rng.randrange(1, 13), 1),
            "balance": decimal.Decimal("%d.%02d" % (rng.randrange(10**4), rng.randrange(100))),
            "tags": tuple(rng.choice(WORDS) for _ in range(rng.randrange(1, 5))),
            "active": rng.random() < 0.5,
        }
        for _ in range(rng.randrange(5, 25))
    ]


MAKERS: dict[str, Callable[[random.Random], Any]] = {
    "json": _json,
    "html": _html,
    "pickle": _object,
}


def values(kind: str, n: int, seed: int) -> list:
    rng = random.Random("%s-%d" % (kind, seed))
    return [MAKERS[kind](rng) for _ in range(n)]


def stored_bytes(value: Any) -> bytes:
    """The bytes a client compresses: UTF-8 text, or the pickle (pylibmc's protocol)."""
    return value.encode() if isinstance(value, str) else pickle.dumps(value, -1)


def _codecs(dictionaries: dict) -> dict:
    import zstandard

    def zstd(level: int, kind_dict: bool) -> Callable:
        def make(kind: str) -> tuple[Callable, Callable]:
            d = zstandard.ZstdCompressionDict(dictionaries[kind]) if kind_dict else None
            c = zstandard.ZstdCompressor(level=level, dict_data=d, write_checksum=True)
            u = zstandard.ZstdDecompressor(dict_data=d)
            return c.compress, u.decompress

        return make

    def zl(level: int) -> Callable:
        return lambda kind: (lambda b: zlib.compress(b, level), zlib.decompress)

    return {
        "zlib 1": zl(1),
        "zlib 6": zl(6),
        "zlib 9": zl(9),
        "zstd 1": zstd(1, False),
        "zstd 3": zstd(3, False),
        "zstd 1 + dict": zstd(1, True),
        "zstd 3 + dict": zstd(3, True),
    }


def _each(f: Callable, xs: list) -> list:
    return [f(x) for x in xs]


def _codec_table(ctx: Ctx, data: dict, dictionaries: dict) -> None:
    codecs = _codecs(dictionaries)
    samples = Samples()
    sizes: dict = {}
    for r in range(ctx.s.single_rounds * 3):
        for kind in KINDS:
            raw = data[kind]
            for name in rotated(list(codecs), r):
                comp, decomp = codecs[name](kind)
                t, packed = timed(_each, comp, raw)
                samples.add(("compress", kind, name), t / len(raw))
                t, back = timed(_each, decomp, packed)
                samples.add(("decompress", kind, name), t / len(raw))
                if back != raw:
                    ctx.failures.add("compression", name, "a value did not round-trip")
                sizes[kind, name] = sum(map(len, packed)) / sum(map(len, raw))
    rows, out = [], {}
    for kind in KINDS:
        avg = sum(map(len, data[kind])) / len(data[kind])
        for name in codecs:
            c = samples.med_us(("compress", kind, name))
            d = samples.med_us(("decompress", kind, name))
            ratio = sizes[kind, name]
            out[f"{kind} {name}"] = {"size": ratio, "compress_us": c, "decompress_us": d}
            rows.append(
                [f"{kind} ({avg / 1024:.1f} KiB)", name, f"{ratio:.3f}", f"{c:.1f}", f"{d:.1f}"]
            )
    ctx.report.data["compression_codecs"] = out
    ctx.report.emit(
        "Compression codecs alone (per value)",
        f"{KEYS} values of each kind, made deterministically; the dictionaries ({DICT_SIZE >> 10} "
        "KiB, one per kind) were trained on 500 other values of that kind. Size: compressed ÷ "
        "original, all values together (lower is better). Times: median µs per value. zlib "
        "is CPython's `zlib`, zstd is python-zstandard on the libzstd fastmc links, with "
        "the checksum fastmc writes.\n\n"
        + md_table(["values", "codec", "size", "compress µs", "decompress µs"], rows),
    )


def _clients(ctx: Ctx, dictionaries: dict) -> dict:
    """(client, min_compress_len) per column and kind."""
    fm = ctx.fastmc_mod
    s = ctx.servers1
    plain = fm.Client(s)
    z1 = fm.Client(s, compression="zstd", zstd_level=1)
    z3 = fm.Client(s, compression="zstd", zstd_level=3)
    cols: dict = {}
    for kind in KINDS:
        zd = fm.Client(s, compression="zstd", zstd_level=3, zstd_dict=dictionaries[kind])
        cols[kind] = {
            "none": (plain, 0),
            "zlib": (plain, 1),
            "zstd 1": (z1, 1),
            "zstd 3": (z3, 1),
            "zstd 3 + dict": (zd, 1),
        }
        with contextlib.suppress(ImportError):
            import pylibmc

            if pylibmc is not fm:
                cols[kind]["pylibmc zlib"] = (pylibmc.Client(s), 1)
    return cols


def _e2e_round(ctx, samples, mc, mcl, name, kind, items, ops) -> None:
    keys = list(items)
    first = keys[0]
    value = items[first]
    t, _ = timed(lambda: [mc.set(first, value, min_compress_len=mcl) for _ in range(ops)])
    samples.add(("set", kind, name), t / ops)
    t, got = timed(lambda: [mc.get(first) for _ in range(ops)])
    samples.add(("get", kind, name), t / ops)
    if got[-1] != value:
        ctx.failures.add("compression", name, "get returned another value")
    calls = max(1, ops // 50)
    t, _ = timed(lambda: [mc.set_multi(items, min_compress_len=mcl) for _ in range(calls)])
    samples.add(("set_multi(100)", kind, name), t / calls)
    t, got = timed(lambda: [mc.get_multi(keys) for _ in range(calls)])
    samples.add(("get_multi(100)", kind, name), t / calls)
    if got[-1] != items:
        ctx.failures.add("compression", name, "get_multi returned other values")


def _e2e_table(ctx: Ctx, objects: dict, dictionaries: dict) -> None:
    cols = _clients(ctx, dictionaries)
    ops = max(50, ctx.s.single_ops // 5)
    samples = Samples()
    names = list(cols[KINDS[0]])
    for r in range(ctx.s.single_rounds * 3):
        for kind in KINDS:
            for name in rotated(names, r):
                mc, mcl = cols[kind][name]
                prefix = "cmp:%s:%s:" % (kind, name.replace(" ", "_"))
                items = {prefix + str(i): v for i, v in enumerate(objects[kind])}
                _e2e_round(ctx, samples, mc, mcl, name, kind, items, ops)
    rows, out = [], {}
    for kind in KINDS:
        for op in ("set", "get", "set_multi(100)", "get_multi(100)"):
            base = samples.med_us((op, kind, "zlib"))
            cells = []
            for name in names:
                us = samples.med_us((op, kind, name))
                out[f"{op} {kind} {name}"] = us
                if us is None:
                    cells.append("—")
                elif name == "zlib" or not base:
                    cells.append(f"{us:.1f}")
                else:
                    cells.append(f"{us:.1f} (×{us / base:.2f})")
            rows.append([op, kind, *cells])
    ctx.report.data["compression_e2e"] = out
    ctx.report.emit(
        "Compression end to end (µs per call)",
        "fastmc against one memcached, the same rounds, columns in a rotating order; "
        "`min_compress_len=1` on every compressed write (pylibmc compresses only when asked). "
        "Each cell: the median, then (÷ fastmc's `zlib`). JSON and HTML are stored as str, "
        "the objects pickled by the client.\n\n" + md_table(["call", "values", *names], rows),
    )


def run(ctx: Ctx) -> None:
    if not ctx.has_fastmc or ctx.standin:
        return
    try:
        import zstandard  # noqa: F401 (the codec table's zstd)
    except ImportError:
        print("compression: python-zstandard is not installed; skipped")
        return
    objects = {kind: values(kind, KEYS, 1) for kind in KINDS}
    data = {kind: [stored_bytes(v) for v in objects[kind]] for kind in KINDS}
    train = ctx.fastmc_mod.values.train_zstd_dict
    dictionaries = {
        kind: train([stored_bytes(v) for v in values(kind, 500, 2)], DICT_SIZE) for kind in KINDS
    }
    _codec_table(ctx, data, dictionaries)
    _e2e_table(ctx, objects, dictionaries)
