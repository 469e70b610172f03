"""Structured values stored with pickle, JSON and msgpack (docs/security.md#values-without-pickle),
side by side in one run: the bytes each stores, and the time of a `set` and a `get` of it, for a
typical API response (a dict of a dozen fields, two nested) and a list of 100 small dicts (rows).
pylibmc (pickle) is the reference.

    python benches/ab/serializers.py [--rounds 5] [--calls 2000]

Each configuration runs in a process of its own (JSON by orjson, as installed, and by the
standard library with orjson hidden), one memcached on a free port, text protocol; the rounds
interleave the configurations and the best round of each is kept. Times are wall-clock
microseconds per call on this machine, client and server sharing its cores: compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))

API = {
    "id": 12345,
    "name": "Ada Lovelace",
    "email": "ada@example.com",
    "active": True,
    "score": 98.5,
    "roles": ["admin", "editor"],
    "address": {"street": "12 Analytical Way", "city": "London", "zip": "N1 9GU"},
    "created": "2024-05-01T12:00:00Z",
    "tags": ["a", "b", "c"],
    "prefs": {"theme": "dark", "lang": "en", "tz": None},
}
ROWS = [
    {"id": i, "sku": "SKU-%05d" % i, "price": i * 1.25, "qty": i % 7, "ok": i % 2 == 0}
    for i in range(100)
]
VALUES = {"api response": API, "100 rows": ROWS}
# (label, client module, serializer, hide orjson)
CONFIGS = [
    ("pylibmc pickle", "pylibmc", None, False),
    ("fastmc pickle", "fastmc", "pickle", False),
    ("fastmc json (orjson)", "fastmc", "json", False),
    ("fastmc json (stdlib)", "fastmc", "json", True),
    ("fastmc msgpack", "fastmc", "msgpack", False),
]


def child(module: str, serializer: str | None, address: str, calls: int) -> None:
    """One configuration: per value, bytes stored and µs per set and per get."""
    import gc

    mod = __import__(module)
    kwargs = {} if serializer is None else {"serializer": serializer}
    if module == "fastmc":
        import fastmc._formats

        assert serializer != "json" or os.environ["EXPECT_JSON"] == fastmc._formats.JSON
    mc = mod.Client([address], **kwargs)
    out = {}
    gc.disable()
    for name, value in VALUES.items():
        key = "ser:%s:%s" % (module, name.replace(" ", "_"))
        mc.set(key, value)
        assert mc.get(key) == value
        stored = _stored_len(address, key)
        t0 = time.perf_counter()
        for _ in range(calls):
            mc.set(key, value)
        t1 = time.perf_counter()
        for _ in range(calls):
            mc.get(key)
        t2 = time.perf_counter()
        out[name] = {
            "bytes": stored,
            "set": (t1 - t0) / calls * 1e6,
            "get": (t2 - t1) / calls * 1e6,
        }
    print(json.dumps(out))


def _stored_len(address: str, key: str) -> int:
    import fastmc

    class Raw(fastmc.Client):
        def deserialize(self, data: bytes, flags: int) -> bytes:
            return data

    return len(Raw([address]).get(key))


def run(config: tuple, address: str, calls: int) -> dict:
    _, module, serializer, hide = config
    code = (
        ("import sys; sys.modules['orjson'] = None\n" if hide else "")
        + "import runpy, sys\n"
        + "sys.argv = %r\n" % [__file__, "--child", module, serializer or "", address, str(calls)]
        + "runpy.run_path(%r, run_name='__main__')\n" % __file__
    )
    env = dict(os.environ, EXPECT_JSON="json" if hide else "orjson")
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        module, serializer, address, calls = sys.argv[2:6]
        child(module, serializer or None, address, int(calls))
        return
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    from memcached import Memcached

    server = Memcached()
    best: dict[str, dict] = {}
    try:
        for _ in range(a.rounds):
            for config in CONFIGS:
                got = run(config, server.address, a.calls)
                mine = best.setdefault(config[0], got)
                for name, row in got.items():
                    for what in ("set", "get"):
                        mine[name][what] = min(mine[name][what], row[what])
    finally:
        server.stop()
    ref = best["fastmc pickle"]
    for name in VALUES:
        print("\n%s\n" % name)
        print(
            "| stored with | bytes | set µs | get µs | set ÷ fastmc pickle | get ÷ fastmc pickle |"
        )
        print("|---|---|---|---|---|---|")
        for label, *_ in CONFIGS:
            r = best[label][name]
            print(
                "| %s | %d | %.1f | %.1f | %.2f | %.2f |"
                % (
                    label,
                    r["bytes"],
                    r["set"],
                    r["get"],
                    r["set"] / ref[name]["set"],
                    r["get"] / ref[name]["get"],
                )
            )


if __name__ == "__main__":
    main()
