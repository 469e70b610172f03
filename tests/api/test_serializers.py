"""Values without pickle (docs/security.md#values-without-pickle): `serializer="json"` and
`"msgpack"` on both clients and every read path, exact or refused before anything is sent,
decoded by their flags by every fastmc reader, refused cleanly by real pylibmc, and bounded
whatever a hostile value in the cache holds."""

import os
import struct
import subprocess
import sys
from collections import OrderedDict
from datetime import date, datetime
from decimal import Decimal
from enum import IntEnum

import fastmc
import pylibmc
import pytest
from planted import Raw, Writer

FLAGS = {"json": 1024 | 6, "msgpack": 2048 | 6}
KEY = b"k" * 32


class Level(IntEnum):
    HIGH = 2


def values(fmt):
    """What each format stores exactly (bytes inside a structure: msgpack only)."""
    common = [
        {"id": 7, "name": "Ada", "tags": ["a", "b"], "score": 9.75, "active": True, "n": None},
        [{"id": i, "price": i / 3, "ok": i % 2 == 0} for i in range(50)],
        {"nested": {"deeper": [[], {}, [1, [2, [3]]]]}, "unicode": "é ü 中 😀"},
        1.5,
        -0.0,
        None,
        [],
        {},
        [True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1],
        {"": "", "0": 0},
        [1e16, 1e-7, 0.1, 5e-324, 1.7976931348623157e308, -2.5],
    ]
    if fmt == "json":
        return common
    return [*common, {"raw": b"\x00\xff", "list": [b"", b"x" * 300]}]


def same(a, b):
    """Equal, and of the same types all the way down (1 == 1.0 == True would pass `==`)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    else:
        assert a == b or (a != a and b != b)


@pytest.fixture(params=["json", "msgpack"])
def fmt(request):
    return request.param


@pytest.fixture
def writer(server):
    return Writer([server.address])


def test_values_come_back_exactly_on_every_read_path(make, fmt):
    mc = make(serializer=fmt, behaviors={"cas": True})
    for i, v in enumerate(values(fmt)):
        key = "v%d" % i
        assert mc.set(key, v)
        same(mc.get(key), v)
        same(mc.get_multi([key])[key], v)
        same(mc.gets(key)[0], v)
        same(mc.gat(key, 0), v)
        same(mc.get_or_set(key, lambda: "not called"), v)
    assert mc.set_multi({"m%d" % i: v for i, v in enumerate(values(fmt))}) == []
    got = mc.get_multi(["m%d" % i for i in range(len(values(fmt)))])
    for i, v in enumerate(values(fmt)):
        same(got["m%d" % i], v)


def test_the_flags_are_their_own_and_compression_keeps_them(make, fmt, server):
    raw = Raw([server.address])
    mc = make(serializer=fmt)
    doc = {"rows": [{"id": i, "name": "row %d" % i} for i in range(300)]}
    mc.set("plain", doc)
    mc.set("zlib", doc, min_compress_len=1)
    assert raw.get("plain")[1] == FLAGS[fmt]
    assert raw.get("zlib")[1] == FLAGS[fmt] | 8
    zstd = make(serializer=fmt, compression="zstd", zstd_min_len=1)
    zstd.set("zstd", doc)
    assert raw.get("zstd")[1] == FLAGS[fmt] | 512 | 8
    for key in ("plain", "zlib", "zstd"):
        same(mc.get(key), doc)
    # str, bytes, int and bool keep pylibmc's flags
    for v, flags in (("text", 16), (b"bytes", 0), (5, 4), (True, 2)):
        mc.set("p", v)
        assert raw.get("p")[1] == flags and mc.get("p") == v


def test_every_reader_decodes_by_the_flags_whatever_its_own_setting(make, fmt, server):
    doc = {"a": [1, 2.5, "x"], "b": {"c": None}}
    fastmc.Client([server.address], serializer=fmt).set("doc", doc, min_compress_len=1)
    for options in (
        {},
        {"pickle": "refuse"},
        {"serializer": "json" if fmt == "msgpack" else "msgpack"},
        {"pickle": "signed", "signing_keys": [KEY]},
        {"pickle_classes": []},
    ):
        same(make(**options).get("doc"), doc)


def test_signed_clients_write_and_read_them_beside_signed_pickles(make, fmt, server):
    mc = make(serializer=fmt, pickle="signed", signing_keys=[KEY])
    mc.set("doc", {"a": 1})
    assert Raw([server.address]).get("doc")[1] == FLAGS[fmt]
    same(mc.get("doc"), {"a": 1})


@pytest.mark.parametrize(
    "bad, why",
    [
        ((1, 2), "tuple"),
        ({1: "a"}, "dict key of type int"),
        ({("a",): 1}, "dict key of type tuple"),
        (float("nan"), "NaN or infinite"),
        (float("inf"), "NaN or infinite"),
        (date(2020, 1, 2), "date"),
        (datetime(2020, 1, 2), "datetime"),
        (Decimal("1.5"), "Decimal"),
        ({1, 2}, "set"),
        (OrderedDict(a=1), "OrderedDict"),
        (Level.HIGH, "Level"),
        (bytearray(b"x"), "bytearray"),
        ("\ud800", "surrogate|encode"),
    ],
)
def test_what_would_not_come_back_exactly_is_refused_before_sending(make, fmt, server, bad, why):
    mc = make(serializer=fmt)
    mc.set("k", "old")
    mc.delete("m2")
    with pytest.raises(TypeError, match=why):
        mc.set("k", {"inner": [bad]})
    with pytest.raises(TypeError, match=why):
        mc.set_multi({"m1": "fine", "m2": [bad]})
    reader = fastmc.Client([server.address])
    assert reader.get("k") == "old" and reader.get("m2") is None


def test_format_specific_refusals(make, server):
    js, mp = make(serializer="json"), make(serializer="msgpack")
    with pytest.raises(TypeError, match="bytes inside a structure"):
        js.set("k", {"b": b"x"})
    for mc in (js, mp):
        with pytest.raises(TypeError, match="64 bits"):
            mc.set("k", [2**64])
        with pytest.raises(TypeError, match="64 bits"):
            mc.set("k", {"n": -(2**63) - 1})
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(TypeError, match="deeper than 100"):
        js.set("k", deep)
    loop = []
    loop.append(loop)
    with pytest.raises(TypeError, match="deeper than 100"):
        mp.set("k", loop)
    # 100 levels are fine
    same_depth = deep[0]
    assert js.set("k", same_depth) and js.get("k") == same_depth


def test_real_pylibmc_raises_its_error_and_never_unpickles(server, fmt):
    """docs/security.md quotes this: pylibmc 1.6.3 meets type 6, which it does not know."""
    mc = fastmc.Client([server.address], serializer=fmt)
    mc.set("doc", {"a": 1})
    mc.set("zipped", {"rows": list(range(1000))}, min_compress_len=1)
    real = pylibmc.Client([server.address])
    assert real.__class__.__module__.startswith("pylibmc")
    for key in ("doc", "zipped"):
        with pytest.raises(pylibmc.Error, match="unknown memcached key flags 6"):
            real.get(key)
        with pytest.raises(pylibmc.Error, match="unknown memcached key flags 6"):
            real.get_multi([key])


def test_the_environment_names_the_serializer(server, monkeypatch):
    monkeypatch.setenv("FASTMC_SERIALIZER", "json")
    fastmc.Client([server.address]).set("env", {"a": 1})
    assert Raw([server.address]).get("env")[1] == FLAGS["json"]
    # an argument wins over the environment
    fastmc.Client([server.address], serializer="pickle").set("env", {"a": 1})
    assert Raw([server.address]).get("env")[1] == 1
    monkeypatch.setenv("FASTMC_SERIALIZER", "yaml")
    with pytest.raises(ValueError, match="serializer must be 'pickle', 'json' or 'msgpack'"):
        fastmc.Client([server.address])


def test_msgpack_without_its_package_fails_at_construction_and_names_the_extra(server):
    code = (
        "import sys; sys.modules['msgpack'] = None\n"
        "import fastmc\n"
        "fastmc.Client([%r]).get('x')\n"
        "try:\n"
        "    fastmc.Client([%r], serializer='msgpack')\n"
        "except ImportError as e:\n"
        "    print(e)\n" % (server.address, server.address)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'fastmc[msgpack]'" in out.stdout


def test_json_without_orjson_writes_and_reads_the_same_values(server):
    """The standard library's json (orjson not installed) reads what orjson wrote, and writes
    what it reads, value for value."""
    import fastmc._formats

    if fastmc._formats.JSON != "orjson":  # release/sid.py: no orjson wheel for CPython 3.15
        pytest.skip("orjson is not installed for this CPython: nothing to compare with")
    mc = fastmc.Client([server.address], serializer="json")
    for i, v in enumerate(values("json")):
        mc.set("o%d" % i, v)
    code = (
        "import sys; sys.modules['orjson'] = None\n"
        "import fastmc, fastmc._formats\n"
        "assert fastmc._formats.JSON == 'json'\n"
        "mc = fastmc.Client([%r], serializer='json')\n"
        "for i in range(%d):\n"
        "    v = mc.get('o%%d' %% i)\n"
        "    mc.set('s%%d' %% i, v)\n"
        "    assert mc.get('s%%d' %% i) == v\n" % (server.address, len(values("json")))
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for i, v in enumerate(values("json")):
        same(mc.get("s%d" % i), v)


# -- hostile values: whatever anyone who can write to the cache plants under these flags


def deep_json(n):
    return b"[" * n + b"]" * n


def deep_msgpack(n):
    return b"\x91" * (n - 1) + b"\x90"


HOSTILE = [
    # (format, bytes, the error's class, what it says)
    ("json", deep_json(100_000), fastmc.RefusedValueError, "deeper than 100"),
    ("json", deep_json(101), fastmc.RefusedValueError, "deeper than 100"),
    ("json", b'{"a": [1, 2', fastmc.Error, "json"),
    ("json", b"\xff\xfe", fastmc.Error, "not UTF-8"),
    ("json", b"", fastmc.Error, "json"),
    ("json", b"[" + b"9" * 100_000 + b"]", fastmc.Error, "4300 digits"),
    ("json", b"[1] [2]", fastmc.Error, "json"),
    ("msgpack", deep_msgpack(100_000), fastmc.RefusedValueError, "deeper than 100"),
    ("msgpack", b"\xdd\xff\xff\xff\xff\x01", fastmc.Error, "truncated"),
    ("msgpack", b"\xdb\xff\xff\xff\xff", fastmc.Error, "truncated"),
    ("msgpack", b"\xd6\xff\x00\x00\x00\x00", fastmc.Error, "extension type"),
    ("msgpack", b"\xc7\x01\x05x", fastmc.Error, "extension type"),
    ("msgpack", b"\x81\x01\x02", fastmc.Error, "msgpack"),
    ("msgpack", b"\xa2\xff\xfe", fastmc.Error, "msgpack"),
    ("msgpack", b"\x01\x02", fastmc.Error, "bytes after the value"),
    ("msgpack", b"\xc1", fastmc.Error, "0xc1"),
]


@pytest.mark.parametrize("hostile", HOSTILE, ids=lambda h: "%s-%r" % (h[0], h[1][:12]))
def test_a_hostile_value_raises_a_clean_error_on_every_read_path(make, writer, hostile):
    fmt, data, cls, says = hostile
    writer.set("bad", (data, FLAGS[fmt]))
    writer.set("good", (b"fine", 16))
    mc = make(behaviors={"cas": True})
    for read in (
        lambda: mc.get("bad"),
        lambda: mc.get_multi(["good", "bad"]),
        lambda: mc.gets("bad"),
    ):
        with pytest.raises(cls, match=says) as e:
            read()
        if cls is fastmc.Error:
            assert not isinstance(e.value, fastmc.RefusedValueError)
        assert mc.get("good") == "fine"  # the connection is still in step


def test_what_a_hostile_value_may_decode_to_is_bounded_by_max_inflate(writer, server):
    """The worst a byte can become: an empty dict (msgpack: one byte) or an empty list. Under
    the bound a value is decoded, and its objects take no more than the bound; over it, it is
    refused before decoding."""
    # PyPy has no tracemalloc: there the bound is not measured (docs/packaging.md)
    tracemalloc = pytest.importorskip("tracemalloc", reason="this Python has no tracemalloc")
    bound = 8 << 20
    mc = fastmc.Client([server.address], behaviors={"max_inflate": bound})
    n = 20_000
    cases = {
        "json": [
            b"[" + b"{}," * n + b"{}]",
            b"[" + b"[]," * n + b"[]]",
            b"[" + b"0.5," * n + b"1]",
        ],
        "msgpack": [
            b"\xdd" + struct.pack(">I", n) + b"\x80" * n,
            b"\xdd" + struct.pack(">I", n) + b"\x90" * n,
            b"\xdd" + struct.pack(">I", n) + b"\xa1a" * n,
        ],
    }
    for fmt, planted in cases.items():
        for data in planted:
            writer.set("v", (data, FLAGS[fmt]))
            tracemalloc.start()
            v = mc.get("v")
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert len(v) == n + (fmt == "json")
            assert peak < bound, (fmt, data[:8], peak)
            # eight times as many elements: refused, before anything is decoded
            if fmt == "msgpack":
                big = b"\xdd" + struct.pack(">I", 8 * n) + data[5:] * 8
            else:
                big = b"[" + b",".join([data[1:-1]] * 8) + b"]"
            writer.set("v", (big, FLAGS[fmt]))
            tracemalloc.start()
            with pytest.raises(fastmc.RefusedValueError, match="max_inflate"):
                mc.get("v")
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < len(big) + (1 << 20)
    # max_inflate 0: no limit, as for compressed values
    fastmc.Client([server.address], behaviors={"max_inflate": 0}).get("v")


def test_the_structured_bits_collide_with_no_other(server):
    """pylibmc's type bits (1, 2, 4, 16), zlib (8), the signed bit (256), zstd (512)."""
    others = 1 | 2 | 4 | 8 | 16 | 256 | 512
    assert 1024 & others == 0 and 2048 & others == 0
    env = dict(os.environ, FASTMC_SERIALIZER="msgpack")
    code = "import fastmc; fastmc.Client([%r]).set('x', [1])" % server.address
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert Raw([server.address]).get("x") == (b"\x91\x01", FLAGS["msgpack"])


def test_clone_serialize_and_deserialize_keep_the_serializer(server, fmt):
    mc = fastmc.Client([server.address], serializer=fmt)
    assert mc.serializer == fmt and mc.clone().serializer == fmt
    assert fastmc.Client([server.address]).serializer == "pickle"
    data, flags = mc.serialize({"a": [1]})
    assert flags == FLAGS[fmt]
    same(mc.deserialize(data, flags), {"a": [1]})
    # any client's deserialize reads it; a subclass that calls super() keeps the rules

    class Logged(fastmc.Client):
        def serialize(self, value):
            return super().serialize(value)

    with pytest.raises(TypeError, match="tuple"):
        Logged([server.address], serializer=fmt).set("k", (1,))
    same(fastmc.Client([server.address]).deserialize(data, flags), {"a": [1]})
