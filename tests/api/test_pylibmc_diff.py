"""Differential tests: each case of cases.py runs through real pylibmc (the oracle) and through
fastmc against the same freshly flushed memcached, and the outcomes (return value, or exception
class name) must be equal; then the module-level API (exceptions, constants, server specs, repr)
compared with pylibmc's."""

import socket
import subprocess
import sys

import fastmc
import pylibmc
import pytest
from cases import CASES, MULTI_SERVER_CASES, TEXT_CASES, VALUES, outcome, run_both
from memcached import server_quirks

# What the case gives where the server refuses the keys (memcached 1.6.18): pylibmc's classes,
# caught; fastmc gives it on every server, since it never sends such a key.
BAD_KEYS_CAUGHT = (
    "ok",
    [("incr", "caught"), ("delete", "caught"), ("get_multi", {"a": 1, "b": 2, "c": 3})],
)


@pytest.mark.parametrize("name", sorted({**CASES, **TEXT_CASES}))
def test_same_outcome_as_pylibmc(servers, name):
    theirs, ours = run_both(servers[:1], {**CASES, **TEXT_CASES}[name])
    if name == "bad_keys_caught_as_pylibmcs" and not server_quirks(servers[0])["bad_keys_refused"]:
        # memcached 1.6.45 looks such keys up (NOT_FOUND) where 1.6.18 refused them, so pylibmc,
        # which sends them, raises NotFound instead (docs/packaging.md)
        assert theirs == ("raise", "NotFound")
        assert ours == BAD_KEYS_CAUGHT
        return
    assert ours == theirs


@pytest.mark.parametrize("name", MULTI_SERVER_CASES)
@pytest.mark.parametrize(
    "behaviors", [None, {"ketama": True}, {"ketama_weighted": True}, {"hash": "crc"}]
)
def test_same_outcome_on_three_servers(servers, name, behaviors):
    theirs, ours = run_both(servers, CASES[name], behaviors)
    assert ours == theirs


def test_values_written_by_one_read_identically_by_the_other(servers):
    a = pylibmc.Client(servers)
    b = fastmc.Client(servers)
    for i, v in enumerate(VALUES):
        for w, r in ((a, b), (b, a)):
            for mcl in (0, 1):
                k = "x%d-%d" % (i, mcl)
                assert w.set(k, v, min_compress_len=mcl)
                got = r.get(k)
                assert got == v and type(got) is (int if type(v) is bool else type(v))


@pytest.mark.parametrize("prefix", ["", "p:"])
def test_a_multi_store_of_every_kind_of_value_reads_identically(servers, prefix):
    """Keys made here (with the prefix) and values made here (pickled, numbers, compressed)
    next to keys and values sent from the caller's own bytes, in one set_multi."""
    a = pylibmc.Client(servers)
    b = fastmc.Client(servers)
    for mcl in (0, 1):
        mapping = {"m%d-%d" % (i, mcl): v for i, v in enumerate(VALUES)}
        assert b.set_multi(mapping, key_prefix=prefix, min_compress_len=mcl) == []
        got = a.get_multi(list(mapping), key_prefix=prefix)
        assert got == mapping
        assert [type(got[k]) for k in mapping] == [
            int if type(v) is bool else type(v) for v in mapping.values()
        ]


def test_raw_bytes_on_the_server_are_identical(servers):
    def raw(key):
        host, port = servers[0].split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"get " + key + b"\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                buf += s.recv(65536)
            return buf

    a = pylibmc.Client(servers[:1])
    b = fastmc.Client(servers[:1])
    for v in VALUES:
        for mcl in (0, 1):
            a.set("raw", v, min_compress_len=mcl)
            want = raw(b"raw")
            b.set("raw", v, min_compress_len=mcl)
            assert raw(b"raw") == want, (v, mcl)


def test_exception_hierarchy_matches():
    names = [n for n, _ in pylibmc.exceptions]
    assert [n for n, _ in fastmc.exceptions] == names
    for n, cls in pylibmc.exceptions:
        ours = getattr(fastmc, n)
        assert ours.__module__ == "pylibmc"
        assert [b.__name__ for b in ours.__bases__] == [b.__name__ for b in cls.__bases__]
        assert getattr(ours, "retcode", None) == getattr(cls, "retcode", None)


def test_exceptions_pickle_once_installed_as_pylibmc():
    code = (
        "import fastmc, pickle; fastmc.install_as_pylibmc(); import pylibmc; "
        "assert pylibmc.Client is fastmc.Client; "
        "e = pickle.loads(pickle.dumps(pylibmc.NotFound('m'))); "
        "assert type(e) is fastmc.NotFound and e.args == ('m',)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_module_constants_match():
    for name in [
        "all_behaviors",
        "hashers",
        "distributions",
        "server_type_tcp",
        "server_type_udp",
        "server_type_unix",
        "callback_namespace",
        "all_callbacks",
        "support_compression",
    ]:
        assert getattr(fastmc, name) == getattr(pylibmc, name), name
    for name in dir(pylibmc):
        if name.startswith(("hash_", "distribution_")):
            assert getattr(fastmc, name) == getattr(pylibmc, name), name
    assert fastmc.consts.hashers_rvs == pylibmc.consts.hashers_rvs


def test_constructor_errors_match():
    def errs(mod):
        out = []
        for args, kw in [
            ((["127.0.0.1"],), {"username": "u"}),
            ((["127.0.0.1"],), {"username": "u", "password": "p"}),
            (([],), {}),
            ((["127.0.0.1", "/tmp/x.sock"],), {}),
            ((["::1"],), {}),
            ((["[::1"],), {}),
            ((["host:abc"],), {}),
        ]:
            out.append(outcome(lambda args=args, kw=kw: mod.Client(*args, **kw)))
        return [o if o[0] == "raise" else "ok" for o in out]

    assert errs(fastmc) == errs(pylibmc)


def test_translate_server_spec_matches():
    for spec in [
        "127.0.0.1",
        "127.0.0.1:22122",
        "127.0.0.1:1234:2",
        "localhost",
        "/var/run/mc.sock",
        "udp:127.0.0.1",
        "udp:127.0.0.1:5555",
        "udp:[abcd::1]:5555:2",
        "[::1]",
        "[::1]:22122",
        "[::1]:22122:3",
        "",
        " 127.0.0.1 ",
    ]:
        for kw in ({}, {"weight": 2}, {"port": 1234}, {"port": 1234, "weight": 3}):
            ours = fastmc.client.translate_server_spec(spec, **kw)
            assert ours == pylibmc.client.translate_server_spec(spec, **kw), (spec, kw)


def test_subclass_with_serializer_hooks(servers):
    def make(mod):
        class JSONClient(mod.Client):
            def serialize(self, value):
                return repr(value).encode(), 7

            def deserialize(self, data, flags):
                if data == b"'miss'":
                    raise mod.CacheMiss()
                return (data, flags)

        c = JSONClient(servers[:1])
        c.flush_all()
        return (
            c.set("a", [1]),
            c.get("a"),
            c.set("m", "miss"),
            c.get("m", "D"),
            "m" in c,
            c.set_multi({"b": 2}),
            c.get_multi(["a", "b", "m"]),
        )

    assert outcome(lambda: make(fastmc)) == outcome(lambda: make(pylibmc))


def test_repr_and_str_match(servers):
    for mod in (fastmc, pylibmc):
        mc = mod.Client(servers[:1])
        assert repr(mc) == "Client(%r, binary=False)" % (servers[:1],)
        assert str(mc) == "<Client for %s, binary=False>" % servers[0]


def test_socket_size_read_back_without_a_server():
    """pylibmc reads _socket_send_size/_socket_recv_size from a live connection to the first
    server; where none can be made, both read back 0."""
    from memcached import free_port

    down = ["127.0.0.1:%d" % free_port()]
    for name in ("_socket_send_size", "_socket_recv_size"):
        assert fastmc.Client(down).behaviors[name] == pylibmc.Client(down).behaviors[name] == 0


def _detailed(fn):
    """("ok", value) or ("raise", class name, message)."""
    try:
        return ("ok", fn())
    except Exception as e:
        return ("raise", type(e).__name__, str(e))


# Every method given the empty key on a client with a namespace.
EMPTY_KEY_CALLS = {
    "get": lambda c: c.get(""),
    "gets": lambda c: c.gets(""),
    "set": lambda c: c.set("", 1),
    "add": lambda c: c.add("", 1),
    "replace": lambda c: c.replace("", 1),
    "append": lambda c: c.append("", "x"),
    "prepend": lambda c: c.prepend("", "x"),
    "cas": lambda c: c.cas("", 1, 1),
    "delete": lambda c: c.delete(""),
    "touch": lambda c: c.touch("", 5),
    "incr": lambda c: c.incr("", 5),
    "decr": lambda c: c.decr("", 5),
    "incr_multi": lambda c: c.incr_multi([""], delta=5),
    "incr_multi_last": lambda c: c.incr_multi(["a", ""], delta=5),
    "incr_multi_first": lambda c: c.incr_multi(["", "a"], delta=5),
    "get_multi": lambda c: c.get_multi([""]),
    "set_multi": lambda c: c.set_multi({"": 3}),
    "add_multi": lambda c: c.add_multi({"": 3}),
    "delete_multi": lambda c: c.delete_multi([""]),
}


@pytest.mark.parametrize("binary", [False, True])
def test_an_empty_key_never_reaches_the_server_as_the_namespace(servers, binary):
    """libmemcached checks the key's own length, so pylibmc refuses the empty key on every
    method, namespace or not, and sends nothing for it: fastmc must not send the bare namespace
    (an incr_multi incremented it). The namespace's own item shows what was sent."""
    got = []
    for mod in (pylibmc, fastmc):
        raw = mod.Client(servers[:1], binary=binary)
        c = mod.Client(servers[:1], binary=binary, behaviors={"namespace": b"ns:", "cas": 1})
        out = []
        for name, call in EMPTY_KEY_CALLS.items():
            raw.set_multi({"ns:": 10, "ns:a": 1})
            out.append((name, _detailed(lambda call=call, c=c: call(c)), raw.get("ns:")))
        got.append(out)
    assert got[1] == got[0]
    assert {sent for _, _, sent in got[1]} == {10}


@pytest.mark.parametrize("verify_keys", [0, 1])
def test_incr_multi_with_a_key_that_would_break_the_text_protocol(servers, verify_keys):
    """A key with a space among others: pylibmc sends it and raises the class of the server's
    answer, or the base Error, by the key's place; fastmc never sends it and raises
    BadKeyProvided (also a ClientError), with pylibmc's count. The other keys are incremented
    as pylibmc increments them. With verify_keys pylibmc refuses the key too, and fastmc
    follows it exactly."""
    mixes = (["a", "b c"], ["b c", "a"], ["a", "b c", "b"], ["zz", "b c"], ["b c", "zz"])
    for keys in mixes:
        got = []
        for mod in (pylibmc, fastmc):
            c = mod.Client(servers[:1], behaviors={"verify_keys": verify_keys})
            c.flush_all()
            c.set_multi({"a": 10, "b": 20})
            with pytest.raises(mod.Error) as e:
                c.incr_multi(keys)
            got.append((e.value, c.get_multi(["a", "b"])))
        (theirs, their_counts), (ours, our_counts) = got
        assert our_counts == their_counts, keys
        assert str(ours) == str(theirs), keys
        if verify_keys:
            assert type(ours).__name__ == type(theirs).__name__, keys
            continue
        assert isinstance(ours, fastmc.BadKeyProvided), keys
        if not isinstance(theirs, pylibmc.NotFound):  # a miss last makes pylibmc's NotFound
            assert isinstance(ours, getattr(fastmc, type(theirs).__name__)), (keys, theirs)


class _NotItsDigits(int):
    def __str__(self):
        return "not digits"


def test_an_int_subclass_is_stored_as_its_number_not_its_str(servers):
    """docs/migration.md: pylibmc stores str() of an int subclass under the int flag, which
    neither client reads back; fastmc stores the number, which both read back as that int."""
    theirs = pylibmc.Client(servers[:1])
    ours = fastmc.Client(servers[:1])
    theirs.set("by_pylibmc", _NotItsDigits(5))
    ours.set("by_fastmc", _NotItsDigits(5))
    for reader in (theirs, ours):
        with pytest.raises(ValueError):
            reader.get("by_pylibmc")
        got = reader.get("by_fastmc")
        assert got == 5 and type(got) is int


def test_a_key_the_namespace_makes_too_long_is_never_sent(relayed):
    """docs/migration.md: namespace + key over 250 bytes is refused as any key over 250 bytes:
    a miss in get_multi (as pylibmc, whose server refuses it), False or a failed-key list with
    verify_keys, BadKeyProvided elsewhere; the relay shows that it never reaches the server."""
    server, relay = relayed
    long = "k" * 245
    theirs = pylibmc.Client([server.address], behaviors={"namespace": b"n" * 10})
    assert theirs.get_multi([long]) == {}
    ours = fastmc.Client([relay.address], behaviors={"namespace": b"n" * 10})
    assert ours.get_multi([long, "x"]) == {}
    for call in (lambda: ours.set(long, 1), lambda: ours.get(long), lambda: ours.delete(long)):
        with pytest.raises(fastmc.BadKeyProvided):
            call()
    with pytest.raises(fastmc.BadKeyProvided):
        ours.incr_multi([long])
    ours.behaviors = {"verify_keys": 1}
    assert ours.set(long, 1) is False
    assert ours.set_multi({long: 1, "x": 2}) == [long]
    assert ours.delete(long) is False
    # a miss in get_multi under verify_keys too, and the other keys' values come back
    # (pylibmc returns {} for the whole call)
    assert ours.get_multi([long, "x"]) == {"x": 2}
    theirs.behaviors = {"verify_keys": 1}
    assert theirs.get_multi([long]) == {}
    # a key that is bad on its own still fails the whole call, as in pylibmc
    with pytest.raises(fastmc.BadKeyProvided):
        ours.get_multi(["x", "bad\x80"])
    assert long.encode() not in relay.take()


@pytest.mark.parametrize("group", ["items", "slabs", "settings", "sizes", "conns"])
def test_get_stats_of_a_group_is_pylibmcs_struct(server, group):
    """A group has none of the 22 stats libmemcached parses (or not as numbers: `settings`'
    `evictions on`): pylibmc returns its stat struct's initial values, pid -1, an empty
    version, rusage 0.0, and 0 for the rest; so does fastmc."""
    theirs = pylibmc.Client([server.address]).get_stats(group)
    ours = fastmc.Client([server.address]).get_stats(group)
    assert [s for s, _ in ours] == [s for s, _ in theirs]
    assert ours[0][1] == theirs[0][1]
    assert ours[0][1]["pid"] == b"-1" and ours[0][1]["version"] == b""
    assert ours[0][1]["rusage_user"] == b"0.0"
