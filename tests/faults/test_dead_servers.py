"""Dead servers: a server nobody listens on fails fast within retry_timeout, fails exactly its own
keys in a batch, is marked dead after failure_limit failures, is ejected from a consistent ring
(remove_failed) and rejoins after dead_timeout; disconnect_all forgets failures as pylibmc does."""

import time

import fastmc
import pytest
from checks import AGAIN
from fakes import FakeMemcached, stalled_listener
from memcached import Memcached, free_port


def test_dead_server_fails_fast_then_retries():
    port = free_port()
    mc = fastmc.Client(["127.0.0.1:%d" % port], behaviors={"retry_timeout": 1})
    with pytest.raises(fastmc.ConnectionError):
        mc.get("a")
    with pytest.raises(fastmc.ServerDown):
        mc.set("a", 1)
    time.sleep(1.05)
    with pytest.raises(fastmc.ConnectionError):
        mc.delete("a")


def test_dead_server_fails_fast_instead_of_paying_the_connect_timeout():
    """Without a fail-fast window every request to a dead server pays the connect timeout again
    (memjs users saw 90 s responses). Within retry_timeout the server is skipped at once with
    ServerDown."""
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


def test_disconnect_all_forgets_failures_as_pylibmc():
    """Django called disconnect_all() after every request, which reset libmemcached's failover state
    (django #7200). disconnect_all forgets a server's failure, as in pylibmc, so the next call tries
    the server again instead of failing fast."""
    port = free_port()
    mc = fastmc.Client(["127.0.0.1:%d" % port], behaviors={"retry_timeout": 30})
    with pytest.raises(fastmc.ConnectionError):
        mc.get("k")
    with pytest.raises(fastmc.ServerDown):
        mc.get("k")
    mc.disconnect_all()
    with pytest.raises(fastmc.ConnectionError):
        mc.get("k")


def test_dead_server_fails_exactly_its_keys(mcd):
    dead = "127.0.0.1:%d" % free_port()
    mc = fastmc.Client([mcd.address, dead])
    keys = ["k%d" % i for i in range(200)]
    on_dead = {k for k in keys if mc.hash(k) == 1}
    assert on_dead and len(on_dead) < len(keys)
    with pytest.raises(fastmc.ConnectionError) as ei:
        mc.set_multi({k: k for k in keys})
    assert set(ei.value.failed_keys) == on_dead
    # pylibmc's default: a failed server's keys are missing from get_multi
    assert mc.get_multi(keys) == {k: k for k in keys if k not in on_dead}
    strict = fastmc.Client([mcd.address, dead], behaviors={"get_multi_raise_on_error": 1})
    with pytest.raises(fastmc.Error):
        strict.get_multi(keys)


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
    proc = Memcached(
        port=port
    )  # the server is back, but the client does not look before dead_timeout
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
    """remove_failed with a consistent ring, as libmemcached does it: the first operation that
    reaches the dead server fails and ejects it; only the dead server's keys move (to the other
    servers); every operation during the outage then succeeds (no reconnect storm); after
    dead_timeout the restarted server is back in the ring and every key maps where it did
    before."""
    procs = [Memcached() for _ in range(3)]
    try:
        beh = {"ketama": True, "remove_failed": 1, "retry_timeout": 1, "dead_timeout": 1}
        mc = fastmc.Client([p.address for p in procs], behaviors=beh)
        keys = ["rj%d" % i for i in range(300)]
        before = {k: mc.hash(k) for k in keys}
        victims = {k for k in keys if before[k] == 1}
        assert victims and len(victims) < len(keys)
        procs[1].stop()
        with pytest.raises(fastmc.Error):
            mc.set_multi({k: k for k in keys})
        after = {k: mc.hash(k) for k in keys}
        moved = {k for k in keys if after[k] != before[k]}
        assert moved == victims
        assert all(after[k] != 1 for k in keys)
        assert mc.set_multi({k: k for k in keys}) == []
        assert mc.get_multi(keys) == {k: k for k in keys}
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


def test_modula_never_remaps_a_dead_servers_keys():
    """Without a consistent ring, remove_failed moves nothing: the dead server's keys just fail,
    and they still map to it."""
    procs = [Memcached() for _ in range(3)]
    try:
        keys = ["e%d" % i for i in range(300)]
        procs[1].stop()
        mm = fastmc.Client(
            [p.address for p in procs], behaviors={"remove_failed": 1, "retry_timeout": 1}
        )
        with pytest.raises(fastmc.Error):
            mm.set_multi({k: k for k in keys})
        assert any(mm.hash(k) == 1 for k in keys)
    finally:
        for p in procs:
            p.stop()


def test_rejoined_server_serves_what_it_had_like_libmemcached(mcd):
    """Ejecting a server sends its keys elsewhere; when it returns it may still hold their old
    values. fastmc does what libmemcached does, and documents it: a server that was unreachable but
    kept its data serves its old value again after rejoining."""
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


def test_no_server_at_all_raises_everywhere():
    """pylibmc segfaulted without a server (#30) and masked errors as an empty get_multi (#301).
    Here every operation raises a pylibmc-class error."""
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
