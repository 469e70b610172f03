"""The value policy (docs/security.md): refused pickles, signed pickles, the allow list and the
bound on inflating, on both clients and every read path, against a real memcached; and what real
pylibmc does when it meets a signed value."""

import datetime
import decimal
import os
import pickle
import subprocess
import sys
import zlib

import fastmc
import pylibmc
import pytest
from planted import Boom, Raw, Writer

# A child's peak resident memory in KiB: its own (VmHWM), where ru_maxrss would start from the
# parent's peak, inherited across the spawn.
PEAK = (
    "def peak():\n"
    "    with open('/proc/self/status') as f:\n"
    "        return int(f.read().split('VmHWM:')[1].split()[0])\n"
)

KEY = b"k" * 32
OLD_KEY = b"o" * 32


@pytest.fixture
def writer(server):
    return Writer([server.address])


def reads(mc, key):
    """Every read path of one key: each raises or each returns the same."""
    return [
        lambda: mc.get(key),
        lambda: mc.get_multi([key]),
        lambda: mc.gets(key),
        lambda: mc.get(key, "default"),
        lambda: mc[key],
        lambda: key in mc,
        lambda: mc.gat(key, 0),
    ]


def test_refuse_mode_never_unpickles_on_any_read_path(make, writer, tmp_path):
    path = tmp_path / "ran"
    writer.set("boom", (pickle.dumps(Boom(path)), 1))
    mc = make(pickle="refuse", behaviors={"cas": True})
    for read in reads(mc, "boom"):
        with pytest.raises(fastmc.RefusedValueError, match="refuses pickles"):
            read()
    assert not path.exists()
    # the control: pylibmc's default runs it
    make().get("boom")
    assert path.exists()


def test_refuse_mode_stores_plain_values_and_refuses_objects_before_sending(make, server):
    mc = make(pickle="refuse")
    for v in (b"bytes", "text", 7, True, 10**30):
        assert mc.set("plain", v) and mc.get("plain") == v
    mc.delete("obj")
    with pytest.raises(TypeError, match="needs pickle"):
        mc.set("obj", {"a": 1})
    with pytest.raises(TypeError, match="needs pickle"):
        mc.set_multi({"m1": "fine", "m2": [1, 2]})
    reader = fastmc.Client([server.address])
    assert reader.get("obj") is None and reader.get_multi(["m1", "m2"]) == {}


def test_signed_values_round_trip_compressed_or_not(make):
    mc = make(pickle="signed", signing_keys=[KEY], behaviors={"cas": True})
    big = {"rows": list(range(5000))}
    assert mc.set("small", {"a": 1}) and mc.set("big", big, min_compress_len=1)
    assert mc.get("small") == {"a": 1} and mc.get("big") == big
    assert mc.get_multi(["small", "big"]) == {"small": {"a": 1}, "big": big}
    assert mc.get_multi(["small"], key_prefix="") == {"small": {"a": 1}}
    assert mc.set_multi({"a": [1], "b": [2]}, key_prefix="p:") == []
    assert mc.get_multi(["a", "b"], key_prefix="p:") == {"a": [1], "b": [2]}
    assert mc.get("p:a") == [1]
    assert mc.gets("small")[0] == {"a": 1}
    # plain values are not signed and read by anyone
    assert mc.set("text", "plain") and fastmc.Client(mc.addresses).get("text") == "plain"


def test_a_signed_value_is_bound_to_its_key_its_flags_and_every_byte(make, server, writer):
    mc = make(pickle="signed", signing_keys=[KEY])
    mc.set("orig", {"admin": True})
    data, flags = Raw([server.address]).get("orig")
    assert flags == 257 and data[:1] == b"\xff"
    writer.set("copy", (data, flags))  # moved to another key
    writer.set("flipped", (data, flags | 8))  # the zlib bit flipped
    tampered = bytearray(data)
    tampered[-1] ^= 1
    writer.set("tampered", (bytes(tampered), flags))
    writer.set("short", (b"\xff", flags))
    for key in ("copy", "flipped", "tampered"):
        with pytest.raises(fastmc.RefusedValueError, match="signature does not match"):
            mc.get(key)
    with pytest.raises(fastmc.RefusedValueError, match="not a signed value"):
        mc.get("short")
    assert mc.get("orig") == {"admin": True}


def test_signed_mode_refuses_unsigned_pickles_unless_migrating(make, writer, tmp_path):
    path = tmp_path / "ran"
    writer.set("plain-pickle", (pickle.dumps(Boom(path)), 1))
    strict = make(pickle="signed", signing_keys=[KEY])
    for read in reads(strict, "plain-pickle")[:2]:
        with pytest.raises(fastmc.RefusedValueError, match="unsigned pickle"):
            read()
    assert not path.exists()
    writer.set("old", (pickle.dumps([1, 2]), 1))
    migrating = make(pickle="signed", signing_keys=[KEY], accept_unsigned_pickles=True)
    assert migrating.get("old") == [1, 2]
    assert migrating.set("new", [3])
    assert strict.get("new") == [3]  # written signed


def test_keys_rotate_and_allow_mode_with_keys_reads_signed_and_writes_plain(make, server):
    old = make(pickle="signed", signing_keys=[OLD_KEY])
    old.set("by-old", [1])
    rotated = make(pickle="signed", signing_keys=[KEY, OLD_KEY])
    assert rotated.get("by-old") == [1]
    rotated.set("by-new", [2])
    with pytest.raises(fastmc.RefusedValueError):
        old.get("by-new")
    # the first step of a rollout: keys known, nothing signed yet
    ready = make(signing_keys=[KEY])
    assert ready.get("by-new") == [2]
    ready.set("written", [3])
    assert Raw([server.address]).get("written")[1] == 1  # a plain pickle, as pylibmc reads


def test_without_keys_the_signed_bit_is_ignored_as_pylibmc_does(make):
    make(pickle="signed", signing_keys=[KEY]).set("s", [1])
    with pytest.raises(pickle.UnpicklingError, match="invalid load key"):
        make().get("s")


def test_what_real_pylibmc_does_with_signed_values(server):
    """docs/security.md quotes these: pylibmc raises, and never runs anything."""
    mc = fastmc.Client([server.address], pickle="signed", signing_keys=[KEY])
    mc.set("plain", [1])
    mc.set("zipped", list(range(1000)), min_compress_len=1)
    real = pylibmc.Client([server.address])
    assert real.__class__.__module__.startswith("pylibmc")
    with pytest.raises(pickle.UnpicklingError, match="invalid load key"):
        real.get("plain")
    with pytest.raises(pylibmc.Error, match="Failed to decompress value"):
        real.get("zipped")


def test_the_allow_list_builds_listed_classes_only(make, writer, tmp_path):
    fastmc.Client(writer.addresses).set("date", datetime.date(2020, 1, 2))
    fastmc.Client(writer.addresses).set("dec", decimal.Decimal("1.5"))
    fastmc.Client(writer.addresses).set("data", {"a": [1, {2, 3}, frozenset([4])]})
    path = tmp_path / "ran"
    writer.set("boom", (pickle.dumps(Boom(path)), 1))
    mc = make(pickle_classes=[datetime.date, "decimal.Decimal"])
    assert mc.get("date") == datetime.date(2020, 1, 2)
    assert mc.get("dec") == decimal.Decimal("1.5")
    assert mc.get("data") == {"a": [1, {2, 3}, frozenset([4])]}
    with pytest.raises(fastmc.RefusedValueError, match=r"names (posix|os)\.system"):
        mc.get("boom")
    assert not path.exists()
    fastmc.Client(writer.addresses).set("dt", datetime.datetime(2020, 1, 2))
    with pytest.raises(fastmc.RefusedValueError, match=r"datetime\.datetime"):
        mc.get("dt")
    # with signatures too: signed and listed
    both = make(pickle="signed", signing_keys=[KEY], pickle_classes=[])
    both.set("list", [1, 2])
    assert both.get("list") == [1, 2]
    both.set("d", datetime.date(2020, 1, 2))
    with pytest.raises(fastmc.RefusedValueError, match="not in pickle_classes"):
        both.get("d")


def test_overrides_own_their_format_and_super_applies_the_policy(server):
    class Custom(fastmc.Client):
        def deserialize(self, data, flags):
            return ("custom", super().deserialize(data, flags))

    Writer([server.address]).set("p", (pickle.dumps([1]), 1))
    assert Custom([server.address]).get("p") == ("custom", [1])
    with pytest.raises(fastmc.RefusedValueError):
        Custom([server.address], pickle="refuse").get("p")
    with pytest.raises(TypeError, match="needs pickle"):
        fastmc.Client([server.address], pickle="refuse").serialize([1])


def test_the_policy_survives_clone(server):
    mc = fastmc.Client([server.address], pickle="signed", signing_keys=[KEY])
    mc.set("c", [1])
    twin = mc.clone()
    assert twin.get("c") == [1]
    with pytest.raises(TypeError):
        fastmc.Client([server.address], pickle="refuse").clone().set("x", [1])


def test_bad_policy_arguments_are_refused_at_construction(server):
    a = [server.address]
    with pytest.raises(ValueError, match="'allow', 'refuse' or 'signed'"):
        fastmc.Client(a, pickle="never")
    with pytest.raises(ValueError, match="needs signing_keys"):
        fastmc.Client(a, pickle="signed")
    with pytest.raises(ValueError, match="shorter than 16 bytes"):
        fastmc.Client(a, pickle="signed", signing_keys=["secret"])
    with pytest.raises(TypeError, match="list of keys"):
        fastmc.Client(a, pickle="signed", signing_keys=KEY)
    with pytest.raises(ValueError, match="goes with pickle='signed'"):
        fastmc.Client(a, accept_unsigned_pickles=True)
    with pytest.raises(ValueError, match="dotted"):
        fastmc.Client(a, pickle_classes=["nodots"])


def test_the_environment_sets_the_default_for_clients_built_without_arguments(server):
    """What Flask-Caching, Django's PyLibMCCache and dogpile get, unchanged."""
    code = PEAK + (
        "import fastmc, pickle\n"
        "fastmc.install_as_pylibmc()\n"
        "import pylibmc\n"
        "mc = pylibmc.Client([%r])\n"
        "mc.set('env', [1])\n"
        "print(mc.get('env'))\n"
        "fastmc.Client([%r], pickle='allow', signing_keys=[]).get('env')\n"
    ) % (server.address, server.address)
    keys = "%s,%s" % ("a" * 20, "b" * 20)
    env = dict(os.environ, FASTMC_PICKLE="signed", FASTMC_SIGNING_KEYS=keys)
    # (PyPy's UnpicklingError message quotes the raw bytes it stopped at)
    run = dict(capture_output=True, encoding="utf-8", errors="replace")
    out = subprocess.run([sys.executable, "-c", code], env=env, **run)
    # read back signed; a client told to use no keys meets a signed value, as pylibmc would
    assert out.stdout == "[1]\n" and "UnpicklingError" in out.stderr, out
    env["FASTMC_PICKLE"] = "refuse"
    out = subprocess.run([sys.executable, "-c", code], env=env, **run)
    assert "needs pickle" in out.stderr


def test_a_compression_bomb_is_refused_with_little_memory(server, writer):
    """1 MiB that inflates to 1,000 MiB: refused by default, in a child whose peak is measured."""
    bomb = zlib.compress(b"\0" * (1000 << 20), 9)
    assert len(bomb) < 1100 << 10
    writer.set("bomb", (bomb, 8 | 1))
    code = PEAK + (
        "import fastmc\n"
        "mc = fastmc.Client([%r])\n"
        "before = peak()\n"
        "try:\n"
        "    mc.get('bomb')\n"
        "except fastmc.RefusedValueError as e:\n"
        "    print('refused', e)\n"
        "print('grew', peak() - before)\n"
    ) % (server.address,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused" in out.stdout and "max_inflate (67108864 bytes)" in out.stdout
    grew_kib = int(out.stdout.split("grew ")[1])
    assert grew_kib < 160 << 10, out.stdout  # the 64 MiB limit, its copy, and the input


def test_max_inflate_is_a_behavior(make, writer):
    writer.set("z", (zlib.compress(b"x" * 100_000), 8))
    mc = make(behaviors={"max_inflate": 99_999})
    with pytest.raises(fastmc.RefusedValueError, match=r"max_inflate \(99999 bytes\)"):
        mc.get("z")
    assert mc.get_behaviors()["max_inflate"] == 99_999
    mc.behaviors = {"max_inflate": 100_000}
    assert mc.get("z") == b"x" * 100_000
    mc.behaviors = {"max_inflate": 0}  # no limit
    assert mc.get("z") == b"x" * 100_000 and mc.get_behaviors()["max_inflate"] == 0
    assert "max_inflate" not in make().get_behaviors()  # pylibmc's read-back, unchanged
    # a truncated stream is still pylibmc's error
    writer.set("cut", (zlib.compress(b"y" * 1000)[:-4], 8))
    with pytest.raises(fastmc.Error, match="Failed to decompress value"):
        mc.get("cut")


def _plain_values(rng):
    def one(depth):
        kind = rng.randrange(10 if depth < 3 else 6)
        return [
            lambda: None,
            lambda: rng.choice([True, False]),
            lambda: rng.randrange(-(2**70), 2**70) >> rng.randrange(70),
            lambda: rng.random() * 10 ** rng.randrange(-5, 5),
            lambda: "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(8))),
            lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(300))),
            lambda: [one(depth + 1) for _ in range(rng.randrange(4))],
            lambda: tuple(one(depth + 1) for _ in range(rng.randrange(4))),
            lambda: {str(i): one(depth + 1) for i in range(rng.randrange(4))},
            lambda: frozenset(range(rng.randrange(3))),
        ][kind]()

    return one(0)


_CALLS = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX"}


def _cpython_ops(data):
    """The opcodes pickletools reads, up to STOP or to what it cannot read (where the unpickler
    stops too), and whether it read to STOP."""
    import pickletools

    ops = []
    try:
        for op, _, _ in pickletools.genops(data):
            ops.append(op.name)
    except Exception:
        return ops, False
    return ops, bool(ops) and ops[-1] == "STOP"


def _cpython_sees_plain(data):
    """Complete, and naming or calling nothing."""
    ops, complete = _cpython_ops(data)
    return complete and not _CALLS & set(ops)


def test_the_allow_lists_plain_data_scan_agrees_with_cpython():
    """What skips the per-class check is exactly what CPython reads as data: random plain values
    at every protocol, objects, and mangled pickles."""
    import random

    rng = random.Random(1234)
    scan = fastmc._fastmc._pickle_is_plain
    for _ in range(3000):
        value = _plain_values(rng)
        for proto in range(6):
            data = pickle.dumps(value, proto)
            assert scan(data) == _cpython_sees_plain(data), (value, proto, data)
            cut = data[: rng.randrange(len(data))]
            mangled = bytearray(data)
            mangled[rng.randrange(len(data))] = rng.randrange(256)
            for bad in (cut, bytes(mangled)):
                if scan(bad):  # never plain where CPython would call or name something
                    assert not _CALLS & set(_cpython_ops(bad)[0]), bad
    for obj in (datetime.date(2020, 1, 1), decimal.Decimal(1), Boom("x"), print):
        for proto in range(6):
            assert not scan(pickle.dumps(obj, proto))
