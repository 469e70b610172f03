"""Multi-key writes over the meta protocol's quiet mode (memcached >= 1.6), and the classic
commands everywhere else: what goes on the wire, that every outcome is attributed to its key,
and that a server without the meta protocol (an in-process fake) gets only classic commands."""

import random

import fastmc
import pylibmc
import pytest
from fakes import MiniMemcached
from memcached import Memcached


def test_quiet_meta_writes_after_the_probe(relayed):
    _, relay = relayed
    mc = fastmc.Client([relay.address])
    assert mc.set_multi({"a": 1, "b": 2}) == []
    first = relay.take()
    # unknown server: classic commands, then one `mn` probe
    assert first.count(b"set ") == 2 and first.endswith(b"mn\r\n") and b"ms " not in first
    assert mc.set_multi({"c": 3, "d": "four"}, time=100) == []
    second = relay.take()
    assert second.startswith(b"ms c 1 T100 F4 q\r\n3\r\n") and b"set " not in second
    assert second.endswith(b"mn\r\n")
    assert mc.delete_multi(["a", "b"]) is True
    assert relay.take() == b"md a q O0\r\nmd b q O1\r\nmn\r\n"
    # single-key operations and noreply batches keep the classic commands
    mc.set("e", 5)
    mc.set_multi({"f": 6, "g": 7}, noreply=True)
    assert mc.delete("e") is True
    third = relay.take()
    assert b"ms " not in third and b"md " not in third and b"set e 4 0 1\r\n" in third
    assert mc.get_multi(["a", "b", "c", "d", "f", "g"]) == {"c": 3, "d": "four", "f": 6, "g": 7}


def _ops(client, keys):
    """A sequence of multi writes whose outcomes differ key by key."""
    out = []
    half = keys[: len(keys) // 2]
    out.append(sorted(client.set_multi({k: "v" + k for k in half})))
    out.append(sorted(client.add_multi({k: "a" + k for k in keys})))  # first half exists
    out.append(sorted(client.set_multi({k: k for k in keys[::3]}, key_prefix="p:")))
    random.Random(7).shuffle(keys)
    out.append(client.delete_multi(keys[::2]))
    out.append(sorted(client.add_multi({k: 1 for k in keys[: len(keys) // 3]})))
    out.append(client.delete_multi(["never-set-%d" % i for i in range(5)]))
    out.append(client.get_multi(keys))
    out.append(client.get_multi(keys[::3], key_prefix="p:"))
    return out


def test_outcomes_match_pylibmc_key_by_key():
    """The same writes through fastmc (quiet meta batches) and pylibmc (classic commands) on
    two fresh servers give the same failed keys, the same bools and the same data."""
    keys = ["k%03d" % i for i in range(300)]
    m1, m2 = Memcached(), Memcached()
    try:
        mc = fastmc.Client([m1.address])
        mc.set_multi({"warm": 1, "up": 2})  # the probe
        mc.delete_multi(["warm", "up"])
        ref = pylibmc.Client([m2.address])
        assert _ops(mc, list(keys)) == _ops(ref, list(keys))
    finally:
        m1.stop()
        m2.stop()


def test_replace_multi_reports_missing_keys(relayed):
    _, relay = relayed
    mc = fastmc.Client([relay.address])
    mc.set_multi({"x%d" % i: i for i in range(0, 40, 2)})
    relay.take()
    failed = mc.replace_multi({"x%d" % i: -i for i in range(40)})
    assert b" MR q O" in relay.take()
    assert sorted(failed) == sorted("x%d" % i for i in range(1, 40, 2))
    got = mc.get_multi(["x%d" % i for i in range(40)])
    assert got == {"x%d" % i: -i for i in range(0, 40, 2)}


def test_too_big_value_in_a_quiet_batch_fails_only_its_key(relayed):
    _, relay = relayed
    mc = fastmc.Client([relay.address])
    mc.set_multi({"w1": 1, "w2": 2})  # the probe: the next batches are quiet
    batch = {"k%d" % i: i for i in range(50)}
    batch["big"] = b"x" * (2 * 1024 * 1024)
    batch.update({"j%d" % i: i for i in range(50)})
    for _ in range(2):
        with pytest.raises(fastmc.TooBig) as ei:
            mc.set_multi(batch)
        assert ei.value.failed_keys == ["big"]
        assert b"ms big 2097152 q\r\n" in relay.take()
        expect = {k: v for k, v in batch.items() if k != "big"}
        assert mc.get_multi(list(batch)) == expect
        mc.delete_multi(list(expect))


def test_text_only_server_gets_classic_commands():
    """Against a server without the meta protocol every multi operation works; it is probed
    once with `mn` (answered ERROR) and never sent a meta command again."""
    fake = MiniMemcached(meta=False)
    try:
        mc = fastmc.Client([fake.address])
        for _ in range(3):
            assert mc.set_multi({"a": 1, "b": "two", "c": b"3"}) == []
            assert sorted(mc.add_multi({"a": 0, "d": 4})) == ["a"]
            assert sorted(mc.replace_multi({"e": 0, "b": "2"})) == ["e"]
            assert mc.get_multi(["a", "b", "c", "d", "e"]) == {"a": 1, "b": "2", "c": b"3", "d": 4}
            assert mc.delete_multi(["a", "b", "zz"]) is False
            assert mc.delete_multi(["c", "d"]) is True
            assert mc.get_multi(["a", "b", "c", "d"]) == {}
        cmds = fake.commands()
        assert cmds.count(b"mn") == 1
        assert not {b"ms", b"md", b"mg"} & set(cmds)
    finally:
        fake.close()


def test_probe_that_closes_the_connection_is_not_a_server_failure():
    """A proxy may hang up on a command it does not know: the batch's keys already have their
    answers, the server is not marked down, and it is not probed again."""
    fake = MiniMemcached(meta=False, unknown="close")
    try:
        mc = fastmc.Client([fake.address])
        assert mc.set_multi({"a": 1, "b": 2}) == []
        assert mc.get_multi(["a", "b"]) == {"a": 1, "b": 2}
        assert mc.set_multi({"c": 3, "d": 4}) == []
        assert mc.delete_multi(["a", "c"]) is True
        assert fake.commands().count(b"mn") == 1
    finally:
        fake.close()


def test_error_line_without_token_is_settled_by_reading_back():
    """An error line in a quiet batch names no key: it belongs to one of the keys between the
    neighbouring answered keys. fastmc reads those keys back: each that holds exactly what was
    sent is stored, the others fail. So exactly the failed keys are reported, for set, add and
    delete, and every key reported stored is stored."""
    bad = {b"k17", b"k40"}
    fake = MiniMemcached(meta=True)
    try:
        mc = fastmc.Client([fake.address])
        mc.set_multi({"w": 0, "v": 0})  # the probe
        keys = ["k%d" % i for i in range(60)]
        # some keys exist already: `add` answers NS for them (with their token)
        mc.set_multi({k: 0 for k in keys[10:20] + keys[30:35]})
        fake.server_error_keys = bad
        existing = set(keys[10:20] + keys[30:35])
        with pytest.raises(fastmc.ServerError) as ei:
            mc.add_multi({k: 1 for k in keys})
        # k17 lies between two answered keys (k16 and k18 answered NS): it alone is to blame.
        # After k34 nothing answered, so k40's error could be any of k35..k59: read back.
        assert set(ei.value.failed_keys) == existing | {"k17", "k40"}
        for k in keys:
            if k not in ei.value.failed_keys:
                assert fake.data[k.encode()] == (4, b"1"), k
        received = fake.commands()
        assert received.count(b"get") >= 1  # the read-back, one classic get line
        with pytest.raises(fastmc.ServerError) as ei:
            mc.set_multi({k: 2 for k in keys})
        assert sorted(ei.value.failed_keys) == ["k17", "k40"]
        assert mc.get_multi(keys) == {k: 2 for k in keys if k not in ("k17", "k40")} | {"k17": 0}
        fake.server_error_keys = set()
        assert mc.delete_multi(keys) is False  # k40 was never stored
        assert mc.get_multi(keys) == {}
    finally:
        fake.close()


def test_huge_quiet_batches_on_three_servers():
    """300,000 keys in one quiet set_multi and one delete_multi over three servers: no deadlock
    on full socket buffers, every key attributed (none failed, all stored, all deleted)."""
    procs = [Memcached(memory_mb=256) for _ in range(3)]
    try:
        mc = fastmc.Client([p.address for p in procs])
        mc.set_multi({"warm%d" % i: i for i in range(30)})  # probes every server
        data = {"h%d" % i: "v%d" % i for i in range(300_000)}
        assert mc.set_multi(data) == []
        keys = list(data)
        got = mc.get_multi(keys)
        assert got == data
        assert mc.delete_multi([*keys, "missing"]) is False
        assert mc.get_multi(keys[::1000]) == {}
        assert mc.delete_multi(keys[:10]) is False
    finally:
        for p in procs:
            p.stop()


@pytest.mark.parametrize("cas", [False, True])
def test_get_multi_asks_each_server_in_one_request(relayed, cas):
    """Up to 1,000 keys of a server in one `get` line: memcached answers each request of a
    pipeline with writes of its own, and over a network a reply in several writes took up to
    half a round trip longer. Touching fetches keep lines of 100 keys: memcached reads an
    over-long line only for get/gets."""
    _, relay = relayed
    mc = fastmc.Client([relay.address], behaviors={"cas": cas})
    keys = [f"key:{i:05d}" for i in range(2500)]
    assert mc.set_multi(dict.fromkeys(keys, b"v")) == []
    relay.take()
    got = mc.gets_multi(keys) if cas else mc.get_multi(keys)
    assert sorted(got) == keys
    verb = b"gets" if cas else b"get"
    lines = relay.take().split(b"\r\n")
    assert lines[-1] == b"" and [line.split()[0] for line in lines[:-1]] == [verb] * 3
    assert [line.split()[1:] for line in lines[:-1]] == [
        [k.encode() for k in keys[i : i + 1000]] for i in (0, 1000, 2000)
    ]
    assert mc.gat_multi(keys[:250], 100) == dict.fromkeys(keys[:250], b"v")
    lines = relay.take().split(b"\r\n")
    assert [len(line.split()) - 2 for line in lines[:-1]] == [100, 100, 50]
    assert all(line.startswith(verb.replace(b"get", b"gat") + b" 100 ") for line in lines[:-1])
