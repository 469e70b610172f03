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
    for i in range(3000):
        mc.set("b%d" % i, i, noreply=True)
    sent = relay.take_until(lambda b: b.count(b" noreply\r\n") >= 3000)
    # every 1,024 unwaited writes, one waits for the server to catch up
    assert sent.count(b"version\r\n") == 2
    assert mc.get_multi(["b0", "b1500", "b2999"]) == {"b0": 0, "b1500": 1500, "b2999": 2999}


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
