"""Single-key `noreply` writes are not waited for (as with pylibmc), yet whatever the server may
answer to them is never taken for another request's reply: the next request on that connection
starts with a marker that reads it first. Real memcached behind a recording relay, and an
in-process fake that answers failing noreply commands anyway."""

import fastmc
import pytest
from fakes import MiniMemcached
from memcached import Memcached


def test_single_noreply_writes_are_not_waited_for(relayed):
    _, relay = relayed
    mc = fastmc.Client([relay.address])
    assert mc.get("warm") is None
    relay.take()
    for i in range(200):
        assert mc.set("k%d" % i, i, noreply=True) is True
    assert mc.delete("k0", noreply=True) is True
    assert mc.touch("k1", 100, noreply=True) is True
    sent = relay.take_until(lambda b: b.count(b" noreply\r\n") >= 202)
    assert sent.count(b" noreply\r\n") == 202
    assert b"version" not in sent  # nothing waited for
    # the next request first confirms that the server processed all of them
    assert mc.get("k199") == 199
    assert relay.take() == b"version\r\nget k199\r\n"
    assert mc.get_multi(["k0", "k1", "k2"]) == {"k1": 1, "k2": 2}
    assert relay.take() == b"get k0 k1 k2\r\n"  # synced: no marker any more


def test_unsynced_writes_are_bounded(relayed):
    _, relay = relayed
    mc = fastmc.Client([relay.address])
    n = 2 * 65_536 + 10
    for i in range(n):
        mc.set("b%d" % i, i, noreply=True)
    sent = relay.take_until(lambda b: b.count(b" noreply\r\n") >= n)
    # every 65,536 unwaited writes, one waits for the server to catch up
    assert sent.count(b"version\r\n") == 2
    want = {"b0": 0, "b70000": 70000, "b%d" % (n - 1): n - 1}
    assert mc.get_multi(list(want)) == want


def test_answers_to_noreply_writes_are_never_taken_for_another_reply():
    """The fake answers a failing noreply set with a SERVER_ERROR line anyway. That line is read
    by the next request's marker and dropped; each request gets its own reply, and the connection
    with the pending line stays in the pool (no reconnect)."""
    fake = MiniMemcached(server_error_keys={b"bad"}, loud_errors=True)
    try:
        mc = fastmc.Client([fake.address])
        assert mc.set("good", "g")
        for _ in range(20):
            assert mc.set("bad", 1, noreply=True) is True  # the user asked not to know
            assert mc.get("good") == "g"
            assert mc.set("bad", 1, noreply=True) is True
            assert mc.set("good2", "g2")  # a write: the pooled connection is peeked first
            assert mc.get_multi(["good", "good2", "bad"]) == {"good": "g", "good2": "g2"}
            assert mc.set("bad", 1, noreply=True) is True
            with pytest.raises(fastmc.ServerError):
                mc.set("bad", 2)  # acknowledged: its own error, not the noreply one's
            assert mc.delete("good2") is True
        assert len(fake.conns) == 1
    finally:
        fake.close()


def test_noreply_write_to_a_dead_server_fails_fast():
    dead = Memcached()
    address = dead.address
    dead.stop()
    mc = fastmc.Client([address])
    with pytest.raises(fastmc.ConnectionError):
        mc.set("k", 1, noreply=True)
    with pytest.raises(fastmc.ServerDown):
        mc.set("k", 1, noreply=True)


def test_noreply_writes_then_reads_stay_in_sync(mcd):
    mc = fastmc.Client([mcd.address])
    assert mc.set_multi({"n%d" % i: i for i in range(5000)}, noreply=True) == []
    assert mc.set("one", 1, noreply=True)
    assert mc.get("one") == 1
    assert mc.get_multi(["n1", "n4999"]) == {"n1": 1, "n4999": 4999}
    assert mc.delete("one", noreply=True)
    assert mc.get("one") is None


def test_a_run_of_noreply_writes_reaches_the_server_without_a_later_request(mcd):
    """Within a run, the kernel may gather noreply writes (Nagle's algorithm, as pylibmc's
    default has it); nothing is held until a later request: another client sees them all soon
    after the writer stops, and the writer's own next request sees them at once."""
    import time

    writer, reader = fastmc.Client([mcd.address]), fastmc.Client([mcd.address])
    assert writer.get("warm") is None  # an answered request: the connection is in use
    keys = ["run%d" % i for i in range(500)]
    for k in keys:
        writer.set(k, k, noreply=True)
    deadline = time.monotonic() + 2.0
    while len(reader.get_multi(keys)) < len(keys) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert reader.get_multi(keys) == {k: k for k in keys}
    for k in keys:
        writer.delete(k, noreply=True)
    assert writer.get_multi(keys) == {}  # pushed out by the request itself


def test_behavior_changes_keep_the_connection_and_the_order_of_writes(mcd):
    """A connection that carries noreply writes the server has not run yet is not closed by a
    behavior change: on a new connection (served by another memcached thread) later writes could
    run before them. Only a change of socket options opens a new connection."""
    mc = fastmc.Client([mcd.address], behaviors={"_noreply": True})
    mc.set("warm", 1)

    def opened():
        # The client's own count: the server's total_connections also counts the fixture's
        # readiness probe, which memcached's worker may take in late.
        return mc.metrics()[mcd.address]["connections_opened"]

    before = opened()
    assert before == 1
    for i in range(200):
        mc.set("k", i)
        mc.behaviors = {"verify_keys": i % 2, "cas": i % 3 == 0}
        mc.delete("k")
        mc.behaviors = {"_noreply": True, "hash": "crc" if i % 2 else "md5"}
        assert mc.get("k") is None
    assert opened() == before
    mc.behaviors = {"tcp_keepalive": True}
    mc.set("k", 1)
    assert opened() == before + 1


def test_single_noreply_writes_are_counted_like_any_other(mcd):
    """A single noreply write takes a shorter path than a batch (one send, no plan): its
    metrics are the same as a batch of one's. noreply writes are counted but not timed."""
    mc = fastmc.Client([mcd.address], behaviors={"_noreply": True})
    for i in range(50):
        mc.set("m%d" % i, i)
    for i in range(20):
        mc.delete("m%d" % i)
    for i in range(20, 30):
        mc.touch("m%d" % i, 100)
    m = mc.metrics()[mcd.address]
    assert m["requests"]["store"] == 50 and m["keys"]["store"] == 50
    assert m["stored"] == 50
    assert m["requests"]["delete"] == 20 and m["requests"]["touch"] == 10
    # counted, not timed: nobody waits for a noreply write's answer (docs/operations.md)
    assert m["latency"]["store"]["count"] == 0 and m["latency"]["delete"]["count"] == 0
    assert m["bytes_sent"] == sum(
        len(b"set m%d 0 0 %d noreply\r\n%d\r\n" % (i, len(str(i)), i)) for i in range(50)
    ) + sum(len(b"delete m%d noreply\r\n" % i) for i in range(20)) + sum(
        len(b"touch m%d 100 noreply\r\n" % i) for i in range(20, 30)
    )
    assert mc.get_multi(["m0", "m19", "m20", "m49"]) == {"m20": 20, "m49": 49}
    assert mc.set_multi({"t%d" % i: i for i in range(10)}) == []  # a batch: not timed either
    mc.behaviors = {"_noreply": False}
    assert mc.get("m0") is None and mc.delete("m49") is True
    m = mc.metrics()[mcd.address]
    assert m["latency"]["store"]["count"] == 0 and m["latency"]["delete"]["count"] == 1
    assert m["latency"]["get"]["count"] == 2 and m["keys"]["store"] == 60


def test_a_noreply_write_the_socket_does_not_take_whole_is_finished(mcd):
    """A value larger than the socket's send buffer: the first send takes part of it and the
    rest goes out as a batch's would, then the next request reads the right reply."""
    mc = fastmc.Client([mcd.address], behaviors={"_socket_send_size": 4096})
    big = b"x" * 1_000_000
    for i in range(5):
        assert mc.set("big%d" % i, big, noreply=True) is True
        assert mc.set("small%d" % i, i, noreply=True) is True
    assert mc.get_multi(["big%d" % i for i in range(5)]) == {"big%d" % i: big for i in range(5)}
    assert mc.get("small4") == 4


def test_a_noreply_write_that_must_wait_lets_other_threads_run(mcd):
    """A single noreply write keeps the interpreter only for what cannot block (one
    non-blocking send on an idle connection): when the server stops reading and the socket
    fills, the write waits with the interpreter released, and goes on when the server does."""
    import os
    import signal
    import threading
    import time

    from memcached import sigstop

    mc = fastmc.Client(
        [mcd.address], behaviors={"_socket_send_size": 4096, "send_timeout": 5_000_000}
    )
    assert mc.get("warm") is None
    sigstop(mcd.proc.pid)
    outcome: list = []

    def writer() -> None:
        try:
            for i in range(20_000):
                mc.set("w%d" % i, b"v" * 1000, noreply=True)
            outcome.append("all sent")
        except fastmc.Error as e:
            outcome.append(e)

    t = threading.Thread(target=writer)
    t.start()
    ticks, deadline = 0, time.monotonic() + 0.8
    while time.monotonic() < deadline:
        ticks += 1
        time.sleep(0.001)
    waiting = t.is_alive() and not outcome  # 20 MB cannot fit in the sockets' buffers
    os.kill(mcd.proc.pid, signal.SIGCONT)
    t.join(10)
    assert waiting and ticks > 100  # this thread ran while the writer waited on the socket
    assert outcome == ["all sent"]
    assert mc.get_multi(["w0", "w19999"]) == {"w0": b"v" * 1000, "w19999": b"v" * 1000}


def test_single_noreply_writes_check_keys_and_apply_the_prefix(mcd):
    mc = fastmc.Client([mcd.address], behaviors={"_noreply": True})
    with pytest.raises(fastmc.BadKeyProvided):
        mc.set("a b", 1)
    with pytest.raises(ValueError):
        mc.delete("k" * 251)
    ns = fastmc.Client([mcd.address], behaviors={"_noreply": True, "namespace": b"ns:"})
    plain = fastmc.Client([mcd.address])
    ns.set("k", 7)
    assert ns.get("k") == 7  # (its marker: the server has run the write)
    assert plain.get("ns:k") == 7
    ns.delete("k")
    assert ns.get("k") is None
    assert plain.get("ns:k") is None
