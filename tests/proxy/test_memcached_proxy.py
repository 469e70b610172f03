"""Through memcached's built-in proxy (memcached 1.6.45 from Debian sid, its route library
`routelib`) in the three route configurations a user writes (tests/support/mcproxy.py: a plain
pool, a pool with a gutter to fail over to, writes replicated to two pools with all-sync), fastmc
gives what it gives against memcached directly, multi-key calls stay one round trip, and a
failed backend fails its keys only: the proxy is never marked down.

Needs a memcached built with the proxy (`make memcached-proxy`); skipped without one, unless
FASTMC_REQUIRE_PROXY is set (CI sets it), which makes the absence a failure."""

import os
import time

import fastmc
import pylibmc
import pytest
from aio_blocking import Blocking
from cases import CASES, TEXT_CASES, outcome
from fakes import Relay
from mcproxy import MemcachedProxy, failover, plain_pool, replicated
from memcached import Memcached
from sid_memcached import proxy_binary

CONFIGS = ("plain", "failover", "replicated")
ALL_CASES = {**CASES, **TEXT_CASES}
# Where the outcome through the proxy is not memcached's, and why (docs/proxies.md):
# - the route library routes no flush_all: the proxy hangs up on it (the call raises, as
#   pylibmc's does; the proxy is not marked down: test_a_refused_flush_all_...);
# - the proxy drops its connection to a backend that answered CLIENT_ERROR, and fails the
#   requests queued behind on it with SERVER_ERROR, so a pipelined incr_multi after an incr
#   on a non-number gets ServerError for some keys;
# - route_failover retries a CLIENT_ERROR on the gutter, where the key is missing: NotFound.
DIFFERENT = {
    ("*", "flush_all"): ("raise", "SomeErrors"),
    ("*", "incr_multi_failure_classes"): None,
    ("failover", "incr_non_numeric"): ("raise", "NotFound"),
    ("failover", "incr_pickled_none"): ("raise", "NotFound"),
}


def _require_proxy() -> str:
    binary = proxy_binary()
    if binary is None:
        reason = "no memcached with the built-in proxy: run make memcached-proxy"
        if os.environ.get("FASTMC_REQUIRE_PROXY"):
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


def _flush(procs):
    for p in procs:
        fastmc.Client([p.address]).flush_all()


def _config(name, backends):
    if name == "plain":
        return plain_pool(backends)
    if name == "failover":
        return failover(backends[:2], backends[2:])
    return replicated(backends[:2])


@pytest.fixture(scope="module")
def backends():
    _require_proxy()
    procs = [Memcached() for _ in range(3)]
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture(scope="module")
def direct():
    p = Memcached()
    yield p
    p.stop()


@pytest.fixture(scope="module", params=CONFIGS)
def proxy(request, backends):
    px = MemcachedProxy(backends, _config(request.param, backends))
    px.config_name = request.param
    yield px
    px.close()


@pytest.fixture
def own_backends():
    """Three backends of the test's own, which it may stop."""
    _require_proxy()
    procs = [Memcached() for _ in range(3)]
    yield procs
    for p in procs:
        p.stop()


def test_the_proxy_is_the_one_documented(backends):
    px = MemcachedProxy(backends, plain_pool(backends))
    try:
        assert px.version() >= "1.6.23"  # the first with the route library built in
    finally:
        px.close()


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_every_case_as_against_memcached_directly(proxy, backends, direct, name):
    """Each differential case through the proxy and against one memcached: the same outcome,
    or the documented one (DIFFERENT)."""
    _flush(backends)
    _flush([direct])
    through = outcome(lambda: ALL_CASES[name](fastmc, fastmc.Client([proxy.address])))
    alone = outcome(lambda: ALL_CASES[name](fastmc, fastmc.Client([direct.address])))
    for where in (proxy.config_name, "*"):
        if (where, name) in DIFFERENT:
            expected = DIFFERENT[(where, name)]
            assert expected is None or through == expected
            return
    assert through == alone


def _backend_stat(procs, name):
    total = 0
    for p in procs:
        for _, s in fastmc.Client([p.address]).get_stats():
            total += int(s[name])
    return total


def test_multi_key_calls_are_one_request_on_one_connection(proxy, backends):
    """get_multi, set_multi and delete_multi of 300 keys, through a relay that records what the
    client sends: each is one request from the client (one `get` line; quiet meta writes closed
    by one `mn`, the proxy having answered the meta probe) on one connection, and every key
    reached the backends."""
    _flush(backends)
    relay = Relay(proxy.port)
    try:
        mc = fastmc.Client([relay.address])
        assert mc.set_multi({"warm:1": 1, "warm:2": 2}) == []  # then the meta probe
        relay.take_until(lambda got: got.endswith(b"mn\r\n"))
        keys = ["pipe:%d" % i for i in range(300)]
        copies = 2 if proxy.config_name == "replicated" else 1
        sets = _backend_stat(backends, "cmd_set")
        before = dict(mc.metrics()[relay.address]["requests"])
        assert mc.set_multi({k: k for k in keys}) == []
        assert mc.get_multi(keys) == {k: k for k in keys}
        assert mc.delete_multi(keys)
        sent = relay.take_until(lambda got: got.count(b"mn\r\n") == 2).split(b"\r\n")
        assert [line.split(b" ")[0] for line in sent if line.startswith((b"ms ", b"md "))] == [
            b"ms"
        ] * 300 + [b"md"] * 300
        assert sent.count(b"mn") == 2
        gets = [line for line in sent if line.startswith(b"get")]
        assert len(gets) == 1 and len(gets[0].split()) == 301
        m = mc.metrics()[relay.address]
        assert {f: m["requests"][f] - before[f] for f in ("store", "get", "delete")} == {
            "store": 1,
            "get": 1,
            "delete": 1,
        }
        assert m["connections_opened"] == 1 and relay.accepted == 1
        assert _backend_stat(backends, "cmd_set") - sets == 300 * copies
    finally:
        relay.close()


def test_meta_commands_and_cas_through_the_proxy(proxy, backends):
    """The proxy answers `mn`, so fastmc sends quiet meta writes and its leases through it:
    get_or_set computes once, invalidate lets one caller recompute; gat, gets and cas, and
    noreply batches land."""
    _flush(backends)
    mc = fastmc.Client([proxy.address])
    calls = []

    def compute():
        calls.append(1)
        return "v%d" % len(calls)

    assert mc.get_or_set("lease", compute, 60) == "v1"
    assert mc.get_or_set("lease", compute, 60) == "v1"
    assert mc.invalidate("lease")
    assert mc.get_or_set("lease", compute, 60) == "v2"
    assert len(calls) == 2
    assert mc.gat("lease", 60) == "v2" and mc.gat_multi(["lease", "none"], 60) == {"lease": "v2"}
    if proxy.config_name != "replicated":  # the shared backends' CAS counters differ
        cas = fastmc.Client([proxy.address], behaviors={"cas": True})
        value, token = cas.gets("lease")
        assert value == "v2" and cas.cas("lease", "v3", token)
        assert not cas.cas("lease", "v4", token) and mc.get("lease") == "v3"
    batch = {"nr:%d" % i: i for i in range(5000)}
    assert mc.set_multi(batch, noreply=True) == []
    assert mc.get_multi(list(batch)) == batch
    assert mc.metrics()[proxy.address]["errors"] == {}


def test_replicated_writes_reach_every_replica(own_backends):
    """Every write lands on both replicas. cas works while the replicas' CAS counters agree
    (every write went through the proxy); once they differ, the token read from one replica
    is refused (EXISTS) by the other, while the first applied it: cas returns False and the
    replicas hold different values."""
    replicas = own_backends[:2]
    px = MemcachedProxy(own_backends, replicated(replicas))
    try:
        mc = fastmc.Client([px.address], behaviors={"cas": True})
        assert mc.set_multi({"r%d" % i: i for i in range(20)}) == []
        assert mc.set("one", "a") and mc.incr("r1", 5) == 6 and mc.delete("r2")
        assert mc.append("one", "+") and mc.touch("r3", 60)
        value, token = mc.gets("one")
        assert value == "a+" and mc.cas("one", "b", token)
        for b in replicas:
            replica = fastmc.Client([b.address])
            assert replica.get("one") == "b" and replica.get("r1") == 6
            assert replica.get("r2") is None and replica.get("r19") == 19
        assert fastmc.Client([own_backends[2].address]).get("one") is None
        assert fastmc.Client([replicas[0].address]).set("elsewhere", 1)  # counters now differ
        assert mc.set("two", "a")
        value, token = mc.gets("two")
        assert not mc.cas("two", "b", token)
        assert [fastmc.Client([b.address]).get("two") for b in replicas] == ["b", "a"]
    finally:
        px.close()


def _keys_on(proc, keys):
    direct = fastmc.Client([proc.address])
    return {k for k in keys if direct.get(k) is not None}


def _not_marked_down(mc, address):
    m = mc.metrics()[address]
    return m["server_down_skips"] == 0 and m["ejections"] == 0 and "ServerDown" not in m["errors"]


def test_a_dead_backend_in_a_pool_fails_only_its_keys(own_backends):
    """A pool backend killed: its keys fail with ServerError (the proxy's `SERVER_ERROR backend
    failure`), every other key is served, and the proxy is never marked down; when the backend
    is back its keys are served again. pylibmc marks the proxy down at the first error."""
    px = MemcachedProxy(own_backends, plain_pool(own_backends))
    try:
        mc = fastmc.Client([px.address])
        keys = ["kb:%d" % i for i in range(60)]
        assert mc.set_multi({k: k for k in keys}) == []
        dead = _keys_on(own_backends[1], keys)
        live = sorted(set(keys) - dead)
        assert 0 < len(dead) < len(keys)
        own_backends[1].stop()
        for k in keys:
            if k in dead:
                assert outcome(lambda k=k: mc.get(k)) == ("raise", "ServerError")
            else:
                assert mc.get(k) == k
        assert mc.get_multi(keys) == {k: k for k in live}
        strict = fastmc.Client([px.address], behaviors={"get_multi_raise_on_error": True})
        with pytest.raises(fastmc.ServerError):
            strict.get_multi(keys)
        with pytest.raises(fastmc.ServerError) as ei:
            mc.set_multi({k: "new" for k in keys})
        assert sorted(ei.value.failed_keys) == sorted(dead)
        assert mc.get_multi(live) == {k: "new" for k in live}
        # Misses beside the failed keys: the error lines name no key, so fastmc reads those
        # keys again one request each, which tells the misses from the failed keys.
        absent = ["absent:%d" % i for i in range(10)]
        aio = Blocking([px.address])
        for client in (mc, aio, aio):  # the asyncio client's second call: on its event loop
            assert client.get_multi(sorted(dead) + absent) == {}
        with pytest.raises(fastmc.ServerError):
            strict.get_multi(sorted(dead) + absent)
        with pytest.raises(fastmc.ServerError) as ei:
            mc.delete_multi(keys)
        assert any("(%s)" % k in str(ei.value) for k in dead)  # a failed key, not a deleted one
        assert mc.get_multi(live) == {}
        assert _not_marked_down(mc, px.address)
        assert mc.metrics()[px.address]["connections_opened"] == 1  # never dropped
        pm = pylibmc.Client([px.address])
        for k in sorted(dead)[:1] + live[:1]:
            outcome(lambda k=k: pm.get(k))
        assert outcome(lambda: pm.get(live[1])) == ("raise", "ServerDown")
        own_backends[1].restart()
        deadline = time.monotonic() + 10  # the proxy retries the backend after a second
        while outcome(lambda: mc.set(sorted(dead)[0], 1))[0] != "ok":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert mc.set_multi({k: "back" for k in keys}) == []
        assert mc.get_multi(keys) == {k: "back" for k in keys}
        assert _not_marked_down(mc, px.address)
    finally:
        px.close()


def test_a_dead_backend_fails_over_to_the_gutter(own_backends):
    """route_failover: with a backend of the main pool dead, its keys are written to and read
    from the gutter pool; no call fails."""
    px = MemcachedProxy(own_backends, failover(own_backends[:2], own_backends[2:]))
    try:
        mc = fastmc.Client([px.address])
        keys = ["fo:%d" % i for i in range(40)]
        assert mc.set_multi({k: k for k in keys}) == []
        dead = _keys_on(own_backends[1], keys)
        assert dead and not _keys_on(own_backends[2], keys)
        own_backends[1].stop()
        assert mc.get_multi(keys) == {k: k for k in keys if k not in dead}  # gutter misses
        assert mc.set_multi({k: "again" for k in keys}) == []
        assert mc.get_multi(keys) == {k: "again" for k in keys}
        assert _keys_on(own_backends[2], keys) == dead
        for k in sorted(dead)[:5]:
            assert outcome(lambda k=k: mc.incr(k + ":n")) == ("raise", "NotFound")
            assert mc.set(k, 1) and mc.incr(k) == 2 and mc.decr(k) == 1
            assert mc.touch(k, 60) and mc.delete(k) and mc.get(k) is None
        assert mc.metrics()[px.address]["errors"] == {}
    finally:
        px.close()


def test_a_dead_replica_fails_writes_not_reads(own_backends):
    """route_allsync with a replica dead: a write answers the dead replica's error (allsync
    returns the first error), reads fail over to the live replica, and the proxy stays up.
    A quiet meta batch (set_multi) reads back what was stored: the live replica has it, so
    the keys count as stored."""
    px = MemcachedProxy(own_backends, replicated(own_backends[:2]))
    try:
        mc = fastmc.Client([px.address])
        keys = ["rp:%d" % i for i in range(30)]
        assert mc.set_multi({k: k for k in keys}) == []
        own_backends[1].stop()
        assert mc.get_multi(keys) == {k: k for k in keys}
        assert outcome(lambda: mc.set(keys[0], "x")) == ("raise", "ServerError")
        assert outcome(lambda: mc.delete(keys[1])) == ("raise", "ServerError")
        assert mc.get(keys[0]) == "x"  # written on the live replica
        assert mc.set_multi({k: "y" for k in keys}) == []
        assert mc.get_multi(keys) == {k: "y" for k in keys}
        assert _not_marked_down(mc, px.address)
    finally:
        px.close()


def test_a_client_error_resets_the_backend_for_queued_requests_only(backends):
    """The proxy drops its connection to a backend that answered CLIENT_ERROR: requests already
    queued behind it fail with ServerError; the next call is served and nothing is marked
    down."""
    px = MemcachedProxy(backends, plain_pool(backends))
    try:
        _flush(backends)
        mc = fastmc.Client([px.address])
        assert mc.set("s", "abc") and mc.set("n", 1)
        assert outcome(lambda: mc.incr("s")) == ("raise", "ClientError")
        assert mc.get("s") == "abc" and mc.incr("n") == 2
        assert _not_marked_down(mc, px.address)
    finally:
        px.close()


def test_a_restarted_proxy_is_invisible_to_reads(backends):
    px = MemcachedProxy(backends, plain_pool(backends))
    try:
        mc = fastmc.Client([px.address])
        assert mc.set("restart", "before")
        px.restart()
        assert mc.get("restart") == "before"
        assert mc.set_multi({"ra": 1, "rb": 2}) == []
        assert mc.get_multi(["ra", "rb"]) == {"ra": 1, "rb": 2}
    finally:
        px.close()


def test_a_refused_flush_all_fails_the_call_and_not_the_proxy(proxy, backends):
    """The route library routes no flush_all: the proxy hangs up on it. The call raises (as
    pylibmc's does), but the proxy, which serves every keyed request, is not marked down: the
    next calls are served at once (pylibmc: ServerDown until retry_timeout)."""
    mc = fastmc.Client([proxy.address], behaviors={"retry_timeout": 60})
    mc.set("before-flush", 1)
    with pytest.raises(fastmc.Error):
        mc.flush_all()
    assert mc.get("before-flush") == 1
    assert mc.set("after-flush", 2) and mc.get("after-flush") == 2
    assert mc.metrics()[proxy.address]["server_down_skips"] == 0
