"""Replies that are slow, cut, too long or short, not the protocol, error lines, or values the
client cannot decode: the call raises (never returns a wrong value or a miss), and the next call
gets its own value, on the same connection wherever the stream is still in sync."""

import time

import fastmc
import pytest
from checks import AGAIN, total_connections
from fakes import FakeMemcached, ScriptedServer


def test_trickled_replies_give_the_right_answers():
    """Every reply arrives one byte at a time: the incremental parser must still answer right."""
    with FakeMemcached(trickle=True) as f:
        mc = fastmc.Client([f.address], behaviors={"cas": True})
        assert mc.set("a", "hello")
        assert mc.set("b", b"x" * 300)
        assert mc.set("n", 41)
        assert mc.get("a") == "hello"
        assert mc.get_multi(["a", "b", "missing", "n"]) == {"a": "hello", "b": b"x" * 300, "n": 41}
        assert mc.get_multi(["a"], key_prefix="") == {"a": "hello"}
        assert mc.incr("n") == 42 and mc.decr("n", 2) == 40
        val, cas = mc.gets("a")
        assert val == "hello" and mc.cas("a", "bye", cas) and not mc.cas("a", "no", cas)
        assert mc.append("a", "!") and mc.get("a") == "bye!"
        assert mc.add("a", "x") is False
        assert mc.touch("a", 10) and not mc.touch("zz", 10)
        assert mc.delete("a") and not mc.delete("a")
        assert mc.get("a") is None
        assert mc.set_multi({"m%d" % i: i for i in range(20)}) == []
        assert mc.get_multi(["m%d" % i for i in range(20)]) == {"m%d" % i: i for i in range(20)}
        assert int(mc.get_stats()[0][1]["pid"]) == 1
        assert f.accepted == 1  # one connection did it all


DAMAGE = ["hang", "hang_mid", "close_mid", "long", "short", "garbage", "wrong_key", "extra"]


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("op", ["get", "get_multi", "gets"])
def test_damaged_reply_raises_and_the_next_call_gets_its_own_value(fake, damage, op):
    """A reply that hangs, is cut, is longer or shorter than announced, is not the protocol, names
    another key or comes with extra bytes never returns a value (or a miss): it raises, the
    connection is dropped, and the next call gets its own value. (meta-memcache PR #30 saw replies
    for the wrong key under gevent; pylibmc #71 aborted when the server went away mid-reply.)"""
    mc = fastmc.Client([fake.address], behaviors=dict(AGAIN, cas=True))
    assert mc.set("victim", "V" * 40)
    assert mc.set("other", "the other value")
    fake.rule("victim", damage)
    t0 = time.monotonic()
    with pytest.raises(fastmc.Error):
        if op == "get":
            mc.get("victim")
        elif op == "gets":
            mc.gets("victim")
        else:
            # with every server failing, get_multi raises (never a silently short dict)
            mc.get_multi(["victim", "other"])
    assert time.monotonic() - t0 < 0.4 * 1.1 + 0.1
    fake.rule("victim", None)
    assert mc.get("other") == "the other value"
    assert mc.get("victim") == "V" * 40
    assert mc.get_multi(["other", "victim"]) == {"other": "the other value", "victim": "V" * 40}


SINGLE_WRITES = {
    "set": lambda mc: mc.set("victim", "7"),
    "delete": lambda mc: mc.delete("victim"),
    "incr": lambda mc: mc.incr("victim"),
    "touch": lambda mc: mc.touch("victim", 10),
}


@pytest.mark.parametrize("damage", ["extra", "garbage", "long", "hang_mid", "close_mid"])
@pytest.mark.parametrize("op", sorted(SINGLE_WRITES))
def test_damaged_reply_to_a_single_write_raises_and_the_next_call_is_right(fake, damage, op):
    """A single write's reply is read by its family on the short path (one recv, the reply
    whole); a reply it does not take whole and plain goes on to the general path's reader: an
    unasked reply after it, bytes that are not the protocol, a reply of another kind, a cut one.
    The call raises, and the next calls get their own answers."""
    mc = fastmc.Client([fake.address], behaviors=AGAIN)
    assert mc.set("victim", "1")
    assert mc.set("other", "the other value")
    fake.rule("victim", damage)
    with pytest.raises(fastmc.Error):
        SINGLE_WRITES[op](mc)
    fake.rule("victim", None)
    assert mc.get("other") == "the other value"
    assert mc.set("victim", "5") and mc.incr("victim") == 6
    assert mc.delete("victim") and mc.get("victim") is None


def test_half_reply_is_a_timeout_and_never_a_value():
    fake = ScriptedServer(b"VALUE k 0 10\r\nhalf")  # every read: half a value, then nothing
    try:
        mc = fastmc.Client([fake.address], behaviors={"_poll_timeout": 200})
        with pytest.raises(fastmc.Error):
            mc.get("k")
        with pytest.raises(fastmc.Error):
            mc.get_multi(["k", "j"], key_prefix="p")
    finally:
        fake.close()


def test_garbage_reply_is_a_protocol_error():
    fake = ScriptedServer(b"HELLO THERE\r\n")
    try:
        mc = fastmc.Client([fake.address])
        with pytest.raises(fastmc.ProtocolError):
            mc.get("k")
    finally:
        fake.close()


@pytest.mark.parametrize("at_once", [1, 0])
def test_timed_out_connection_is_closed_never_pooled(fake, at_once):
    """A timed-out connection still has a reply on its way: reused, it answers the next request with
    the old one. (The Rust `memcache` crate put it back in its r2d2 pool; libmemcached-awesome
    1.1.0-1.1.3 kept it, which gave php-memcached #531 other keys' values at poll timeouts under 500
    ms.) Here the client closes it and the next call opens a new one. By default the stalled get
    was sent again on a fresh connection at half the timeout (docs/failures.md#lossy-links): that
    one is closed at the timeout too."""
    beh = {"retry_timeout": -1, "receive_timeout": 200_000, "mark_down_at_once": at_once}
    mc = fastmc.Client([fake.address], behaviors=beh)
    assert mc.set("k", "v")
    fake.rule("k", "hang")
    with pytest.raises(fastmc.Error, match="TIMEOUT"):
        mc.get("k")
    stalled = 1 if at_once else 2  # connections the get stalled on
    deadline = time.monotonic() + 2
    while fake.closed_by_client < stalled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.closed_by_client == stalled
    fake.rule("k", None)
    assert mc.get("k") == "v"
    assert fake.accepted == stalled + 1


@pytest.mark.parametrize(
    "line, exc",
    [
        ("SERVER_ERROR out of memory storing object", fastmc.ServerError),
        ("SERVER_ERROR object too large for cache", fastmc.TooBig),
        ("CLIENT_ERROR bad data chunk", fastmc.ClientError),
        ("SERVER_ERROR something else", fastmc.ServerError),
    ],
)
def test_error_lines_fail_only_their_key_and_keep_the_connection(fake, line, exc):
    """pymemcache closes the connection on SERVER_ERROR, and pylibmc aborts the rest of a set_multi.
    Here an error line fails its key only, the batch goes on, the stream stays in sync and the same
    connection is used afterwards."""
    mc = fastmc.Client([fake.address], behaviors=AGAIN)
    fake.rule("bad", "line:" + line)
    with pytest.raises(exc):
        mc.set("bad", "x")
    with pytest.raises(exc) as ei:
        mc.set_multi({"a": 1, "bad": 2, "c": 3})
    assert ei.value.failed_keys == ["bad"]
    fake.rule("bad", None)
    assert mc.get_multi(["a", "c", "bad"]) == {"a": 1, "c": 3}
    fake.rule("bad", "line:" + line)
    fake.put("bad", b"7")
    with pytest.raises(exc):
        mc.incr("bad")
    with pytest.raises(exc):
        mc.delete("bad")
    assert mc.incr("a") == 2
    assert fake.accepted == 1


@pytest.mark.parametrize("multi", [False, True])
def test_reply_before_the_value_is_sent_still_sends_the_value(multi):
    """memcached answers `SERVER_ERROR object too large` as soon as it has read the command
    line, then swallows the data block. The client must still send the whole block before the
    connection is reused; otherwise the server swallows the next request (a desync). Found by
    this suite: a request whose replies were all in was taken as finished while still writing."""
    with FakeMemcached(rcvbuf=4096) as f, FakeMemcached() as g:
        mc = fastmc.Client([f.address, g.address] if multi else [f.address], behaviors=AGAIN)
        key, other = [k for k in ("eb%d" % i for i in range(100)) if mc.hash(k) == 0][:2]
        f.put(other, b"the other value", flags=16)
        f.rule(key, "early:SERVER_ERROR object too large for cache")
        with pytest.raises(fastmc.TooBig):
            if multi:
                mc.set_multi({key: b"x" * (4 * 1024 * 1024), "elsewhere": 1})
            else:
                mc.set(key, b"x" * (4 * 1024 * 1024))
        assert mc.get(other) == "the other value"
        assert mc.set(other, "v2") and mc.get(other) == "v2"
        assert f.accepted == 1


def test_real_server_errors_keep_the_stream_in_sync(mcd):
    """The same with real memcached: `object too large` fails the key, the server unlinks the old
    value (the key is gone, not stale), CLIENT_ERROR on incr of a non-number (Django expects
    ClientError there) fails the key, and the connection is kept."""
    mc = fastmc.Client([mcd.address])
    assert mc.set("big", "old")
    assert mc.set("txt", "abc")
    before = total_connections(mc)
    with pytest.raises(fastmc.TooBig):
        mc.set("big", b"x" * (2 * 1024 * 1024))
    assert mc.get("big") is None
    with pytest.raises(fastmc.ClientError):
        mc.incr("txt")
    with pytest.raises(fastmc.NotFound):
        mc.incr("missing")
    with pytest.raises(fastmc.TooBig) as ei:
        mc.set_multi({"s1": 1, "big": b"y" * (2 * 1024 * 1024), "s2": 2})
    assert ei.value.failed_keys == ["big"]
    assert mc.get_multi(["s1", "s2", "txt"]) == {"s1": 1, "s2": 2, "txt": "abc"}
    assert total_connections(mc) == before


def test_multi_failures_are_attributed_to_their_keys(mcd):
    """A too-large value fails only its key; the batch goes on and the connection stays usable."""
    mc = fastmc.Client([mcd.address])
    batch = {"ok1": 1, "big": b"x" * (2 * 1024 * 1024), "ok2": 2}
    with pytest.raises(fastmc.TooBig) as ei:
        mc.set_multi(batch)
    assert ei.value.failed_keys == ["big"]
    assert mc.get_multi(["ok1", "ok2", "big"]) == {"ok1": 1, "ok2": 2}


def test_noreply_failures_are_not_hidden(mcd, fake):
    """Clients that write with noreply by default hide failures (pymemcache's
    `default_noreply=True`, memcache-async always), and an error line sent to a noreply command is
    left for the next reader. Here replies are on by default, so a failure is reported. With
    noreply the caller chose not to wait, as with pylibmc: the batch is not waited for, and an
    error line the server sends anyway is read before the next request and dropped, never taken
    for another reply (the stream stays in sync)."""
    mc = fastmc.Client([mcd.address])
    assert mc.behaviors["_noreply"] == 0
    with pytest.raises(fastmc.TooBig) as ei:
        mc.set_multi({"q1": 1, "q2": b"z" * (2 * 1024 * 1024)})
    assert ei.value.failed_keys == ["q2"]
    # memcached itself stays silent for `object too large` with noreply; the stream is in sync
    mc.set_multi({"q3": 3, "q4": b"z" * (2 * 1024 * 1024)}, noreply=True)
    assert mc.set("after", "ok") and mc.get_multi(["after", "q3"]) == {"after": "ok", "q3": 3}
    mf = fastmc.Client([fake.address])
    fake.rule("bad", "line:CLIENT_ERROR bad command line format")
    assert mf.set_multi({"good": 1, "bad": 2}, noreply=True) == []
    # the error line for "bad" is read before the next request and is not its reply
    assert mf.get("good") == 1
    with pytest.raises(fastmc.ClientError):
        mf.set("bad", 3)  # acknowledged: its own error
    assert mf.set("good", 4) and mf.get("good") == 4 and fake.accepted == 1


def test_corrupt_values_raise_and_keep_the_connection(fake):
    """pylibmc crashed on values it could not decode (#68 a bad decref on an unpickle failure, #206
    memory corruption in zlib inflate). Here a value the client cannot decode raises a Python
    exception, and the next call on the same connection is fine."""
    mc = fastmc.Client([fake.address], behaviors=AGAIN)
    fake.put("pickled", b"\x80\x04garbage", flags=1)
    fake.put("zipped", b"not zlib at all", flags=8)
    fake.put("ok", b"fine", flags=16)
    for key in ("pickled", "zipped"):
        with pytest.raises(Exception):  # noqa: B017 - pickle's or zlib's own error
            mc.get(key)
    assert mc.get("ok") == "fine"
    assert fake.accepted == 1


def test_flag_bits_match_pylibmc(fake):
    """libmc uses other flag bits, so mixing it with pylibmc on one cache corrupts types. Values
    written by another pylibmc-compatible client with flags int=2, long=4, text=16, raw=0 read back
    as pylibmc reads them."""
    mc = fastmc.Client([fake.address])
    fake.put("i", b"42", flags=2)
    fake.put("l", b"12345678901234567890", flags=4)
    fake.put("t", "héllo".encode(), flags=16)
    fake.put("r", b"\x00raw", flags=0)
    assert mc.get_multi(["i", "l", "t", "r"]) == {
        "i": 42,
        "l": 12345678901234567890,
        "t": "héllo",
        "r": b"\x00raw",
    }


def test_random_faults_never_return_a_wrong_value():
    """Chaos over two fake servers: random keys get random damage (cut, garbage, wrong key,
    extra bytes, too long or short, trickled, error lines, closes before or after applying),
    while a client reads and writes them. Every value returned is one written for that key;
    everything else is a pylibmc-class exception."""
    import random

    rnd = random.Random(4)
    fakes = [FakeMemcached(), FakeMemcached()]
    damage = [
        "close_mid",
        "long",
        "short",
        "garbage",
        "wrong_key",
        "extra",
        "line:SERVER_ERROR out of memory storing object",
        "line:CLIENT_ERROR nope",
        "close_before_apply",
        "close_after_apply",
        "hang_mid",
        "delay:0.01",
    ]
    try:
        mc = fastmc.Client(
            [f.address for f in fakes], behaviors={"retry_timeout": -1, "receive_timeout": 100_000}
        )
        keys = ["cx%d" % i for i in range(30)]
        seq = 0
        errors = 0
        for _ in range(300):
            for f in fakes:
                f.rules.clear()
            for k in rnd.sample(keys, 3):
                for f in fakes:
                    f.rule(k, rnd.choice(damage))
            for f in fakes:
                f.trickle = rnd.random() < 0.1
            try:
                r = rnd.random()
                if r < 0.3:
                    seq += 1
                    k = rnd.choice(keys)
                    mc.set(k, "%s=%d" % (k, seq))
                elif r < 0.5:
                    seq += 1
                    mc.set_multi({k: "%s=%d" % (k, seq) for k in rnd.sample(keys, 6)})
                elif r < 0.75:
                    k = rnd.choice(keys)
                    v = mc.get(k)
                    assert v is None or v.startswith(k + "="), (k, v)
                else:
                    for k, v in mc.get_multi(rnd.sample(keys, 8)).items():
                        assert v.startswith(k + "="), (k, v)
            except fastmc.Error:
                errors += 1
        assert errors > 20  # the faults did happen
        for f in fakes:
            f.rules.clear()
            f.trickle = False
        final = {k: "%s=final" % k for k in keys}
        assert mc.set_multi(final) == []
        assert mc.get_multi(keys) == final
    finally:
        for f in fakes:
            f.close()
