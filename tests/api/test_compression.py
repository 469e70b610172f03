"""zstd compression (docs/features.md#compression-zstd): opt-in, on both clients and every read
path, bounded like zlib, a clear error for what cannot be read; and what real pylibmc does when
it meets a zstd value."""

import os
import socket
import subprocess
import sys
import zlib

import fastmc
import pylibmc
import pytest
import zstandard
from planted import Raw, Writer

# A child's peak resident memory in KiB: its own (VmHWM), where ru_maxrss would start from the
# parent's peak, inherited across the spawn.
PEAK = (
    "def peak():\n"
    "    with open('/proc/self/status') as f:\n"
    "        return int(f.read().split('VmHWM:')[1].split()[0])\n"
)

ZSTD, ZLIB = 512, 8
VALUES = [
    b"bytes " * 200,
    "text, not ascii: \u00e9\u4e2d " * 100,
    10**400,
    {"rows": [{"id": i, "name": "user %d" % i} for i in range(50)]},
]
TYPE_FLAGS = [0, 16, 4, 1]


def samples(n=400):
    return [
        (
            '{"id": %d, "name": "user %d", "email": "u%d@example.com", "roles": ["reader"], '
            '"active": %s}' % (i, i, i, "true" if i % 2 else "false")
        ).encode()
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def dictionary():
    return fastmc.values.train_zstd_dict(samples(), 4096)


@pytest.fixture
def raw(server):
    return Raw([server.address])


@pytest.fixture
def writer(server):
    return Writer([server.address])


def test_zstd_round_trips_on_every_read_path(make, raw):
    mc = make(compression="zstd", behaviors={"cas": True})
    for i, (value, type_flag) in enumerate(zip(VALUES, TYPE_FLAGS)):
        key = "z%d" % i
        assert mc.set(key, value, min_compress_len=1)
        assert raw.get(key)[1] == type_flag | ZSTD | ZLIB
        assert mc.get(key) == value
        assert mc.get_multi([key]) == {key: value}
        assert mc.gets(key)[0] == value
        assert mc.gat(key, 0) == value
        assert fastmc.Client(raw.addresses).get(key) == value  # any client reads it
    assert mc.set_multi({"m1": VALUES[0], "m2": VALUES[1]}, min_compress_len=1) == []
    assert mc.get_multi(["m1", "m2"]) == {"m1": VALUES[0], "m2": VALUES[1]}
    assert raw.get("m1")[1] == ZSTD | ZLIB


def test_zstd_compresses_when_pylibmc_would_or_past_zstd_min_len(make, raw):
    mc = make(compression="zstd")
    mc.set("none", b"x" * 5000)  # pylibmc compresses nothing unless asked
    assert raw.get("none")[1] == 0
    mc.set("off", b"x" * 5000, min_compress_len=1, compress_level=0)
    assert raw.get("off")[1] == 0
    mc.set("short", b"x" * 20, min_compress_len=100)
    assert raw.get("short")[1] == 0
    mc.set("random", os.urandom(5000), min_compress_len=1)  # not shorter: stored as it is
    assert raw.get("random")[1] == 0
    auto = make(compression="zstd", zstd_min_len=1000)
    auto.set("small", b"y" * 999)
    auto.set("large", b"y" * 1000)
    assert raw.get("small")[1] == 0 and raw.get("large")[1] == ZSTD | ZLIB
    auto.set("asked", b"y" * 500, min_compress_len=100)  # the call's own threshold wins
    assert raw.get("asked")[1] == ZSTD | ZLIB
    assert auto.get("large") == b"y" * 1000


def test_without_being_asked_values_stay_pylibmc_identical(make, server, raw):
    """The default writes zlib, byte for byte what pylibmc writes; so does a client that only
    holds a dictionary to read zstd values."""
    real = pylibmc.Client([server.address])
    for kwargs in ({}, {"compression": "zlib"}, {"zstd_min_len": 10}):
        mc = make(**kwargs)
        for i, value in enumerate(VALUES):
            real.set("p%d" % i, value, min_compress_len=1)
            mc.set("f%d" % i, value, min_compress_len=1)
            assert raw.get("f%d" % i) == raw.get("p%d" % i)
            assert not raw.get("f%d" % i)[1] & ZSTD
            mc.set("n%d" % i, value)
            assert raw.get("n%d" % i)[1] & (ZSTD | ZLIB) == 0


def test_a_zlib_client_with_a_dictionary_reads_zstd_and_writes_zlib(make, raw, dictionary):
    zstd_writer = make(compression="zstd", zstd_dict=dictionary, zstd_min_len=64)
    reader = make(zstd_dict=dictionary)
    value = samples()[7].decode()
    zstd_writer.set("d", value)
    assert reader.get("d") == value
    reader.set("z", value, min_compress_len=1)
    assert raw.get("z")[1] == 16 | ZLIB


def test_what_real_pylibmc_does_with_zstd_values(server, writer):
    """docs/features.md quotes these. With the zlib bit beside the zstd bit, pylibmc fails to
    inflate every zstd value and raises; with the zstd bit alone it would return the compressed
    bytes of a bytes value as the value."""
    mc = fastmc.Client([server.address], compression="zstd")
    real = pylibmc.Client([server.address])
    assert real.__class__.__module__.startswith("pylibmc")
    for i, value in enumerate(VALUES):
        mc.set("v%d" % i, value, min_compress_len=1)
        with pytest.raises(pylibmc.Error, match="Failed to decompress value"):
            real.get("v%d" % i)
    with pytest.raises(pylibmc.Error, match="Failed to decompress value"):
        real.get_multi(["v0", "v1"])
    # the counterfactual: the zstd bit alone
    frame = zstandard.ZstdCompressor().compress(VALUES[0])
    writer.set("alone", (frame, ZSTD))
    assert real.get("alone") == frame  # silently the wrong bytes: why the zlib bit is set
    assert mc.get("alone") == VALUES[0]  # fastmc reads the bit alone too


def stored(address, key):
    """(flags, bytes) as the server holds them, past every client's codec."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"get %s\r\n" % key.encode())
        reply = b""
        while not reply.endswith(b"END\r\n"):
            reply += s.recv(65536)
    header, _, rest = reply.partition(b"\r\n")
    _, _, flags, size = header.split()
    return int(flags), rest[: int(size)]


def test_signed_pickles_are_compressed_then_signed(make, server):
    key = b"k" * 32
    mc = make(compression="zstd", pickle="signed", signing_keys=[key])
    mc.set("s", VALUES[3], min_compress_len=1)
    flags, data = stored(server.address, "s")
    assert flags == 256 | ZSTD | ZLIB | 1 and data[0] == 0xFF  # the tag first
    assert mc.get("s") == VALUES[3]
    with pytest.raises(pylibmc.Error, match="Failed to decompress value"):
        pylibmc.Client([server.address]).get("s")


def test_a_zstd_bomb_is_refused_with_little_memory(server, writer):
    """Two bombs that decompress to 1,000 MiB, refused in a child whose peak is measured: one
    declares its size (refused at once), one does not (decoded up to max_inflate)."""
    one_mib = b"\0" * (1 << 20)
    declared = zstandard.ZstdCompressor(level=19).compressobj(size=1000 << 20)
    undeclared = zstandard.ZstdCompressor(level=19, write_content_size=False).compressobj()
    bombs = {}
    for name, c in (("declared", declared), ("undeclared", undeclared)):
        out = [c.compress(one_mib) for _ in range(1000)]
        out.append(c.flush())
        bombs[name] = b"".join(out)
        assert len(bombs[name]) < 200 << 10
        writer.set(name, (bombs[name], ZSTD | ZLIB))
    code = PEAK + (
        "import fastmc, sys\n"
        "mc = fastmc.Client([%r])\n"
        "before = peak()\n"
        "try:\n"
        "    mc.get(sys.argv[1])\n"
        "except fastmc.RefusedValueError as e:\n"
        "    print('refused', e)\n"
        "print('grew', peak() - before)\n"
    ) % (server.address,)
    for name, bound_kib in (("declared", 16 << 10), ("undeclared", 160 << 10)):
        out = subprocess.run(
            [sys.executable, "-c", code, name], capture_output=True, text=True, check=True
        )
        assert "refused" in out.stdout, out
        assert "max_inflate (67108864 bytes)" in out.stdout, out.stdout
        grew_kib = int(out.stdout.split("grew ")[1])
        assert grew_kib < bound_kib, (name, out.stdout)


def test_max_inflate_bounds_zstd_as_it_bounds_zlib(make, writer):
    frame = zstandard.ZstdCompressor().compress(b"x" * 100_000)
    writer.set("z", (frame, ZSTD | ZLIB))
    mc = make(behaviors={"max_inflate": 99_999})
    with pytest.raises(fastmc.RefusedValueError, match=r"max_inflate \(99999 bytes\)"):
        mc.get("z")
    with pytest.raises(fastmc.RefusedValueError):
        mc.get_multi(["z"])
    mc.behaviors = {"max_inflate": 100_000}
    assert mc.get("z") == b"x" * 100_000
    mc.behaviors = {"max_inflate": 0}
    assert mc.get("z") == b"x" * 100_000
    # a frame that does not declare its size is decoded up to the bound
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = streamed.compress(b"y" * 100_000) + streamed.flush()
    writer.set("s", (frame, ZSTD | ZLIB))
    mc.behaviors = {"max_inflate": 1000}
    with pytest.raises(fastmc.RefusedValueError, match=r"max_inflate \(1000 bytes\)"):
        mc.get("s")
    mc.behaviors = {"max_inflate": 100_000}
    assert mc.get("s") == b"y" * 100_000
    # and may not ask for a decoding window past the bound (or 8 MiB)
    params = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=27, write_content_size=False
    )
    wide = zstandard.ZstdCompressor(compression_params=params)
    c = wide.compressobj()
    writer.set("w", (c.compress(b"w" * 1000) + c.flush(), ZSTD | ZLIB))
    with pytest.raises(fastmc.RefusedValueError, match="window larger than max_inflate"):
        mc.get("w")
    mc.behaviors = {"max_inflate": 0}
    assert mc.get("w") == b"w" * 1000


def test_corrupted_and_truncated_frames_are_pylibmcs_decompression_error(make, writer):
    good = fastmc.Client(writer.addresses, compression="zstd")
    good.set("good", VALUES[1], min_compress_len=1)
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(VALUES[0])
    flipped = bytearray(frame)
    flipped[len(frame) // 2] ^= 0x10
    planted = {
        "flipped": bytes(flipped),
        "cut": frame[: len(frame) - 5],
        "zlib": zlib.compress(VALUES[0]),
        "empty": b"",
    }
    mc = make()
    for key, data in planted.items():
        writer.set(key, (data, ZSTD | ZLIB))
        for read, arg in ((mc.get, key), (mc.get_multi, [key])):
            with pytest.raises(fastmc.Error, match="Failed to decompress value: zstd") as e:
                read(arg)
            assert not isinstance(e.value, fastmc.RefusedValueError)
    assert mc.get("good") == VALUES[1]


def test_a_value_needing_a_dictionary_names_it(make, raw, dictionary):
    other = fastmc.values.train_zstd_dict(
        [
            ('<li class="item-%d"><a href="/p/%d">%d</a></li>' % (i, i, i)).encode()
            for i in range(400)
        ],
        4096,
    )
    mc = make(compression="zstd", zstd_dict=dictionary, zstd_min_len=64)
    value = samples()[3]
    mc.set("d", value)
    assert mc.get("d") == value
    needed = zstandard.ZstdCompressionDict(dictionary).dict_id()
    with pytest.raises(fastmc.Error, match="needs dictionary %d, and this client has no" % needed):
        make().get("d")
    with pytest.raises(fastmc.Error, match="needs dictionary %d" % needed):
        make().get_multi(["d", "missing"])
    wrong = make(compression="zstd", zstd_dict=other)
    with pytest.raises(fastmc.Error, match="client's zstd_dict is dictionary"):
        wrong.get("d")
    # a dictionary makes small values worth compressing
    assert len(stored(raw.addresses[0], "d")[1]) < len(value) // 2


def test_bad_compression_arguments_are_refused_at_construction(server):
    a = [server.address]
    with pytest.raises(ValueError, match="'zlib' or 'zstd'"):
        fastmc.Client(a, compression="lz4")
    with pytest.raises(ValueError, match="zstd_level must be from -7 to 22"):
        fastmc.Client(a, compression="zstd", zstd_level=23)
    with pytest.raises(ValueError, match="not a zstd dictionary"):
        fastmc.Client(a, compression="zstd", zstd_dict=b"some bytes")
    with pytest.raises(TypeError, match="dictionary's bytes"):
        fastmc.Client(a, compression="zstd", zstd_dict="a path?")
    with pytest.raises(ValueError, match="train"):
        fastmc.values.train_zstd_dict([b"too", b"few"], 1024)


def test_the_setting_survives_clone(server, raw):
    mc = fastmc.Client([server.address], compression="zstd", zstd_min_len=10)
    twin = mc.clone()
    twin.set("c", b"c" * 100)
    assert raw.get("c")[1] == ZSTD | ZLIB
    assert twin.get("c") == b"c" * 100


def test_the_environment_sets_the_default(server, tmp_path, dictionary):
    path = tmp_path / "dict"
    path.write_bytes(dictionary)
    code = PEAK + (
        "import fastmc\n"
        "fastmc.install_as_pylibmc()\n"
        "import pylibmc\n"
        "mc = pylibmc.Client([%r])\n"
        "v = %r\n"
        "mc.set('env', v)\n"
        "assert mc.get('env') == v\n"
        "class Raw(fastmc.Client):\n"
        "    def serialize(self, v): return v\n"
        "    def deserialize(self, d, f): return d, f\n"
        "print(Raw([%r]).get('env')[1])\n"
    ) % (server.address, samples()[1], server.address)
    env = dict(
        os.environ,
        FASTMC_COMPRESSION="zstd",
        FASTMC_ZSTD_LEVEL="5",
        FASTMC_ZSTD_MIN_LEN="64",
        FASTMC_ZSTD_DICT_FILE=str(path),
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    # (Raw has the dictionary too: it reads the same environment)
    assert out.stdout == "%d\n" % (ZSTD | ZLIB), out
    env["FASTMC_COMPRESSION"] = "brotli"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "'zlib' or 'zstd'" in out.stderr


def test_a_user_serializer_gets_its_bytes_compressed_and_inflated(server):
    class Own(fastmc.Client):
        def serialize(self, value):
            return value.encode(), 64

        def deserialize(self, data, flags):
            return data, flags

    mc = Own([server.address], compression="zstd", zstd_min_len=10)
    mc.set("own", "o" * 1000)
    assert mc.get("own") == (b"o" * 1000, 64 | ZSTD | ZLIB)
    assert len(stored(server.address, "own")[1]) < 100
