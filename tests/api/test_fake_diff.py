"""fastmc.testing's fake server is exact: the differential checks, with the fake in place of
memcached.

- The seeded random run of test_random_diff.py (same generator, same operations, same
  configurations: one text server, three, one binary): every operation runs through pylibmc on a real memcached (the oracle),
  fastmc on a real memcached and fastmc on fakes. fastmc's outcome on the fake must equal its
  outcome on memcached, with no exception, and pylibmc's with test_random_diff's documented
  exceptions only; every 500 operations and at the end, what the servers hold must be the same:
  every key, its flags, its value and its expiry class (no expiry, within 100 s, within an
  hour), read from memcached with ``lru_crawler metadump`` and ``mg``.
- The differential cases of cases.py, pylibmc on memcached against fastmc on a fake, text
  and binary protocol.
- Raw protocol scripts (meta commands, incr's padding, the item size limit, flags, noreply)
  sent to memcached and to a fake, whose replies must be equal byte for byte (CAS values and
  times aside), and a binary-protocol script likewise."""

import os
import random
import re
import socket
import struct
import urllib.parse

import fastmc
import pylibmc
import pytest
from cases import CASES, TEXT_CASES, outcome
from fastmc.testing import FakeClock, FakeCluster
from memcached import Memcached, server_quirks
from test_pylibmc_diff import BAD_KEYS_CAUGHT
from test_random_diff import CONFIGS, OPS, SEED, Draw, comparable, random_op, run

CHECK_EVERY = int(os.environ.get("FAKE_DIFF_CHECK_EVERY", "500"))


def _raw(address, payload, timeout=5.0):
    """Everything a server answers to `payload` until it is quiet for a moment."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(payload + b"mn\r\n")
        out = b""
        while not out.endswith(b"MN\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out[: -len(b"MN\r\n")]


def _metadump(address):
    """The lines of ``lru_crawler metadump all`` (a dump ends with END; a command after it on
    the same connection would wait for the crawler)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"lru_crawler metadump all\r\n")
        out = b""
        while not (out.endswith(b"END\r\n") or out.startswith(b"ERROR")):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out.split(b"\r\n")


def expiry_class(ttl):
    if ttl is None or ttl < 0:
        return "never"
    return "100s" if ttl <= 100 else "1h" if ttl <= 3600 else "later"


def memcached_items(addresses, also):
    """key -> (flags, value, expiry class) of every live item of the real servers: the keys
    their ``lru_crawler metadump`` lists (which may leave out items not yet crawled) and the
    keys `also`, each read with ``mg``."""
    out = {}
    for a in addresses:
        keys = {
            urllib.parse.unquote_to_bytes(line.split(b" ", 1)[0][4:])
            for line in _metadump(a)
            if line.startswith(b"key=")
        }
        for k in keys | set(also):
            reply = _raw(a, b"mg %s v f t\r\n" % k)
            if not reply.startswith(b"VA "):
                continue  # not there, expired, or deleted since the dump
            head, value = reply.split(b"\r\n", 1)
            flags = dict((t[:1], t[1:]) for t in head.split(b" ")[2:])
            out[k] = (int(flags[b"f"]), value[:-2], expiry_class(int(flags[b"t"])))
    return out


def fake_items(cluster):
    out = {}
    for s in cluster.servers:
        for k, (value, flags, ttl) in s.items().items():
            out[k] = (flags, value, expiry_class(ttl))
    return out


def settle(*clients):
    """Wait until every server has applied what each client sent with noreply: a command
    answered on the same (pooled) connection comes after them."""
    for c in clients:
        c.get_stats()


def assert_same_items(real, fake, where):
    got = fake_items(fake)
    want = memcached_items(real, got)
    assert sorted(got) == sorted(want), where
    for k in want:
        assert got[k] == want[k], "%s: key %r" % (where, k)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_random_operations_on_the_fake_match_memcached(config):
    servers, binary, share = CONFIGS[config]
    seed = SEED + sum(map(ord, config))
    d = Draw(random.Random(seed), binary)
    procs = [Memcached() for _ in range(servers)]
    # the wall clock, as memcached's: the run's expiry times are long or already past
    version = _raw(procs[0].address, b"version\r\n").split()[1].decode()
    fakes = FakeCluster(servers, clock=FakeClock(frozen=False), version=version)
    try:
        behaviors = {"ketama": True, "tcp_nodelay": True}
        real_addrs = [p.address for p in procs]
        ours = fastmc.Client(real_addrs, behaviors=behaviors, binary=binary)
        on_fake = fakes.client(behaviors=behaviors, binary=binary)
        for i in range(max(1, int(OPS * share))):
            name, args, kwargs = random_op(d)
            real = run(ours, name, args, kwargs)
            got = run(on_fake, name, args, kwargs)
            where = "op %d (%s, seed %d): %s%r %r" % (i, config, seed, name, args, kwargs)
            assert comparable(got, servers) == comparable(real, servers), where
            if i % CHECK_EVERY == CHECK_EVERY - 1:
                settle(ours, on_fake)
                assert_same_items(real_addrs, fakes, where)
        settle(ours, on_fake)
        assert_same_items(real_addrs, fakes, "at the end")
    finally:
        fakes.close()
        for p in procs:
            p.stop()


@pytest.fixture(scope="module")
def real_and_fake(server):
    # the fake answers malformed commands as the real server's release does
    version = _raw(server.address, b"version\r\n").split()[1].decode()
    fakes = FakeCluster(1, clock=FakeClock(frozen=False), version=version)
    yield server.address, fakes
    fakes.close()


ALL_CASES = {**CASES, **TEXT_CASES}


@pytest.mark.parametrize(
    ("name", "binary"),
    [(n, False) for n in sorted(ALL_CASES)] + [(n, True) for n in sorted(CASES)],
)
def test_differential_cases_on_the_fake(real_and_fake, name, binary):
    real, fakes = real_and_fake
    case = ALL_CASES[name]
    results = []
    for mod, addrs in ((pylibmc, [real]), (fastmc, fakes.addresses)):
        mc = mod.Client(addrs, binary=binary)
        mc.flush_all()
        results.append(outcome(lambda mc=mc, mod=mod: case(mod, mc)))
    quirk = not binary and not server_quirks(real)["bad_keys_refused"]
    if name == "bad_keys_caught_as_pylibmcs" and quirk:
        # what pylibmc sends depends on the release (test_pylibmc_diff.py says how); fastmc
        # sends none of these keys, on the fake as on any server
        assert results[0] == ("raise", "NotFound")
        assert results[1] == BAD_KEYS_CAUGHT
        return
    assert results[1] == results[0]


CAS = re.compile(rb"( c| )\d{1,20}(?=\r\n| )")


def _normalized(reply):
    """CAS values (and `gets` tokens) differ between servers: numbers after " c" at the end
    of a token, and the fourth number of a VALUE line, are replaced by a mark."""
    lines = []
    for line in reply.split(b"\r\n"):
        if line.startswith(b"VALUE ") and line.count(b" ") == 4:
            line = line.rsplit(b" ", 1)[0] + b" <cas>"
        line = re.sub(rb" c\d+", b" c<cas>", line)
        lines.append(line)
    return b"\r\n".join(lines)


SCRIPTS = {
    "storage": b"set a 5 0 2\r\nhi\r\nadd a 0 0 1\r\nx\r\nreplace b 0 0 1\r\nx\r\n"
    b"append a 9 0 1\r\n!\r\nprepend a 9 0 1\r\n<\r\nget a b\r\nappend b 0 0 1\r\nx\r\n"
    b"set e 0 -1 1\r\nx\r\nget e\r\nadd e 0 0 1\r\ny\r\nget e\r\n",
    "flags": b"set f 4294967295 0 1\r\nx\r\nget f\r\nset g 0 0 1\r\nx\r\nget g\r\n",
    "noreply": b"set n 0 0 1 noreply\r\nx\r\nincr n 1 noreply\r\nadd n 0 0 1 noreply\r\ny\r\n"
    b"get n\r\ndelete n noreply\r\nget n\r\nincr zz 1 noreply\r\n",
    "incr": b"set i 0 0 3\r\n100\r\ndecr i 95\r\nget i\r\nincr i 99999\r\nget i\r\n"
    b"set j 0 0 20\r\n18446744073709551615\r\nincr j 2\r\nget j\r\ndecr j 10\r\n"
    b"set s 0 0 3\r\nabc\r\nincr s 1\r\nset sp 0 0 4\r\n 12 \r\nincr sp 1\r\nget sp\r\n"
    b"set m 0 0 2\r\n-5\r\nincr m 1\r\nset p 0 0 2\r\n+5\r\nincr p 1\r\nset z 0 0 0\r\n\r\n"
    b"incr z 1\r\nincr nope 1\r\nincr i abc\r\nincr i -1\r\nset nul 0 0 4\r\n12\x00z\r\n"
    b"incr nul 1\r\nget nul\r\n",
    "cas": b"set c 0 0 1\r\nx\r\ncas c 0 0 1 1\r\ny\r\ncas nope 0 0 1 1\r\ny\r\ngets c\r\n",
    "touch_gat": b"set t 0 0 1\r\nx\r\ntouch t 100\r\ntouch nope 1\r\ngat 100 t nope\r\n"
    b"gats 0 t\r\nmg t t v\r\ntouch t -1\r\nget t\r\n",
    "delete": b"set d 0 0 1\r\nx\r\ndelete d 0\r\ndelete d\r\ndelete d 5\r\n",
    "errors": b"bogus\r\nget\r\nset x 0 0\r\nincr\r\nverbosity 1\r\nverbosity\r\n",
    # the item size limit to the byte: 1 MiB with memcached's header, key, flags and CRLF
    "too_large": b"".join(
        b"set big %d 0 %d\r\n%s\r\nmg big s f\r\n" % (flags, n, b"x" * n)
        for flags, n in ((0, 1048514), (0, 1048515), (1, 1048510), (1, 1048511))
    )
    + b"set big2 0 0 1048490\r\n"
    + b"x" * 1048490
    + b"\r\nappend big2 0 0 100\r\n"
    + b"y" * 100
    + b"\r\nmg big2 s\r\n",
    "meta_get": b"set m 3 0 2\r\nhi\r\nmg m v f c t s k O42\r\nmg nope v\r\nmg nope v q k O7\r\n"
    b"mg m\r\nmg m v T100\r\nmg m t\r\n",
    "meta_lease": b"mg l v f c N30\r\nmg l v f c N30\r\nmg l v c t\r\nms l 1 T100\r\nv\r\n"
    b"mg l v c R200\r\nmg l v c R200\r\nmg l v R50\r\n",
    "meta_stale": b"set s 0 0 2\r\nok\r\nmd s I T30\r\nmg s v c t\r\nmg s v c\r\n"
    b"ms s 3\r\nnew\r\nmg s v\r\nmd s q\r\nmd s q O5\r\nmd s\r\n",
    "meta_store": b"ms a 2 T60 F7 q O1\r\nhi\r\nms a 2 ME q O2\r\nyo\r\nms b 2 MR q O3\r\nyo\r\n"
    b"ms a 1 MA\r\n!\r\nms a 1 MP\r\n<\r\nmg a v f t\r\nms a 2 c\r\nzz\r\nmd a q O4\r\n"
    b"md a q O5\r\nms d 1 MX\r\nx\r\n",
    "meta_cas": b"ms x 1\r\na\r\nmg x c\r\nms x 1 C1\r\nb\r\nmd x C1\r\nms y 1 MA C1\r\nb\r\n",
    "meta_arith": b"ma n\r\nma n N0 J10 v\r\nma n v\r\nma n MD D20 v t\r\nma n q\r\n"
    b"set s 0 0 1\r\nx\r\nma s\r\nma n O9 k\r\n",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_raw_replies_match_memcached(server, real_and_fake, name):
    real, fakes = real_and_fake
    fake = fakes.addresses[0]
    for a in (real, fake):
        _raw(a, b"flush_all\r\n")
    want = _normalized(_raw(real, SCRIPTS[name]))
    got = _normalized(_raw(fake, SCRIPTS[name]))
    assert got.split(b"\r\n") == want.split(b"\r\n")


def _bin(op, key=b"", extras=b"", value=b"", cas=0, opaque=0):
    body = extras + key + value
    head = struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, len(body), opaque, cas)
    return head + body


def _bin_frames(data):
    """Binary responses with the CAS field zeroed (two servers' CAS values differ)."""
    frames = []
    while data:
        size = 24 + struct.unpack(">I", data[8:12])[0]
        frames.append(data[:16] + bytes(8) + data[24:size])
        data = data[size:]
    return frames


def _bin_exchange(address, payload):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(payload + _bin(0x0A, opaque=0xFFFF))  # NOOP: answered after everything
        out = b""
        while not out.endswith(b"\xff\xff" + bytes(8)) or len(out) < 24:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return _bin_frames(out)


def test_binary_replies_match_memcached(real_and_fake):
    real, fakes = real_and_fake
    set_ = lambda op, k, v, flags=0, exp=0, cas=0: _bin(  # noqa: E731
        op, k, struct.pack(">II", flags, exp), v, cas=cas, opaque=op
    )
    arith = lambda op, k, d, init=0, exp=0xFFFFFFFF: _bin(  # noqa: E731
        op, k, struct.pack(">QQI", d, init, exp), opaque=7
    )
    script = b"".join(
        [
            set_(0x01, b"a", b"hi", flags=5),
            _bin(0x00, b"a", opaque=1),
            _bin(0x00, b"nope", opaque=2),
            _bin(0x0C, b"nope", opaque=3),
            _bin(0x0D, b"nope", opaque=4),
            _bin(0x0D, b"a", opaque=4),
            set_(0x02, b"a", b"x"),
            set_(0x03, b"zz", b"x"),
            set_(0x03, b"a", b"x", cas=12345),
            _bin(0x0E, b"zz", value=b"!", opaque=9),
            _bin(0x0E, b"a", value=b"!", opaque=9),
            set_(0x11, b"q", b"quiet"),
            set_(0x12, b"q", b"again"),
            arith(0x05, b"a", 1),
            arith(0x05, b"n", 1),
            arith(0x05, b"n", 1, init=10, exp=0),
            arith(0x06, b"n", 3),
            set_(0x01, b"c", b"100"),
            arith(0x06, b"c", 95),
            _bin(0x00, b"c", opaque=1),
            _bin(0x1C, b"a", extras=struct.pack(">I", 100), opaque=11),
            _bin(0x1C, b"nope", extras=struct.pack(">I", 100), opaque=11),
            _bin(0x24, b"a", extras=struct.pack(">I", 100), opaque=12),
            _bin(0x04, b"nope", opaque=13),
            _bin(0x14, b"q", opaque=14),
            _bin(0x04, b"q", opaque=14),
            set_(0x01, b"big", b"x" * (1 << 20)),
            _bin(0x30, opaque=15),
            _bin(0x08, opaque=16),
            _bin(0x00, b"a", opaque=17),
        ]
    )
    want = _bin_exchange(real, _bin(0x08) + script)
    got = _bin_exchange(fakes.addresses[0], _bin(0x08) + script)
    assert got == want
