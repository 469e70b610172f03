"""Lossy links: a request that stalls on its connection (as one lost packet stalls TCP for the
kernel's retransmit timeout) is checked on a fresh connection at half the timeout before the
server is marked down (docs/failures.md#lossy-links). A read stalled before any reply byte is
answered there; a stalled write still raises (its outcome is unknown) but the server answered a
ping, so it stays up. A server that stalls every connection, is SIGSTOPped or refuses connections
is marked down as before, and the behavior ``mark_down_at_once`` restores libmemcached's policy
exactly. The fake's ``hang_once`` rule stalls one reply on one connection, then serves again."""

import asyncio
import os
import signal
import time

import fastmc
import fastmc.aio
import pytest
from fakes import FakeMemcached, Relay, ScriptedServer
from memcached import sigstop

# a mark-down would be seen: the server would be skipped for 30 s
BEH = {"receive_timeout": 400_000, "retry_timeout": 30}


def within_timeout(elapsed, timeout=0.4):
    # the check runs inside the timeout; slack for a loaded 2-core CI machine
    return elapsed <= timeout * 1.1 + 0.05


def transient(mc):
    return sum(m["transient_failures"] for m in mc.metrics().values())


def down_events(mc):
    seen = []
    mc.on("server_down", lambda s, e, d: seen.append(s))
    return seen


@pytest.mark.parametrize("op", ["get", "gets", "get_multi"])
def test_a_read_stalled_once_is_answered_on_a_fresh_connection(fake, op):
    mc = fastmc.Client([fake.address], behaviors=dict(BEH, cas=True))
    assert mc.set("k", "v") and mc.set("j", "w")
    seen = down_events(mc)
    fake.rule("k", "hang_once")
    t0 = time.monotonic()
    if op == "get":
        assert mc.get("k") == "v"
    elif op == "gets":
        assert mc.gets("k")[0] == "v"
    else:
        assert mc.get_multi(["k", "j"]) == {"k": "v", "j": "w"}
    assert within_timeout(time.monotonic() - t0)
    assert transient(mc) == 1
    assert fake.accepted == 2  # the stalled connection and the fresh one
    deadline = time.monotonic() + 2
    while fake.closed_by_client < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.closed_by_client == 1  # the stalled one, which still owed a reply
    # not marked down: the next calls go through, on the fresh connection
    assert mc.get("j") == "w" and mc.set("k", "v2") and mc.get("k") == "v2"
    assert fake.accepted == 2
    assert seen == [] and mc.metrics()[fake.address]["timeouts"] == 0


def test_a_stalled_server_in_a_multi_server_get_multi_leaves_no_key_out(mcd):
    """The measured symptom: get_multi silently left out the keys of a server a lost packet had
    stalled. Here the stalled server's keys come back too, with their own values."""
    with FakeMemcached() as f:
        mc = fastmc.Client([mcd.address, f.address], behaviors=BEH)
        keys = ["lm%d" % i for i in range(60)]
        assert mc.set_multi({k: "v-" + k for k in keys}) == []
        on_fake = [k for k in keys if mc.hash(k) == 1]
        assert on_fake
        f.rule(on_fake[0], "hang_once")
        t0 = time.monotonic()
        assert mc.get_multi(keys) == {k: "v-" + k for k in keys}
        assert within_timeout(time.monotonic() - t0)
        assert mc.metrics()[f.address]["transient_failures"] == 1
        assert mc.get_multi(keys) == {k: "v-" + k for k in keys}


@pytest.mark.parametrize("op", ["set", "incr", "delete"])
def test_a_write_stalled_once_raises_and_the_server_stays_up(fake, op):
    """A write is never sent twice: the stalled one raises a timeout (the server may or may not
    have applied it). But the server answered a ping on a fresh connection, so it is not marked
    down: the next call goes through."""
    mc = fastmc.Client([fake.address], behaviors=BEH)
    assert mc.set("k", 1)
    seen = down_events(mc)
    fake.rule("k", "hang_once")
    before = len(fake.command_names())
    t0 = time.monotonic()
    with pytest.raises(fastmc.Error) as ei:
        {
            "set": lambda: mc.set("k", 2),
            "incr": lambda: mc.incr("k"),
            "delete": lambda: mc.delete("k"),
        }[op]()
    assert within_timeout(time.monotonic() - t0)
    assert type(ei.value) is fastmc.Error  # a timeout (pylibmc has no class of its own)
    # sent once (never twice), and a ping on a fresh connection
    assert fake.command_names()[before:] == [op.encode(), b"version"]
    assert transient(mc) == 1 and mc.metrics()[fake.address]["timeouts"] == 1
    assert mc.get("k") == 1  # the fake did not apply the stalled write; no ServerDown
    assert mc.set("k", 3) and mc.get("k") == 3
    assert seen == []


def test_a_server_that_answers_no_connection_is_still_marked_down():
    """A server that reads and never answers: the fresh connection gets no answer either (the
    get sent again, the ping after a set), so the server is marked down at the timeout, which
    the check does not stretch."""
    silent = ScriptedServer()
    try:
        mc = fastmc.Client([silent.address], behaviors=BEH)
        for call in (lambda: mc.get("k"), lambda: mc.set("k", 1)):
            mc.disconnect_all()  # forget the last failure
            t0 = time.monotonic()
            with pytest.raises(fastmc.Error, match="TIMEOUT"):
                call()
            assert time.monotonic() - t0 >= 0.4 * 0.9 and within_timeout(time.monotonic() - t0)
            t0 = time.monotonic()
            with pytest.raises(fastmc.ServerDown):
                mc.get("other")
            assert time.monotonic() - t0 < 0.1
        assert transient(mc) == 0
    finally:
        silent.close()


@pytest.mark.parametrize("binary", [False, True])
def test_a_stopped_server_is_still_marked_down_after_a_read_or_a_write(mcd, binary):
    """A SIGSTOPped memcached: the kernel still accepts the fresh connection, but nothing answers
    it, so the server is marked down (for a write: the ping got no answer either)."""
    mc = fastmc.Client([mcd.address], binary=binary, behaviors=dict(BEH, retry_timeout=1))
    assert mc.set("a", "value-a")
    seen = down_events(mc)
    for call in (lambda: mc.get("a"), lambda: mc.set("a", "x")):
        mc.disconnect_all()  # forget the last failure
        sigstop(mcd.proc.pid)
        try:
            t0 = time.monotonic()
            with pytest.raises(fastmc.Error) as ei:
                call()
            assert type(ei.value) is fastmc.Error  # a timeout (pylibmc has no class of its own)
            assert within_timeout(time.monotonic() - t0)
            with pytest.raises(fastmc.ServerDown):
                mc.get("a")
        finally:
            os.kill(mcd.proc.pid, signal.SIGCONT)
        time.sleep(1.1)
    assert len(seen) == 2 and transient(mc) == 0
    assert mc.get("a") in ("value-a", "x")


@pytest.mark.parametrize("binary", [False, True])
def test_lost_requests_to_a_real_memcached(mcd, binary):
    """Through a relay that loses one request: a read is answered on a fresh connection, a write
    raises while the ping (binary: a NOOP) is answered, and the server is never marked down."""
    relay = Relay(mcd.port)
    try:
        mc = fastmc.Client([relay.address], binary=binary, behaviors=BEH)
        assert mc.set("r", "1")
        seen = down_events(mc)
        relay.lose = 1
        assert mc.get("r") == "1"
        relay.lose = 1
        with pytest.raises(fastmc.Error) as ei:
            mc.set("r", "2")  # lost: never applied, never sent again
        assert type(ei.value) is fastmc.Error  # a timeout (pylibmc has no class of its own)
        assert mc.get("r") == "1" and mc.set("r", "3") and mc.get("r") == "3"
        assert seen == [] and transient(mc) == 2
    finally:
        relay.close()


def test_mark_down_at_once_keeps_libmemcached_policy(fake):
    """With the behavior on, a read stalled once times out after the full timeout on its one
    connection and marks the server down, exactly as libmemcached (and pylibmc) do."""
    assert "mark_down_at_once" not in fastmc.Client([fake.address]).get_behaviors()
    mc = fastmc.Client([fake.address], behaviors=dict(BEH, mark_down_at_once=True))
    assert mc.get_behaviors()["mark_down_at_once"] == 1
    assert mc.set("k", "v")
    accepted = fake.accepted
    seen = down_events(mc)
    fake.rule("k", "hang_once")
    t0 = time.monotonic()
    with pytest.raises(fastmc.Error, match="TIMEOUT"):
        mc.get("k")
    assert time.monotonic() - t0 >= 0.4 * 0.9 and within_timeout(time.monotonic() - t0)
    with pytest.raises(fastmc.ServerDown):
        mc.get("k")
    assert fake.accepted == accepted and transient(mc) == 0 and seen == [fake.address]
    # switched off again, the same stall is checked
    mc.disconnect_all()
    mc.set_behaviors({"mark_down_at_once": 0})
    fake.rule("k", "hang_once")
    assert mc.get("k") == "v"


def test_the_asyncio_client_gets_the_same_policy(fake):
    async def main():
        async with fastmc.aio.Client([fake.address], behaviors=BEH) as mc:
            assert await mc.set("k", "v")
            fake.rule("k", "hang_once")
            got = await mc.get("k")
            return got, await mc.get("k"), mc.metrics()

    got, again, metrics = asyncio.run(main())
    assert got == "v" and again == "v"
    assert metrics[fake.address]["transient_failures"] == 1
