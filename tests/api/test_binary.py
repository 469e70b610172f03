"""binary=True: every differential case of cases.py, plus binary-only cases, runs
through real pylibmc with binary=True (the oracle) and through fastmc with binary=True against
the same freshly flushed memcached; outcomes must be equal. Then binary-specific properties:
quiet batches attribute each failure to its key, text and binary clients share data, and the
connection survives per-key errors that pylibmc's does not."""

import struct

import fastmc
import pylibmc
import pytest
from cases import CASES, MULTI_SERVER_CASES, _incr_multi_failure_classes, run_both
from fakes import ScriptedServer, binary_header
from threads import run_threads

BINARY_CASES = {
    # pylibmc documents these as binary-mode differences from text mode; fastmc must follow.
    "replace_missing_raises": lambda m, c: c.replace("nokey", 1),
    "touch_negative_time": lambda m, c: (c.set("t", 1), c.touch("t", -1), c.get("t")),
    "negative_time_never_expires": lambda m, c: (c.set("n", 1, -1), c.get("n")),
    "verify_keys_rejected": lambda m, c: c.set_behaviors({"verify_keys": 0}),
    "incr_non_numeric": lambda m, c: (c.set("s", "abc"), c.incr("s")),
    "incr_multi_non_numeric": lambda m, c: (c.set("s", "abc"), c.incr_multi(["s"])),
    "cas_zero_is_unconditional": lambda m, c: (c.set("g", 1), c.cas("g", 4, 0), c.get("g")),
    # any byte may appear in a binary key
    "nul_and_space_keys": lambda m, c: (
        c.set(b"a\x00 b\r\n", 5),
        c.get(b"a\x00 b\r\n"),
        c.get_multi([b"a\x00 b\r\n", b"\xff\xfe"]),
        c.delete(b"a\x00 b\r\n"),
        c.get(b"a\x00 b\r\n"),
    ),
    "space_keys_multi": lambda m, c: (
        c.set_multi({"a b": 1, "c\nd": 2}),
        c.get_multi(["a b", "c\nd"]),
        c.delete_multi(["a b", "c\nd"]),
        c.get_multi(["a b"]),
    ),
    "gets_cas_flow": lambda m, c: (
        c.set("g", 1),
        c.gets("g")[0],
        c.cas("g", 2, c.gets("g")[1]),
        c.get("g"),
        c.cas("g", 3, 1),
        c.get("g"),
        c.cas("zz", 1, 5),
    ),
    "decr_floor_incr_wrap": lambda m, c: (
        c.set("d", 3),
        c.decr("d", 10),
        c.set("w", 2**64 - 1),
        c.incr("w"),
    ),
    "empty_values": lambda m, c: (
        c.set("e", b""),
        c.get("e"),
        c.get_multi(["e"]),
        c.set("es", ""),
        c.get("es"),
    ),
    "big_value": lambda m, c: (
        c.set("bv", b"v" * 900000),
        len(c.get("bv")),
        len(c.get_multi(["bv"])["bv"]),
    ),
    "stats_groups": lambda m, c: (
        c.set("a", 1),
        [(type(n).__name__, len(s) > 0) for n, s in c.get_stats("items")],
    ),
    "stats_bogus": lambda m, c: c.get_stats("bogus"),
    "get_multi_5000": lambda m, c: (
        c.set_multi({"k%d" % i: "v" * (i % 50) for i in range(5000)}),
        c.get_multi(["k%d" % i for i in range(0, 5000, 2)] + ["zz%d" % i for i in range(100)])
        == {"k%d" % i: "v" * (i % 50) for i in range(0, 5000, 2)},
    ),
    "add_multi_attribution": lambda m, c: (
        c.set_multi({"a%d" % i: i for i in range(0, 200, 3)}),
        sorted(c.add_multi({"a%d" % i: -i for i in range(200)})),
        c.get_multi(["a%d" % i for i in range(200)])
        == {"a%d" % i: (i if i % 3 == 0 else -i) for i in range(200)},
    ),
    "delete_multi_partial": lambda m, c: (
        c.set_multi({"x1": 1, "x2": 2}),
        c.delete_multi(["x1", "zz", "x2"]),
        c.get_multi(["x1", "x2"]),
    ),
    "prefix_too_long": lambda m, c: c.get_multi(["x" * 245], key_prefix="abcdefg"),
    "incr_multi_many": lambda m, c: (
        c.set_multi({"n%d" % i: i for i in range(100)}),
        c.incr_multi(["n%d" % i for i in range(100)], delta=7),
        c.get_multi(["n0", "n99"]),
    ),
}

MULTI = [
    *MULTI_SERVER_CASES,
    "get_multi_5000",
    "add_multi_attribution",
    "delete_multi_partial",
    "space_keys_multi",
    "incr_multi_many",
]


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_outcome_as_pylibmc_binary(servers, name):
    theirs, ours = run_both(servers[:1], CASES[name], binary=True)
    assert ours == theirs


@pytest.mark.parametrize("name", sorted(BINARY_CASES))
def test_binary_only_cases_match_pylibmc(servers, name):
    beh = {"cas": True} if "cas" in name else None
    theirs, ours = run_both(servers[:1], BINARY_CASES[name], beh, binary=True)
    assert ours == theirs


@pytest.mark.parametrize("name", MULTI)
def test_same_outcome_on_three_servers_binary(servers, name):
    case = CASES.get(name) or BINARY_CASES[name]
    theirs, ours = run_both(servers, case, binary=True)
    assert ours == theirs


def test_text_and_binary_clients_share_items(servers):
    text = fastmc.Client(servers)
    binary = fastmc.Client(servers, binary=True)
    text.flush_all()
    values = {"s": "str", "b": b"bytes", "i": 42, "l": [1, 2], "z": "z" * 5000}
    assert text.set_multi(values) == []
    assert binary.get_multi(list(values)) == values
    assert binary.set_multi({k + "2": v for k, v in values.items()}) == []
    assert text.get_multi([k + "2" for k in values]) == {k + "2": v for k, v in values.items()}
    # the same item, the same flags, read through pylibmc as well
    assert pylibmc.Client(servers, binary=True).get_multi(list(values)) == values


def test_binary_flag_and_repr(servers):
    mc = fastmc.Client(servers[:1], binary=True)
    assert mc.binary is True and mc.binary_protocol is True
    assert repr(mc) == repr(pylibmc.Client(servers[:1], binary=True))
    assert mc.clone().binary_protocol is True
    assert mc.clone().set("cl", 1) and mc.get("cl") == 1


def test_noreply_stores_without_waiting_for_per_key_answers(servers):
    mc = fastmc.Client(servers, binary=True, behaviors={"_noreply": 1})
    mc.flush_all()
    assert mc.set("nr", 1) is True
    # soft failures are not reported under noreply (as in text mode)
    assert mc.add("nr", 2) is True
    assert mc.replace("missing", 3) is True
    assert mc.delete("missing") is True
    assert mc.set_multi({"m%d" % i: i for i in range(300)}) == []
    assert mc.get_multi(["nr"] + ["m%d" % i for i in range(300)]) == dict(
        {"nr": 1}, **{"m%d" % i: i for i in range(300)}
    )
    # a hard failure is still attributed to its key
    with pytest.raises(fastmc.TooBig):
        mc.set("huge", b"x" * (2 * 1024 * 1024))
    assert mc.get("nr") == 1


def test_connection_survives_per_key_errors(servers):
    # pylibmc marks the server failed after incr on a non-number (ServerDown next); the binary
    # stream is in sync after that status, so fastmc keeps the connection.
    mc = fastmc.Client(servers[:1], binary=True)
    mc.set("s", "abc")
    with pytest.raises(fastmc.UnknownReadFailure):
        mc.incr("s")
    assert mc.get("s") == "abc"
    with pytest.raises(fastmc.TooBig):
        mc.set_multi({"ok1": 1, "huge": b"x" * (2 * 1024 * 1024), "ok2": 2})
    assert mc.get_multi(["ok1", "ok2", "huge"]) == {"ok1": 1, "ok2": 2}


def test_incr_multi_on_non_numbers_raises_by_pylibmcs_text_mode_rule(servers):
    """Binary pylibmc marks the server failed on a non-number, and its class then depends on
    earlier keys; fastmc follows pylibmc's text-mode rule, the last key picks the class, with
    binary's class for a non-number (UnknownReadFailure, as binary incr raises; text mode's is
    ClientError). See docs/binary-sasl-tls.md."""
    text = pylibmc.Client(servers[:1])
    text.flush_all()
    binary_class = {("raise", "ClientError"): ("raise", "UnknownReadFailure")}
    theirs = [(k, binary_class.get(o, o)) for k, o in _incr_multi_failure_classes(text)]
    ours = fastmc.Client(servers[:1], binary=True)
    ours.flush_all()
    assert ("raise", "UnknownReadFailure") in [o for _, o in theirs]
    assert _incr_multi_failure_classes(ours) == theirs


def test_an_unknown_stats_group_is_not_a_server_failure(servers):
    """memcached answers a binary STAT for a group it does not have with "Not found": pylibmc
    raises SomeErrors and then marks every server down (ServerDown on the next set); fastmc
    raises the same class and keeps the servers."""
    mp = pylibmc.Client(servers, binary=True)
    mf = fastmc.Client(servers, binary=True)
    with pytest.raises(pylibmc.SomeErrors):
        mp.get_stats("bogus")
    with pytest.raises(fastmc.SomeErrors):
        mf.get_stats("bogus")
    assert mf.set("n1", -1) and mf.get("n1") == -1
    assert len(mf.get_stats()) == len(servers)


@pytest.mark.parametrize(
    "op, reply, message",
    [
        ("get", b"ERROR\r\n", "bad magic byte"),
        ("set", binary_header(0x11, status=0x05, opaque=999), "names no key of the batch"),
        ("get", binary_header(0x11, status=0x05, opaque=999), "does not answer"),
        ("get", binary_header(0x0D, body_len=0xFFFFFFFF), "too large"),
        # a hit whose opaque names another key of the batch than the key it carries
        (
            "get_multi",
            struct.pack(">BBHBBHIIQ", 0x81, 0x0D, 1, 4, 0, 0, 6, 0, 0) + b"\0\0\0\0k1",
            "not requested",
        ),
    ],
)
def test_garbage_from_the_server_is_a_protocol_error(op, reply, message):
    # a fake that answers every read with the same bytes (a real server cannot)
    with ScriptedServer(reply) as srv:
        mc = fastmc.Client([srv.address], binary=True, behaviors={"get_multi_raise_on_error": 1})
        calls = {
            "get": lambda: mc.get("k"),
            "set": lambda: mc.set("k", 1),
            "get_multi": lambda: mc.get_multi(["j", "k"]),
        }
        with pytest.raises(fastmc.ProtocolError, match=message):
            calls[op]()


def test_threads_share_one_binary_client(servers):
    mc = fastmc.Client(servers, binary=True)

    def work(t):
        for i in range(200):
            k = "bt%d-%d" % (t, i)
            assert mc.set(k, {"t": t, "i": i})
            assert mc.get(k) == {"t": t, "i": i}
            assert mc.add(k, 0) is False
            if i % 4 == 0:
                assert mc.delete(k) and mc.get(k) is None
            if i % 25 == 0:
                keys = ["bt%d-%d" % (t, j) for j in range(i + 1)]
                got = mc.get_multi(keys)
                assert got == {k: {"t": t, "i": j} for j, k in enumerate(keys) if j % 4 != 0}

    assert run_threads(work, 8) == []


def test_binary_protocol_round_trips_pickled_values(mcd):
    """Pickled values were silently corrupted over another client's binary protocol
    (gusdan/django-elasticache#6). Over the binary protocol every value type, pickles of every size
    (compressed or not) included, reads back equal, through single and multi-key calls, and a
    text-mode client reads the same bytes."""
    import datetime

    values = {
        "dict": {"a": [1, 2.5, None], "b": ("t", b"\x00\xff")},
        "obj": datetime.datetime(2026, 12, 3, 8, 0, 0),
        "big": {"k%d" % i: list(range(i % 50)) for i in range(5000)},
        "set": {1, 2, 3},
        "str": "h\u00e9llo",
        "bytes": b"\r\n\x00END\r\n",
        "int": -(2**70),
        "bool": True,
    }
    bin_mc = fastmc.Client([mcd.address], binary=True)
    text_mc = fastmc.Client([mcd.address])
    for k, v in values.items():
        assert bin_mc.set(k, v, min_compress_len=1024)
        assert bin_mc.get(k) == v and text_mc.get(k) == v
    assert bin_mc.set_multi({"m" + k: v for k, v in values.items()}) == []
    assert bin_mc.get_multi(["m" + k for k in values]) == {"m" + k: v for k, v in values.items()}
    assert text_mc.get_multi(["m" + k for k in values]) == {"m" + k: v for k, v in values.items()}
