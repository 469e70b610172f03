"""Hostile input: every key byte, over-long keys, keys and values that spell commands, empty and
huge key lists, values at and over the server's item limit, extreme integers for incr/decr/time.
Each gets a pylibmc-class exception or the right result, nothing is ever injected into the stream,
and the connection stays usable (the server's connection count does not move). Where real pylibmc
behaves sanely the outcome is compared with it. The docstrings name the failures of other clients
that each test guards against."""

# The lambdas below are called inside the loop iteration that makes them.
# ruff: noqa: B023

import time

import fastmc
import pylibmc
import pytest
from checks import total_connections
from fakes import FakeMemcached, ScriptedServer
from memcached import Memcached, server_quirks

CONTROL = set(range(0x21)) | {0x7F}  # split or end a text command line


@pytest.fixture(scope="module")
def servers():
    """One memcached for fastmc, one for pylibmc (so their failures cannot interfere)."""
    ps = [Memcached("-I", "1m"), Memcached("-I", "1m")]
    yield ps
    for p in ps:
        p.stop()


@pytest.fixture
def both(servers):
    mf = fastmc.Client([servers[0].address], behaviors={"retry_timeout": -1})
    mp = pylibmc.Client([servers[1].address])
    mf.flush_all()
    mp.flush_all()
    return mf, mp


def outcome(call):
    """What a call did, comparable across the two clients."""
    try:
        return ("ok", call())
    except BaseException as e:  # the class is the outcome, KeyboardInterrupt's too
        name = type(e).__name__
        return ("raises", name)


def still_usable(mc, before):
    assert mc.set("sentinel", "still here")
    assert mc.get("sentinel") == "still here"
    assert mc.get_multi(["sentinel"]) == {"sentinel": "still here"}
    assert total_connections(mc) == before


@pytest.mark.parametrize("kind", ["str", "bytes"])
def test_every_key_byte(both, kind):
    """Key injection (pylibmc #282 with verify_keys off, pymemcache PR #105, CVE-2022-26635): a key
    with any of the 256 byte values, alone, at the start, middle or end. Bytes that would split the
    command line raise BadKeyProvided before anything is sent; every other byte round-trips exactly
    as with pylibmc."""
    mf, mp = both
    before = total_connections(mf)
    for b in range(256):
        raw = bytes([b])
        for shape in (b"%s", b"k%sk", b"%sk", b"k%s"):
            key = shape.replace(b"%s", raw)
            if kind == "str":
                key = key.decode("latin-1")
            if b in CONTROL:
                # get_multi treats a key that cannot exist as a miss, as pylibmc does
                assert mf.get_multi([key, "fine"]) == {}
                for call in (
                    lambda: mf.get(key),
                    lambda: mf.set(key, 1),
                    lambda: mf.set_multi({key: 1}),
                    lambda: mf.delete(key),
                    lambda: mf.incr(key),
                    lambda: mf.touch(key, 5),
                    lambda: mf.add(key, 1),
                ):
                    with pytest.raises(fastmc.BadKeyProvided):
                        call()
                continue
            value = "v%d-%r" % (b, key)
            assert mf.set(key, value), key
            assert mf.get(key) == value
            assert mf.get_multi([key]) == {key: value}
            assert mp.set(key, value)
            assert mp.get(key) == value
            assert mf.delete(key) and mf.get(key) is None
    still_usable(mf, before)


@pytest.mark.parametrize(
    "key",
    ["with space", "crlf\r\nset x 0 0 1\r\n1", "nl\n", "nul\x00", "tab\t", "ctl\x01", "del\x7f"],
)
def test_bad_keys_are_rejected_before_anything_is_sent(key):
    fake = ScriptedServer()  # reads and records, never answers
    try:
        mc = fastmc.Client([fake.address], behaviors={"_poll_timeout": 200})
        for call in (
            lambda: mc.get(key),
            lambda: mc.set(key, "v"),
            lambda: mc.delete(key),
            lambda: mc.incr(key),
            lambda: mc.touch(key, 1),
            lambda: mc.set_multi({key: 1}),
        ):
            with pytest.raises(fastmc.BadKeyProvided):
                call()
        # a key that cannot exist is a miss for get_multi (as pylibmc), and is never sent either
        assert mc.get_multi([key]) == {}
        time.sleep(0.05)
        assert bytes(fake.received) == b""
    finally:
        fake.close()


def test_overlong_keys(mcd):
    mc = fastmc.Client([mcd.address])
    assert mc.set("k" * 250, 1)
    with pytest.raises(ValueError, match="key length 251 too long, max is 250"):
        mc.get("k" * 251)
    with pytest.raises(ValueError, match="key length 252 too long"):
        mc.set("é" * 126, 1)
    # the prefix makes it too long
    with pytest.raises(ValueError):
        mc.set_multi({"k" * 250: 1}, key_prefix="p")
    assert mc.get("k" * 250) == 1


def test_verify_keys_refuses_non_ascii_like_pylibmc(servers):
    """With verify_keys, pylibmc's set answers False for a non-ASCII key (pylibmc #219): the
    same here, and nothing is stored."""
    mf = fastmc.Client([servers[0].address], behaviors={"verify_keys": True})
    mp = pylibmc.Client([servers[1].address], behaviors={"verify_keys": True})
    for key in (b"k\x80", "k\xe9", b"\xff"):
        assert outcome(lambda: mf.set(key, 1)) == outcome(lambda: mp.set(key, 1)) == ("ok", False)
        assert fastmc.Client([servers[0].address]).get(key) is None
    assert mf.set("plain", 1) and mf.get("plain") == 1


def test_injection_attempts_never_reach_the_server():
    """pylibmc #282: `get(b"foo\\r\\nset x 0 100 8\\r\\ninjected")` injects a command; #219: a key
    with a space desyncs or returns False. Nothing at all is sent for such keys."""
    with FakeMemcached() as f:
        mc = fastmc.Client([f.address])
        attacks = [
            b"foo\r\nset x 0 100 8\r\ninjected",
            "foo bar",
            b"foo\x00set x 0 0 1",
            "a\nflush_all",
            b"k\r\n",
        ]
        for key in attacks:
            assert mc.get_multi([key]) == {}  # a key that cannot exist: a miss, never sent
            for call in (
                lambda: mc.get(key),
                lambda: mc.set(key, "v"),
                lambda: mc.set(key, "v", noreply=True) if hasattr(mc, "set") else None,
                lambda: mc.set_multi({key: "v"}, noreply=True),
                lambda: mc.delete(key),
            ):
                with pytest.raises(fastmc.BadKeyProvided):
                    call()
        assert f.commands == []
        assert mc.set("x", "safe") and mc.get("x") == "safe"


def test_key_length_boundary_with_and_without_prefix(both):
    """memcached <= 1.6.39 does not swallow the data block of a `set` whose key is over 250 bytes:
    the value is then run as a command (async-memcached 0.5.0 let that happen). The limit is checked
    client-side, prefix included, before anything is sent."""
    mf, mp = both
    before = total_connections(mf)
    assert mf.set("k" * 250, "max") and mf.get("k" * 250) == "max"
    assert mf.set("\xe9" * 125, "max2") and mf.get("\xe9" * 125) == "max2"  # 250 bytes of UTF-8
    for mc in (mf, mp):
        with pytest.raises(ValueError, match="key length 251 too long, max is 250"):
            mc.get("k" * 251)
        with pytest.raises(ValueError, match="key length 251 too long"):
            mc.set("k" * 251, "flush_all")
        with pytest.raises(ValueError):
            mc.set_multi({"k" * 250: 1}, key_prefix="p")
        with pytest.raises(fastmc.BadKeyProvided if mc is mf else pylibmc.BadKeyProvided):
            mc.get_multi(["k" * 250], key_prefix="p")
    assert mf.set_multi({"k" * 249: "p249"}, key_prefix="p") == []
    assert mf.get("p" + "k" * 249) == "p249"
    assert mf.get_multi(["k" * 249], key_prefix="p") == {"k" * 249: "p249"}
    assert mf.delete_multi(["k" * 249], key_prefix="p")
    with pytest.raises(ValueError):
        mf.delete_multi(["k" * 250], key_prefix="p")
    with pytest.raises(ValueError):
        mf.set("\xe9" * 126, 1)
    still_usable(mf, before)


COMMAND_WORDS = [
    "get",
    "gets",
    "set",
    "add",
    "cas",
    "delete",
    "incr",
    "decr",
    "touch",
    "flush_all",
    "quit",
    "version",
    "stats",
    "verbosity",
    "noreply",
    "END",
    "VALUE",
    "STORED",
    "ERROR",
    "CLIENT_ERROR",
    "SERVER_ERROR",
    "NOT_FOUND",
    "mg",
    "ms",
    "md",
    "ma",
    "mn",
]
COMMAND_VALUES = [
    b"flush_all\r\n",
    b"END\r\n",
    b"VALUE k 0 1\r\nx\r\nEND\r\n",
    b"\r\n",
    b"quit\r\n",
    b"set x 0 0 1\r\ny\r\n",
    b"SERVER_ERROR out of memory\r\n",
    b"\r",
    b"\n",
    b"",
]


def test_keys_and_values_that_spell_commands(both):
    """Keys and values that look like commands or replies: each is data, never a command or a reply,
    and reads back exactly."""
    mf, mp = both
    before = total_connections(mf)
    for mc in (mf, mp):
        assert mc.set_multi({w: "value of " + w for w in COMMAND_WORDS}) == []
        assert mc.get_multi(COMMAND_WORDS) == {w: "value of " + w for w in COMMAND_WORDS}
        for i, v in enumerate(COMMAND_VALUES):
            assert mc.set("cv%d" % i, v)
        got = mc.get_multi(["cv%d" % i for i in range(len(COMMAND_VALUES))])
        assert got == {"cv%d" % i: v for i, v in enumerate(COMMAND_VALUES)}
        assert mc.get("flush_all") == "value of flush_all"  # nothing was flushed
        assert mc.delete("quit") and mc.get("version") == "value of version"
        assert mc.set("incr", "1") and mc.incr("incr") == 2
    still_usable(mf, before)


def test_empty_and_huge_key_lists(both):
    """An empty multi-get `get\\r\\n` is answered ERROR (memcache-async PR #18; pylibmc #7 raised
    SystemError), and memcached #849 failed very large multi-gets. Nothing is sent for an empty
    list; huge lists work and duplicates are answered once."""
    mf, mp = both
    for mc in (mf, mp):
        assert mc.get_multi([]) == {}
        assert mc.set_multi({}) == []
        assert mc.delete_multi([]) is True
        assert mc.incr_multi([]) is None
        assert mc.get_multi([], key_prefix="p") == {}
    with FakeMemcached() as f:
        mc = fastmc.Client([f.address])
        assert mc.get_multi([]) == {} and mc.set_multi({}) == [] and mc.delete_multi([])
        assert f.commands == []
    before = total_connections(mf)
    data = {"h%d" % i: i for i in range(50_000)}
    assert mf.set_multi(data) == []
    keys = list(data) + ["miss%d" % i for i in range(150_000)] + list(data)[:1000]
    got = mf.get_multi(keys)
    assert got == data
    assert mf.delete_multi(list(data)) is True
    still_usable(mf, before)


def test_values_at_and_over_the_item_limit(both):
    """`object too large` (python-memcached silently refuses big values): a value that fits the
    server's -I limit round-trips; at and over it TooBig, for that key only, as with pylibmc; the
    connection is kept and no old value survives."""
    mf, mp = both
    before = total_connections(mf)
    fits = b"x" * (1024 * 1024 - 1000)
    for mc, too_big in ((mf, fastmc.TooBig), (mp, pylibmc.TooBig)):
        assert mc.set("fits", fits) and mc.get("fits") == fits
        for n in (1024 * 1024, 1024 * 1024 + 1, 20 * 1024 * 1024):
            assert mc.set("big", "old")
            with pytest.raises(too_big):
                mc.set("big", b"y" * n)
            assert mc.get("big") is None  # the server unlinked the old value
        with pytest.raises(too_big):
            mc.set_multi({"a": 1, "big": b"z" * (2 * 1024 * 1024), "b": 2})
    # pylibmc stops at the failed key; fastmc goes on with the others and names the failed one
    with pytest.raises(fastmc.TooBig) as ei:
        mf.set_multi({"a": 1, "big": b"z" * (2 * 1024 * 1024), "b": 2})
    assert ei.value.failed_keys == ["big"]
    assert mf.get_multi(["a", "b"]) == {"a": 1, "b": 2}
    still_usable(mf, before)


DELTAS = [0, 1, 2**31 - 1, 2**31, 2**32, 2**63, 2**64 - 1, 2**64, 2**100, -1, -(2**63)]


def test_incr_decr_extreme_integers_match_pylibmc(both):
    """Integer handling in incr/decr (Django expects NotFound for a missing key, ClientError for a
    non-number): every delta gives pylibmc's result or exception class; incr wraps at 2**64 and decr
    stops at 0 as the server does."""
    mf, mp = both
    before = total_connections(mf)
    for d in DELTAS:
        for op in ("incr", "decr"):
            res = []
            for mc in (mf, mp):
                mc.set("n", 5)
                res.append((outcome(lambda: getattr(mc, op)("n", d)), mc.get("n")))
            assert res[0] == res[1], (op, d)
            for mc in (mf, mp):
                mc.set("n", 5)
            assert outcome(lambda: mf.incr_multi(["n"], delta=d)) == outcome(
                lambda: mp.incr_multi(["n"], delta=d)
            ), d
    for mc in (mf, mp):
        mc.set("n", str(2**64 - 1))
        assert mc.incr("n", 2) == 1
        mc.set("n", 3)
        assert mc.decr("n", 10) == 0
        mc.set("n", 2**70)
        with pytest.raises(fastmc.ClientError if mc is mf else pylibmc.ClientError):
            mc.incr("n")
        with pytest.raises(fastmc.NotFound if mc is mf else pylibmc.NotFound):
            mc.incr("missing-counter")
        with pytest.raises(TypeError):
            mc.incr("n", 1.5)
    still_usable(mf, before)


TIMES = [
    0,
    1,
    -1,
    100,
    30 * 86400,
    30 * 86400 + 1,
    2**31 - 1,
    2**31,
    2**32,
    2**32 + 5,
    2**64,
    -(2**31),
    -(2**40),
    10**30,
]


def test_extreme_expiry_times_match_pylibmc(both, servers):
    """Expiry times (over 30 days is an absolute time; negative means expire now; pylibmc documents
    negative as 0): every time gives pylibmc's outcome for set, set_multi and touch."""
    mf, mp = both
    wide_touch_refused = server_quirks(servers[1].address)["wide_touch_refused"]
    before = total_connections(mf)
    for t in TIMES:
        res = []
        for mc in (mf, mp):
            r = [outcome(lambda: mc.set("t", 1, time=t)), outcome(lambda: mc.get("t"))]
            r.append(outcome(lambda: mc.set_multi({"tm": 1}, time=t)))
            r.append(outcome(lambda: mc.get("tm")))
            mc.set("tt", 1)
            r.append(outcome(lambda: mc.touch("tt", t)))
            res.append(r)
        if t < 0:
            # pylibmc's touch with a negative time fails inside libmemcached (AllocationError);
            # fastmc sends it and the server expires the key: compare set/set_multi only
            assert res[0][:4] == res[1][:4], t
            assert res[0][4] == ("ok", True)
        elif t % 2**64 >= 2**31 and wide_touch_refused and res[0][4] != res[1][4]:
            # memcached 1.6.45 refuses pylibmc's touch time (mod 2**64) beyond 2**31 - 1, where
            # 1.6.18 cast it to 32 bits; fastmc sends it wrapped to 32 bits, which both take
            # (unless CPython 3.15's warning for a time beyond 64 bits, an error here, stops both)
            assert res[0][:4] == res[1][:4], t
            assert res[1][4] == ("raises", "ClientError") and res[0][4] == ("ok", True), t
        else:
            assert res[0] == res[1], t
    with pytest.raises(TypeError):
        mf.set("t", 1, time=1.5)
    still_usable(mf, before)


def test_wrong_types_raise_type_errors(both):
    mf, mp = both
    for mc in (mf, mp):
        for key in (None, 1, 1.5, object()):
            with pytest.raises(TypeError):
                mc.get(key)
            with pytest.raises(TypeError):
                mc.set(key, 1)
    assert mf.set("ok", 1) and mf.get("ok") == 1


def test_gets_with_str_key_many_times(servers):
    """pylibmc had a use-after-free in gets() with a str key (#300) and a double free (#63): many
    gets with fresh str keys."""
    mc = fastmc.Client([servers[0].address], behaviors={"cas": True})
    assert mc.set("gk", "v")
    for i in range(2000):
        key = ("gk" + str(i))[:2]  # a fresh str object each time
        val, cas = mc.gets(key)
        assert val == "v" and cas > 0
    assert mc.get("gk") == "v"
