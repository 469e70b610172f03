"""Timeouts: receive, send, connect and poll timeouts are honoured (also in the multi-server poll
loop and under a storm of signals), a timed-out call never reads as a miss, and a server that
stalls or hangs mid-batch fails only its own keys."""

import os
import signal
import threading
import time

import fastmc
import pytest
from checks import AGAIN
from fakes import FakeMemcached, ScriptedServer, stalled_listener
from memcached import FAST_FAILURE, Memcached, sigstop


def within_10_percent(elapsed, expect):
    # 10% of the timeout, plus scheduling slack for a loaded 2-core CI machine
    return expect * 0.9 <= elapsed <= expect * 1.1 + 0.05


@pytest.mark.parametrize(
    "behaviors, expect",
    [({"receive_timeout": 500_000}, 0.5), ({"_poll_timeout": 600}, 0.6)],
)
def test_receive_timeout_is_honoured_and_never_a_miss(fake, behaviors, expect):
    """libmemcached reported a timeout as NOT FOUND until 1.1.1 (#67; php-memcached #9), so a
    stalled server looked like a cache miss. Here a stalled server gives an error after the timeout,
    never None."""
    mc = fastmc.Client([fake.address], behaviors=dict(behaviors, retry_timeout=-1))
    assert mc.set("k", "v")
    fake.rule("k", "hang")
    for call in (lambda: mc.get("k"), lambda: mc.get_multi(["k"]), lambda: mc.incr("k")):
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error) as ei:
            call()
        assert within_10_percent(time.monotonic() - t0, expect)
        assert not isinstance(ei.value, fastmc.NotFound)


@pytest.mark.parametrize(
    "behaviors, expect",
    [
        ({"receive_timeout": 200_000}, 0.2),
        ({"_poll_timeout": 300}, 0.3),
        ({"_poll_timeout": 300, "receive_timeout": 100_000}, 0.1),
    ],
)
def test_read_timeouts_are_honoured(behaviors, expect):
    fake = ScriptedServer()  # reads, never answers
    try:
        mc = fastmc.Client([fake.address], behaviors=behaviors)
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error, match="TIMEOUT"):
            mc.get("k")
        elapsed = time.monotonic() - t0
        assert expect * 0.9 <= elapsed <= expect * 1.5 + 0.05
        # on three "servers" at once (same hanging fake): a batch times out as a whole, once
        mc3 = fastmc.Client([fake.address, fake.address + ":1"], behaviors=behaviors)
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error):
            mc3.get_multi(["a", "b", "c", "d"], key_prefix="x")
        assert time.monotonic() - t0 <= expect * 1.5 + 0.1
    finally:
        fake.close()


def test_stopped_server_times_out_and_next_call_gets_its_own_value(mcd):
    mc = fastmc.Client([mcd.address], behaviors=FAST_FAILURE)
    assert mc.set("a", "value-a")
    assert mc.set("b", "value-b")
    sigstop(mcd.proc.pid)
    try:
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error) as ei:
            mc.get("a")
        elapsed = time.monotonic() - t0
        assert "TIMEOUT" in str(ei.value)
        assert 0.25 <= elapsed < 1.5
        # within the retry window the server is skipped, never reported as a miss
        with pytest.raises(fastmc.ServerDown):
            mc.get("b")
    finally:
        os.kill(mcd.proc.pid, signal.SIGCONT)
    time.sleep(1.1)
    # The late reply to get("a") went to a dropped connection: b gets b.
    assert mc.get("b") == "value-b"
    assert mc.get("a") == "value-a"
    assert mc.get_multi(["b", "a"]) == {"a": "value-a", "b": "value-b"}


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
    """pylibmc once ignored connect_timeout and hung for over a minute (pylibmc #89). A loopback
    listener with a full accept queue never completes the handshake: the connect fails after
    connect_timeout, each time."""
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


def test_a_lost_syn_costs_half_the_connect_timeout_not_the_connect():
    """Over a lossy link a SYN (or its answer) may be lost, and Linux sends it again only after
    1 s, longer than most connect timeouts: the connect would fail and a healthy server be
    marked down. The first SYN here is dropped (the listener's accept queue is full); the queue
    frees up 100 ms later. Half-way through the connect timeout a second attempt goes out on a
    new socket and connects."""
    addr, socks = stalled_listener()
    lsock = socks[0]
    stop = threading.Event()

    def serve():
        time.sleep(0.1)
        lsock.settimeout(0.05)
        conns = []
        while not stop.is_set():
            try:
                c, _ = lsock.accept()
            except OSError:
                continue
            conns.append(c)
            c.settimeout(0.05)
            try:
                if c.recv(4096).startswith(b"get "):
                    c.sendall(b"END\r\n")
            except OSError:
                pass
        for c in conns:
            c.close()

    th = threading.Thread(target=serve)
    th.start()
    try:
        mc = fastmc.Client([addr], behaviors={"connect_timeout": 500, "retry_timeout": -1})
        t0 = time.monotonic()
        assert mc.get("k") is None
        elapsed = time.monotonic() - t0
        assert 0.2 <= elapsed < 0.45, elapsed
    finally:
        stop.set()
        th.join()
        for s in socks:
            s.close()


def test_stalled_server_fails_only_its_keys_in_a_batch():
    """pylibmc masked connection errors as a shorter get_multi result (pylibmc #301). Here one of
    three servers is SIGSTOPped mid-life. In one batch the healthy servers' keys succeed with their
    own values, the stalled server's keys fail (and are reported as failed keys), and nothing is
    attributed to the wrong key."""
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
