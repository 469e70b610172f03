"""The fault suite: what fastmc guarantees when servers die, restart, stall or answer garbage.

Real memcached processes are killed, restarted and SIGSTOPped; the scriptable fake server
(tests/fakeserver.py) produces the faults a real one cannot. Each known failure of another client
(shared landscape, sections 5 and 6) is named in the docstring of the test that covers it.
"""

import gc
import os
import signal
import threading
import time

import pytest

import fastmc
from fakeserver import FakeMemcached, stalled_listener
from memcached_proc import Memcached, free_port, sigstop
from testkit import in_forked_child, run_threads

# No fail-fast window: every call after a fault really talks to the server again.
AGAIN = {"retry_timeout": -1, "_poll_timeout": 400}


@pytest.fixture
def fake():
    f = FakeMemcached()
    yield f
    f.close()


@pytest.fixture
def mcd():
    p = Memcached()
    yield p
    p.stop()


def total_connections(mc, i=0):
    return int(mc.get_stats()[i][1]["total_connections"])


# -- replies that are slow, broken or not the protocol ---------------------------------------


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
    """A reply that hangs, is cut, is longer or shorter than announced, is not the protocol,
    names another key or comes with extra bytes never returns a value (or a miss): it raises,
    the connection is dropped, and the next call gets its own value. (Landscape 5d:
    meta-memcache PR #30 saw replies for the wrong key under gevent; 5h pylibmc #71 aborted
    when the server went away mid-reply.)"""
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


def test_timed_out_connection_is_closed_never_pooled(fake):
    """Landscape 6.1 (Rust `memcache` classic: a timed-out connection went back to the r2d2
    pool; libmemcached-awesome 1.1.0-1.1.3 kept a timed-out connection, which gave
    php-memcached #531 other keys' values at poll timeouts under 500 ms): the client closes it
    and the next call opens a new one."""
    mc = fastmc.Client([fake.address], behaviors={"retry_timeout": -1, "receive_timeout": 200_000})
    assert mc.set("k", "v")
    fake.rule("k", "hang")
    with pytest.raises(fastmc.Error, match="TIMEOUT"):
        mc.get("k")
    deadline = time.monotonic() + 2
    while fake.closed_by_client < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.closed_by_client == 1
    fake.rule("k", None)
    assert mc.get("k") == "v"
    assert fake.accepted == 2


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
    """Landscape 6.5 (pymemcache closes the connection on SERVER_ERROR; pylibmc aborts the rest of
    a set_multi) and 9(c)4: an error line fails its key only, the batch goes on, the stream stays
    in sync and the same connection is used afterwards."""
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
    """Landscape 6.5 with real memcached: `object too large` fails the key, the server unlinks the
    old value (the key is gone, not stale), CLIENT_ERROR on incr of a non-number (5f: Django
    expects ClientError) fails the key, and the connection is kept."""
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


def test_noreply_failures_are_not_hidden(mcd, fake):
    """Landscape 6.7 (pymemcache `default_noreply=True`, memcache-async always noreply hide
    failures) and 6.3 (a noreply error nobody reads): replies are on by default, so a failure is
    reported; with noreply the batch still ends with a round trip, so an error line the server
    sends anyway is read and reported, and the stream stays in sync."""
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
    with pytest.raises(fastmc.ServerError, match="1 of 2 noreply commands failed") as ei:
        mf.set_multi({"good": 1, "bad": 2}, noreply=True)
    # which of the two failed is unknowable with noreply: both are reported
    assert sorted(ei.value.failed_keys) == ["bad", "good"]
    assert mf.get("good") == 1 and fake.accepted == 1


def test_corrupt_values_raise_and_keep_the_connection(fake):
    """Landscape 5h (pylibmc #68 bad decref on unpickle failure, #206 memory corruption in zlib
    inflate): a value the client cannot decode raises a Python exception, and the next call on
    the same connection is fine."""
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
    """Landscape 6.7 (libmc uses other flag bits, mixing clients corrupts types): values written
    by another pylibmc-compatible client with flags int=2, long=4, text=16, raw=0 read back as
    pylibmc reads them."""
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


# -- timeouts ---------------------------------------------------------------------------------


def within_10_percent(elapsed, expect):
    # 10% of the timeout, plus scheduling slack for a loaded 2-core CI machine
    return expect * 0.9 <= elapsed <= expect * 1.1 + 0.05


@pytest.mark.parametrize(
    "behaviors, expect",
    [({"receive_timeout": 500_000}, 0.5), ({"_poll_timeout": 600}, 0.6)],
)
def test_receive_timeout_is_honoured_and_never_a_miss(fake, behaviors, expect):
    """Landscape 5c/6.7 (libmemcached reported a timeout as NOT FOUND until 1.1.1, #67;
    php-memcached #9): a stalled server gives an error after the timeout, never None."""
    mc = fastmc.Client([fake.address], behaviors=dict(behaviors, retry_timeout=-1))
    assert mc.set("k", "v")
    fake.rule("k", "hang")
    for call in (lambda: mc.get("k"), lambda: mc.get_multi(["k"]), lambda: mc.incr("k")):
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error) as ei:
            call()
        assert within_10_percent(time.monotonic() - t0, expect)
        assert not isinstance(ei.value, fastmc.NotFound)


def test_send_timeout_is_honoured():
    """A server that stops reading: the write blocks once the socket buffers are full, and the
    call fails after send_timeout without progress. (The fake's receive buffer is small: with a
    large one, the kernel still takes a last few bytes some 40 ms later, on a delayed ACK, and the
    timeout counts from that progress.)"""
    with FakeMemcached(read=False, rcvbuf=4096) as f:
        mc = fastmc.Client(
            [f.address],
            behaviors={"send_timeout": 500_000, "_socket_send_size": 65536, "retry_timeout": -1},
        )
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error, match="TIMEOUT"):
            mc.set("big", b"x" * (1024 * 1024))
        assert within_10_percent(time.monotonic() - t0, 0.5)


def test_timeouts_in_the_multi_server_poll_loop_are_honoured():
    """The same timeouts when several servers are driven at once by the poll loop: a hanging
    server fails after receive_timeout while the healthy one's keys come back; two servers that
    stop reading fail a batch after send_timeout."""
    with FakeMemcached() as ok, FakeMemcached() as hang:
        beh = {"receive_timeout": 500_000, "retry_timeout": -1}
        mc = fastmc.Client([ok.address, hang.address], behaviors=beh)
        keys = ["pl%d" % i for i in range(20)]
        assert mc.set_multi({k: k for k in keys}) == []
        for k in keys:
            hang.rule(k, "hang")
        t0 = time.monotonic()
        got = mc.get_multi(keys)
        assert within_10_percent(time.monotonic() - t0, 0.5)
        assert got == {k: k for k in keys if mc.hash(k) == 0} and got
    with FakeMemcached(read=False, rcvbuf=4096) as a, FakeMemcached(read=False, rcvbuf=4096) as b:
        beh = {"send_timeout": 500_000, "_socket_send_size": 65536, "retry_timeout": -1}
        mc = fastmc.Client([a.address, b.address], behaviors=beh)
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error) as ei:
            mc.set_multi({"big%d" % i: b"x" * (1024 * 1024) for i in range(4)})
        assert within_10_percent(time.monotonic() - t0, 0.5)
        assert sorted(ei.value.failed_keys) == ["big%d" % i for i in range(4)]


@pytest.mark.parametrize("behaviors", [{"receive_timeout": 500_000}, {"_poll_timeout": 500}])
def test_periodic_signals_do_not_stretch_timeouts(fake, behaviors):
    """A signal every 20 ms (an interval timer, a signal-based sampling profiler) interrupts the
    blocking read again and again: the timeout still counts from the last byte received, and a
    reply that trickles in while signals arrive is still read right. (Before the fix, each
    interruption restarted the socket's timeout, so the call never timed out.)"""
    old = signal.signal(signal.SIGALRM, lambda *a: None)
    guard = threading.Timer(5, lambda: signal.setitimer(signal.ITIMER_REAL, 0))
    guard.start()
    try:
        mc = fastmc.Client([fake.address], behaviors=dict(behaviors, retry_timeout=-1))
        assert mc.set("k", "v") and mc.set("n", 1)
        fake.rule("k", "hang")
        fake.rule("n", "hang")
        signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
        for call in (lambda: mc.get("k"), lambda: mc.incr("n")):
            t0 = time.monotonic()
            with pytest.raises(fastmc.Error):
                call()
            assert within_10_percent(time.monotonic() - t0, 0.5)
        with FakeMemcached(trickle=True) as slow:
            ms = fastmc.Client([slow.address], behaviors=dict(behaviors, retry_timeout=-1))
            assert ms.set("t", "x" * 200) and ms.get("t") == "x" * 200
            assert ms.get_multi(["t", "u"]) == {"t": "x" * 200}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        guard.cancel()
        signal.signal(signal.SIGALRM, old)


def test_connect_timeout_is_honoured():
    """Landscape 5c (pylibmc #89: connect_timeout not honoured, hangs for over a minute): a
    loopback listener with a full accept queue never completes the handshake."""
    addr, socks = stalled_listener()
    try:
        mc = fastmc.Client([addr], behaviors={"connect_timeout": 500, "retry_timeout": -1})
        for _ in range(2):
            t0 = time.monotonic()
            with pytest.raises(fastmc.ConnectionError):
                mc.get("k")
            assert within_10_percent(time.monotonic() - t0, 0.5)
    finally:
        for s in socks:
            s.close()


def test_stalled_server_fails_only_its_keys_in_a_batch():
    """Landscape 9(c)3 and 5h (pylibmc #301: connection errors masked as a shorter get_multi):
    one of three servers is SIGSTOPped mid-life. In one batch the healthy servers' keys succeed
    with their own values, the stalled server's keys fail (and are reported as failed keys), and
    nothing is attributed to the wrong key."""
    procs = [Memcached() for _ in range(3)]
    try:
        beh = {"receive_timeout": 300_000, "retry_timeout": -1}
        mc = fastmc.Client([p.address for p in procs], behaviors=beh)
        keys = ["mk%d" % i for i in range(300)]
        assert mc.set_multi({k: "value-of-" + k for k in keys}) == []
        stalled = {k for k in keys if mc.hash(k) == 1}
        assert stalled and len(stalled) < len(keys)
        sigstop(procs[1].proc.pid)
        try:
            t0 = time.monotonic()
            got = mc.get_multi(keys)
            assert time.monotonic() - t0 < 0.3 * 1.1 + 0.1
            assert got == {k: "value-of-" + k for k in keys if k not in stalled}
            with pytest.raises(fastmc.Error) as ei:
                mc.set_multi({k: "new-" + k for k in keys})
            assert set(ei.value.failed_keys) == stalled
            strict = fastmc.Client(
                [p.address for p in procs], behaviors=dict(beh, get_multi_raise_on_error=True)
            )
            with pytest.raises(fastmc.Error, match="TIMEOUT"):
                strict.get_multi(keys)
        finally:
            os.kill(procs[1].proc.pid, signal.SIGCONT)
        # The stalled server may still apply the writes it had received (a timed-out write is
        # "unknown", never "not done"): give it time to work through its backlog. The late
        # replies went to dropped connections, so everything reads back right.
        time.sleep(0.5)
        got = mc.get_multi(keys)
        assert set(got) == set(keys)
        for k in keys:
            assert got[k] == "new-" + k or (k in stalled and got[k] == "value-of-" + k)
            assert mc.get(k) == got[k]
    finally:
        for p in procs:
            p.stop()


def test_server_hanging_mid_batch_fails_only_its_keys(mcd):
    """A fake server sends some values, then hangs in the middle of one: the real server's keys
    and the values that arrived whole are right; the cut value is never returned."""
    with FakeMemcached() as f:
        mc = fastmc.Client([mcd.address, f.address], behaviors=AGAIN)
        keys = ["hb%d" % i for i in range(60)]
        assert mc.set_multi({k: "v-" + k for k in keys}) == []
        on_fake = [k for k in keys if mc.hash(k) == 1]
        assert len(on_fake) >= 3
        cut = on_fake[len(on_fake) // 2]
        f.rule(cut, "hang_mid")
        got = mc.get_multi(keys)
        assert cut not in got
        assert all(got[k] == "v-" + k for k in got)
        assert {k for k in keys if k not in on_fake} <= set(got)
        f.rule(cut, None)
        assert mc.get_multi(keys) == {k: "v-" + k for k in keys}


# -- dead servers -----------------------------------------------------------------------------


def test_dead_server_fails_fast_instead_of_paying_the_connect_timeout():
    """Landscape 6.6 (every request paying a connect timeout; memjs 90 s responses): within
    retry_timeout the server is skipped at once with ServerDown."""
    addr, socks = stalled_listener()
    try:
        mc = fastmc.Client([addr], behaviors={"connect_timeout": 400, "retry_timeout": 2})
        t0 = time.monotonic()
        with pytest.raises(fastmc.ConnectionError):
            mc.get("k")
        assert time.monotonic() - t0 >= 0.35
        for call in (lambda: mc.get("k"), lambda: mc.set("k", 1), lambda: mc.get_multi(["a", "b"])):
            t0 = time.monotonic()
            with pytest.raises(fastmc.ServerDown):
                call()
            assert time.monotonic() - t0 < 0.1
    finally:
        for s in socks:
            s.close()


def test_failure_limit_marks_the_server_dead_and_it_rejoins_after_dead_timeout():
    """server_failure_limit: after `failure_limit` failures (one per retry window) the server is
    dead (ServerDead, fail fast) for dead_timeout; then it is tried again and rejoins."""
    port = free_port()
    beh = {"auto_eject": True, "failure_limit": 2, "retry_timeout": 1, "dead_timeout": 2}
    mc = fastmc.Client(["127.0.0.1:%d" % port], behaviors=beh)
    with pytest.raises(fastmc.ConnectionError):
        mc.get("k")  # failure 1
    with pytest.raises(fastmc.ServerDown):
        mc.get("k")  # in the retry window: not counted
    time.sleep(1.05)
    with pytest.raises(fastmc.ConnectionError):
        mc.get("k")  # failure 2: dead now
    t_dead = time.monotonic()
    proc = Memcached.__new__(Memcached)
    proc.host, proc.port, proc.extra = "127.0.0.1", port, ()
    proc.start()  # the server is back, but the client does not look before dead_timeout
    try:
        while time.monotonic() - t_dead < 1.5:
            with pytest.raises(fastmc.ServerDead):
                mc.set("k", 1)
            time.sleep(0.1)
        time.sleep(max(0.0, 2.05 - (time.monotonic() - t_dead)))
        assert mc.set("k", "back")
        assert mc.get("k") == "back"
    finally:
        proc.stop()


def test_ketama_eject_moves_only_dead_keys_and_rejoin_restores_the_ring():
    """remove_failed with a consistent ring, as libmemcached does it (distribution.md s.9): only
    the dead server's keys move; after dead_timeout the restarted server is back in the ring and
    every key maps where it did before. Every operation during the outage succeeds once the
    server is ejected (landscape 6.6, reconnect storms)."""
    procs = [Memcached() for _ in range(3)]
    try:
        beh = {"ketama": True, "remove_failed": 1, "retry_timeout": 1, "dead_timeout": 1}
        mc = fastmc.Client([p.address for p in procs], behaviors=beh)
        keys = ["rj%d" % i for i in range(300)]
        before = {k: mc.hash(k) for k in keys}
        victims = {k for k in keys if before[k] == 1}
        procs[1].stop()
        with pytest.raises(fastmc.Error):
            mc.set_multi({k: k for k in keys})
        moved = {k for k in keys if mc.hash(k) != before[k]}
        assert moved == victims
        for _ in range(3):
            assert mc.set_multi({k: "during-" + k for k in keys}) == []
        procs[1].start()
        time.sleep(1.1)
        assert mc.set_multi({k: "after-" + k for k in keys}) == []
        assert {k: mc.hash(k) for k in keys} == before
        assert mc.get_multi(keys) == {k: "after-" + k for k in keys}
        direct = fastmc.Client([procs[1].address])
        assert direct.get_multi(sorted(victims)) == {k: "after-" + k for k in victims}
    finally:
        for p in procs:
            p.stop()


def test_no_server_at_all_raises_everywhere():
    """Landscape 5h (pylibmc #30 segfaults without a server, #301 errors masked as an empty
    get_multi): every operation raises a pylibmc-class error."""
    addrs = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()]
    mc = fastmc.Client(addrs, behaviors=dict(AGAIN, cas=True))
    calls = [
        lambda: mc.get("a"),
        lambda: mc.get_multi(["a", "b", "c", "d"]),
        lambda: mc.set("a", 1),
        lambda: mc.set_multi({"a": 1, "b": 2}),
        lambda: mc.incr("a"),
        lambda: mc.delete("a"),
        lambda: mc.touch("a", 1),
        lambda: mc.gets("a"),
    ]
    for call in calls:
        with pytest.raises(fastmc.Error):
            call()


# -- restarts ---------------------------------------------------------------------------------


def _pool_of(fake, mc, n):
    """Make the client hold `n` pooled connections: n threads call at once on a slow fake."""
    fake.delay = 0.15
    assert run_threads(lambda i: mc.set("p%d" % i, i), n) == []
    assert fake.accepted == n


def test_restart_is_invisible_on_every_pooled_connection_reads(fake):
    """Landscape 5c/6.6 (pymemcache #307, Weasyl #1569: the first request after a restart fails
    on each pooled connection): n pooled connections are all closed by the server; n threads
    each take one of them at once and read: nobody sees an error."""
    mc = fastmc.Client([fake.address], behaviors={"retry_timeout": 2})
    _pool_of(fake, mc, 4)
    fake.drop_connections(forget=False)
    time.sleep(0.05)
    got = {}
    assert run_threads(lambda i: got.__setitem__(i, mc.get("p%d" % i)), 4) == []
    assert got == {i: i for i in range(4)}
    assert fake.accepted == 8  # every stale connection was replaced


@pytest.mark.parametrize("op", ["set", "incr", "add", "append", "delete", "touch"])
def test_restart_is_invisible_on_every_pooled_connection_writes(fake, op):
    """The same for writes: stale pooled connections are detected before anything is sent, so
    each write is sent exactly once, on a new connection."""
    mc = fastmc.Client([fake.address], behaviors={"retry_timeout": 2})
    _pool_of(fake, mc, 4)
    for i in range(4):
        fake.put("w%d" % i, b"10")
    fake.drop_connections(forget=False)
    time.sleep(0.05)
    seen = len(fake.commands)
    calls = {
        "set": lambda i: mc.set("w%d" % i, "new"),
        "incr": lambda i: mc.incr("w%d" % i, 5),
        "add": lambda i: mc.add("a%d" % i, 1),
        "append": lambda i: mc.append("w%d" % i, "1"),
        "delete": lambda i: mc.delete("w%d" % i),
        "touch": lambda i: mc.touch("w%d" % i, 100),
    }
    results = {}
    assert run_threads(lambda i: results.__setitem__(i, calls[op](i)), 4) == []
    assert results == {i: (15 if op == "incr" else True) for i in range(4)}
    wire = {"set": b"set", "incr": b"incr", "add": b"add", "append": b"append",
            "delete": b"delete", "touch": b"touch"}[op]
    assert fake.command_names()[seen:].count(wire) == 4
    assert fake.accepted == 8


@pytest.mark.parametrize("op", ["set", "delete", "set_multi"])
def test_close_after_an_error_line_is_invisible_to_the_next_write(fake, op):
    """A server or proxy that answers an error line and closes the connection at once (twemproxy
    does after a backend failure): the next write, sent right away, still goes out exactly once
    on a new connection, because a connection whose last answer was an error line is always
    checked before a write."""
    mc = fastmc.Client([fake.address])
    assert mc.set("good", "old")
    fake.rule("bad", "line_close:SERVER_ERROR backend down")
    with pytest.raises(fastmc.Error):
        mc.set("bad", "x")
    assert fake.accepted == 1
    if op == "set":
        assert mc.set("good", "new") is True
    elif op == "delete":
        assert mc.delete("good") is True
    else:
        assert mc.set_multi({"good": "new", "more": 1}) == []
    assert fake.accepted == 2
    assert (b"good" in fake.data) == (op != "delete")
    assert fake.command_names().count(b"delete" if op == "delete" else b"set") == (
        1 if op == "delete" else 3 + (op == "set_multi"))


def test_write_right_after_an_answer_on_a_connection_closed_since_lands_once_or_raises(fake):
    """Within a millisecond of a successful answer a pooled connection is not peeked at before a
    write (a system call that tight loops of writes save). If the server closed it in that
    moment, the write raises and is not replayed; if the peek did run, it goes out on a new
    connection. Either way it is applied at most once and never reported done when it was not."""
    mc = fastmc.Client([fake.address])
    assert mc.set("w", "old")
    fake.drop_connections(forget=False)
    seen = len(fake.commands)
    try:
        done = mc.set("w", "new")
    except fastmc.Error:
        done = False
    sets = fake.command_names()[seen:].count(b"set")
    assert fake.data[b"w"][1] == (b"new" if done else b"old")
    assert sets == (1 if done else 0)


def test_noreply_writes_after_an_idle_close_go_out_on_a_new_connection(fake):
    """A `noreply` write gets no answer to prove the connection alive, so the peek before it
    is what keeps it from vanishing into a connection the server closed while idle."""
    mc = fastmc.Client([fake.address])
    assert mc.set("a", "1")
    fake.drop_connections(forget=False)
    time.sleep(0.05)
    mc.set("b", "2", noreply=True)
    mc.set("c", "3", noreply=True)
    mc.delete("a", noreply=True)
    assert mc.get_multi(["a", "b", "c"]) == {"b": "2", "c": "3"}
    assert fake.accepted == 2


def test_restart_of_several_servers_is_invisible_to_batches():
    """Both servers of a batch restart: get_multi and set_multi drive the stale pooled
    connections in the poll loop, replace them, and each write is sent exactly once."""
    fakes = [FakeMemcached(), FakeMemcached()]
    try:
        mc = fastmc.Client([f.address for f in fakes])
        keys = ["rb%d" % i for i in range(40)]
        assert mc.set_multi({k: k for k in keys}) == []
        for f in fakes:
            f.drop_connections(forget=False)
        time.sleep(0.05)
        assert mc.get_multi(keys) == {k: k for k in keys}
        for f in fakes:
            f.drop_connections(forget=False)
        time.sleep(0.05)
        seen = [len(f.commands) for f in fakes]
        assert mc.set_multi({k: k + "2" for k in keys}) == []
        sent = [f.command_names()[n:].count(b"set") for f, n in zip(fakes, seen)]
        assert sum(sent) == len(keys)
        assert mc.get_multi(keys) == {k: k + "2" for k in keys}
        assert [f.accepted for f in fakes] == [3, 3]
    finally:
        for f in fakes:
            f.close()


@pytest.mark.parametrize("op", ["incr", "append", "add", "set", "delete"])
def test_write_that_may_have_been_applied_is_not_replayed(fake, op):
    """The nothing-sent rule: the server takes the command, executes it and closes without
    answering (a crash after applying). The write may have been applied, so it is NOT sent again
    on a new connection: the caller gets an error and the server saw the command once."""
    mc = fastmc.Client([fake.address], behaviors=AGAIN)
    assert mc.set("k", "5")  # now a pooled connection exists
    if op == "add":
        assert mc.delete("k")
    fake.rule("k", "close_after_apply")
    call = {
        "incr": lambda: mc.incr("k"),
        "append": lambda: mc.append("k", "0"),
        "add": lambda: mc.add("k", "1"),
        "set": lambda: mc.set("k", "7"),
        "delete": lambda: mc.delete("k"),
    }[op]
    with pytest.raises(fastmc.Error):
        call()
    assert fake.command_names().count(op.encode()) == (2 if op == "set" else 1)
    fake.rule("k", None)
    expect = {"incr": "6", "append": "50", "add": "1", "set": "7", "delete": None}[op]
    assert mc.get("k") == expect


def test_real_restart_is_invisible_for_threads_reading_and_writing(mcd):
    """Landscape 5c with a real memcached killed and restarted: threads that had pooled
    connections keep reading and writing without an error."""
    mc = fastmc.Client([mcd.address])
    assert run_threads(lambda i: [mc.set("t%d" % i, j) for j in range(100)], 6) == []
    for _ in range(2):
        mcd.restart()
        time.sleep(0.05)

        def work(i):
            assert mc.get("t%d" % i) in (None, "x%d" % i)
            assert mc.set("t%d" % i, "x%d" % i)
            assert mc.set("n%d" % i, 1) and mc.incr("n%d" % i) == 2
            assert mc.get("t%d" % i) == "x%d" % i

        assert run_threads(work, 6) == []


# -- interruption and fork --------------------------------------------------------------------


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Interrupted])
@pytest.mark.parametrize("multi", [False, True])
def test_exception_raised_during_a_blocking_call_leaves_no_reply_behind(exc, multi):
    """Landscape 6.1/5d (python-memcached PR #130: Celery's SoftTimeLimitExceeded between write
    and read left the reply for the next task; aiomcache #91: a cancelled request went back to
    the pool with its reply pending; php-memcached #531): a signal handler raises while a call is
    blocked on a slow server; the next call on the same client gets its own value."""
    fakes = [FakeMemcached(), FakeMemcached()]

    def handler(signum, frame):
        raise exc()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        mc = fastmc.Client([f.address for f in fakes] if multi else [fakes[0].address])
        keys = ["s%d" % i for i in range(10)]
        assert mc.set_multi({k: "v-" + k for k in keys}) == []
        for f in fakes:
            f.delay = 0.3
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(exc):
            if multi:
                mc.get_multi(keys[:5])
            else:
                mc.get("s0")
            time.sleep(1)  # the handler runs no later than this
        for f in fakes:
            f.delay = 0
        assert mc.get("s1") == "v-s1"
        assert mc.get_multi(keys) == {k: "v-" + k for k in keys}
        assert all(mc.get(k) == "v-" + k for k in keys)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        for f in fakes:
            f.close()


def test_fork_child_never_shares_a_socket_with_the_parent(fake):
    """Landscape 5d/6.6 (django-cms #5896 preload: one socket shared by workers gives garbled
    replies; python-memcached #166): the child opens its own connection even after
    disconnect_all (which must not send `quit` on the parent's socket), and the parent keeps
    using its own connection, in sync."""
    mc = fastmc.Client([fake.address])
    assert mc.set("f", "parent")
    assert fake.accepted == 1

    def child():
        mc.disconnect_all()
        return mc.get("f") == "parent" and mc.set("f", "child")

    assert in_forked_child(child) == 0
    assert fake.accepted == 2
    parent_conn = fake.commands[0][0]
    assert all(cid != parent_conn for cid, _ in fake.commands[1:])
    assert b"quit" not in fake.command_names()
    assert mc.get("f") == "child"
    assert fake.commands[-1][0] == parent_conn  # still the parent's own connection
    assert fake.accepted == 2


def test_fork_without_python_hooks_never_shares_a_socket(fake):
    """uWSGI forks its workers with a plain C fork() that runs none of Python's at-fork hooks
    (unless py-call-osafterfork is set): with an app preloaded in the master, the worker still
    opens its own connection."""
    import ctypes

    mc = fastmc.Client([fake.address])
    assert mc.set("f", "parent")

    def child():
        return mc.get("f") == "parent" and mc.set("f", "child")

    # PyDLL: the GIL stays held across the fork, as in uWSGI
    assert in_forked_child(child, fork=ctypes.PyDLL(None).fork) == 0
    assert fake.accepted == 2
    parent_conn = fake.commands[0][0]
    assert all(cid != parent_conn for cid, _ in fake.commands[1:])
    assert mc.get("f") == "child"
    assert fake.commands[-1][0] == parent_conn


def test_grandchild_never_uses_its_parents_socket(fake):
    """Landscape 6.6, one generation further: a child that opened its own connection forks
    again, and the grandchild opens a third one instead of using the child's."""
    mc = fastmc.Client([fake.address])
    assert mc.set("f", "parent")

    def child():
        return mc.get("f") == "parent" and in_forked_child(lambda: mc.get("f") == "parent") == 0

    assert in_forked_child(child) == 0
    assert fake.accepted == 3
    conns = [cid for cid, _ in fake.commands]
    assert len(set(conns)) == 3  # parent, child and grandchild each used their own
    assert mc.get("f") == "parent"
    assert fake.commands[-1][0] == conns[0]


def test_child_killed_mid_operation_does_not_affect_the_parent(fake):
    """Landscape 5d (python-memcached #166: wrong values after a forked child is killed
    mid-operation)."""
    mc = fastmc.Client([fake.address])
    assert mc.set("a", "A") and mc.set("b", "B")
    fake.rule("a", "delay:2")
    pid = os.fork()
    if pid == 0:
        try:
            mc.get("a")
        finally:
            os._exit(0)
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    fake.rule("a", None)
    assert mc.get("b") == "B"
    assert mc.get("a") == "A"
    assert mc.get_multi(["a", "b"]) == {"a": "A", "b": "B"}


# -- threads, big batches ---------------------------------------------------------------------


def test_threads_sharing_one_client_never_get_another_keys_value(mcd):
    """Landscape 5b (django-pylibmc-thread-unsafe-example: a cached response returned for another
    key; flask-caching #113; pymemcache #34/#195): 8 threads share one client and every value
    read carries its own key."""
    mc = fastmc.Client([mcd.address])

    def work(t):
        for i in range(200):
            k = "own-%d-%d" % (t, i % 20)
            assert mc.set(k, k)
            assert mc.get(k) == k
            if i % 20 == 0:
                ks = ["own-%d-%d" % (t, j) for j in range(20)]
                assert all(kk == vv for kk, vv in mc.get_multi(ks).items())

    assert run_threads(work, 8) == []


def test_big_pipelines_do_not_deadlock_and_get_lines_stay_short(fake):
    """Landscape 6.6 (python-memcached #24: writing a huge batch without reading deadlocks) and
    6.7 (memcached 1.6.12 answered ERROR to very large multi-gets, memcached #849): a 12 MB
    set_multi goes through one connection, and every get line carries at most 100 keys."""
    mc = fastmc.Client([fake.address])
    data = {"big%d" % i: b"v" * 1000 for i in range(12000)}
    assert mc.set_multi(data) == []
    got = mc.get_multi(list(data))
    assert len(got) == len(data) and all(v == b"v" * 1000 for v in got.values())
    gets = [line for _, line in fake.commands if line.startswith(b"get ")]
    assert gets and max(len(line.split()) - 1 for line in gets) <= 100
    del got, data
    gc.collect()


def test_multi_ops_fan_out_to_every_server_at_once():
    """Landscape 5e (pymemcache #478: HashClient get_many asks servers one after another; #319:
    set_many sent single sets): a batch goes out to every server, on one connection each,
    before any server has answered."""
    fakes = [FakeMemcached() for _ in range(3)]
    try:
        mc = fastmc.Client([f.address for f in fakes])
        keys = ["fan%d" % i for i in range(60)]
        assert mc.set_multi({k: k for k in keys}) == []
        assert [f.accepted for f in fakes] == [1, 1, 1]
        for f in fakes:
            f.delay = 0.3
            f.times.clear()
        assert mc.get_multi(keys) == {k: k for k in keys}
        # every server had its request before the first one could answer (0.3 s)
        firsts = [f.times[0] for f in fakes]
        assert max(firsts) < min(firsts) + 0.3
        assert [f.accepted for f in fakes] == [1, 1, 1]
    finally:
        for f in fakes:
            f.close()


def test_disconnect_all_forgets_failures_as_pylibmc():
    """Landscape 5f (Django called disconnect_all() per request, which reset libmemcached's
    failover state, django #7200): disconnect_all forgets a server's failure, as in pylibmc, so
    the next call tries the server again instead of failing fast."""
    port = free_port()
    mc = fastmc.Client(["127.0.0.1:%d" % port], behaviors={"retry_timeout": 30})
    with pytest.raises(fastmc.ConnectionError):
        mc.get("k")
    with pytest.raises(fastmc.ServerDown):
        mc.get("k")
    mc.disconnect_all()
    with pytest.raises(fastmc.ConnectionError):
        mc.get("k")


def test_rejoined_server_serves_what_it_had_like_libmemcached(mcd):
    """Landscape 6.6 (rehash on failure sends keys elsewhere; when the original server returns it
    still has the old value). fastmc does what libmemcached does, and documents it: a server that
    was unreachable but kept its data serves its old value again after rejoining."""
    old = FakeMemcached()
    port = old.port
    beh = {"ketama": True, "remove_failed": 1, "retry_timeout": 1, "dead_timeout": 1}
    mc = fastmc.Client([mcd.address, old.address], behaviors=beh)
    key = next(k for k in ("st%d" % i for i in range(100)) if mc.hash(k) == 1)
    assert mc.set(key, "old")
    data = dict(old.data)
    old.close()  # unreachable (refused), data kept aside
    with pytest.raises(fastmc.Error):
        mc.set(key, "new")  # fails and ejects the server
    assert mc.hash(key) == 0 and mc.set(key, "new") and mc.get(key) == "new"
    back = FakeMemcached(port=port)
    back.data.update(data)
    try:
        time.sleep(1.1)
        assert mc.hash(key) == 1
        assert mc.get(key) == "old"  # stale, exactly as libmemcached: use TTLs or flush it
    finally:
        back.close()


def test_binary_protocol_round_trips_pickled_values(mcd):
    """Landscape 6.7 (binary protocol with pickled values silently corrupted,
    gusdan/django-elasticache#6): over the binary protocol every value type, pickles of every
    size (compressed or not) included, reads back equal, through single and multi-key calls, and
    a text-mode client reads the same bytes."""
    import datetime

    values = {
        "dict": {"a": [1, 2.5, None], "b": ("t", b"\x00\xff")},
        "obj": datetime.datetime(2026, 12, 3, 8, 0, 0),
        "big": {"k%d" % i: list(range(i % 50)) for i in range(5000)},
        "set": {1, 2, 3},
        "str": "h\u00e9llo",
        "bytes": b"\r\n\x00END\r\n",
        "int": -(2 ** 70),
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


def test_random_faults_never_return_a_wrong_value():
    """Chaos over two fake servers: random keys get random damage (cut, garbage, wrong key,
    extra bytes, too long or short, trickled, error lines, closes before or after applying),
    while a client reads and writes them. Every value returned is one written for that key;
    everything else is a pylibmc-class exception."""
    import random

    rnd = random.Random(4)
    fakes = [FakeMemcached(), FakeMemcached()]
    damage = ["close_mid", "long", "short", "garbage", "wrong_key", "extra",
              "line:SERVER_ERROR out of memory storing object", "line:CLIENT_ERROR nope",
              "close_before_apply", "close_after_apply", "hang_mid", "delay:0.01"]
    try:
        mc = fastmc.Client([f.address for f in fakes],
                           behaviors={"retry_timeout": -1, "receive_timeout": 100_000})
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


def test_restart_over_a_unix_socket_is_invisible(tmp_path):
    """The same restart guarantee over a UNIX socket (the stale-connection probe and the read
    replay do not depend on TCP)."""
    import subprocess

    path = str(tmp_path / "mc.sock")

    def start():
        p = subprocess.Popen(["memcached", "-u", "root", "-s", path, "-m", "16"])
        deadline = time.monotonic() + 5
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        return p

    proc = start()
    try:
        mc = fastmc.Client([path])
        assert run_threads(lambda i: [mc.set("u%d" % i, i) for _ in range(50)], 4) == []
        proc.kill()
        proc.wait()
        os.unlink(path)
        proc = start()
        assert run_threads(lambda i: mc.get("u%d" % i) is None or 1 / 0, 4) == []
        assert run_threads(lambda i: mc.set("u%d" % i, -i) or 1 / 0, 4) == []
        assert mc.get_multi(["u%d" % i for i in range(4)]) == {"u%d" % i: -i for i in range(4)}
    finally:
        proc.kill()
        proc.wait()
