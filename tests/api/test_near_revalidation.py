"""The near cache's revalidation, against real servers: by CAS alone on Debian's memcached
(1.6.18: ``mg <key> c``, the value fetched only when it changed), in one round trip with the
conditional fetch of Debian sid's 1.6.45 (``mg <key> C<cas> v``), by a plain get through
twemproxy; a 100 KB value not re-sent while unchanged (the server's bytes_written); bounded
staleness under concurrent writers; stale_on_error while the server is down."""

import os
import signal
import threading
import time

import fastmc
import pytest
from memcached import FAST_FAILURE, Memcached, sigstop
from nutcracker import Nutcracker
from sid_memcached import proxy_binary

TTL = 0.05


def counters(address):
    s = fastmc.Client([address]).get_stats()[0][1]
    return {k: int(s[k]) for k in ("cmd_get", "bytes_written")}


def version(address):
    return tuple(map(int, fastmc.Client([address]).get_stats()[0][1]["version"].split(b".")[:3]))


@pytest.fixture(scope="module", params=["debian", "sid"])
def memcached(request):
    binary = None
    if request.param == "sid":
        binary = proxy_binary()
        if binary is None:
            pytest.fail("Debian sid's memcached is missing: run `make memcached-proxy`")
    m = Memcached(binary=binary)
    yield m
    m.stop()


def near(address, **options):
    options.setdefault("ttl", TTL)
    options.setdefault("hot_after", 1)
    return fastmc.Client([address], near_cache=fastmc.NearCache(**options))


def stats_delta(address, action):
    """The server's counters moved by ``action``, less what reading them costs (measured)."""
    a = counters(address)
    b = counters(address)
    action()
    c = counters(address)
    return {k: (c[k] - b[k]) - (b[k] - a[k]) for k in a}


def test_an_unchanged_100k_value_is_not_sent_again(memcached):
    address = memcached.address
    mc = near(address)
    big = b"v" * 100_000
    mc.set("big", big)
    assert mc.get("big") == big
    time.sleep(TTL * 1.5)
    assert mc.get("big") == big  # the first check teaches a 1.6.18 client to ask by CAS alone

    def revalidate_ten_times():
        for _ in range(10):
            time.sleep(TTL * 1.5)
            assert mc.get("big") == big

    moved = stats_delta(address, revalidate_ten_times)
    assert moved["bytes_written"] < 10 * 100, moved  # ten short answers, no value
    assert moved["cmd_get"] == 10
    m = mc.metrics()["near"]
    assert m["revalidations_unchanged"] >= 10
    assert m["bytes_not_transferred"] >= 10 * 100_000


def test_a_changed_value_is_fetched_in_one_round_trip_where_the_server_can(memcached):
    address = memcached.address
    mc = near(address)
    other = fastmc.Client([address])
    mc.set("c", "v0")
    assert mc.get("c") == "v0"
    time.sleep(TTL * 1.5)
    mc.get("c")  # learn what the server answers
    conditional = version(address) >= (1, 6, 40)
    assert mc.near_cache.conditional is conditional
    for i in range(1, 4):
        other.set("c", "v%d" % i)
        time.sleep(TTL * 1.5)
        moved = stats_delta(address, lambda: mc.get("c"))
        assert mc.get("c") == "v%d" % i
        # 1.6.40's conditional fetch: one mg; before it, mg c then the fetch
        assert moved["cmd_get"] == (1 if conditional else 2), moved
    assert mc.metrics()["near"]["revalidations_changed"] == 3


def test_a_deleted_value_is_gone_after_the_check(memcached):
    mc = near(memcached.address)
    mc.set("d", "v")
    assert mc.get("d") == "v"
    fastmc.Client([memcached.address]).delete("d")
    assert mc.get("d") == "v"  # held: another client's delete is seen within ttl
    time.sleep(TTL * 1.5)
    assert mc.get("d", "gone") == "gone"
    assert mc.near_cache.metrics()["items"] == 0


def test_get_multi_checks_held_keys_by_cas_in_one_batch(memcached):
    address = memcached.address
    mc = near(address)
    other = fastmc.Client([address])
    keys = ["gm%d" % i for i in range(5)]
    big = {k: k.encode() * 10_000 for k in keys}  # 30-40 KB each
    mc.set_multi(big)
    assert mc.get_multi(keys) == big
    assert mc.near_cache.metrics()["items"] == 5
    other.set("gm0", b"changed")
    other.delete("gm1")
    time.sleep(TTL * 1.5)
    got = {}
    moved = stats_delta(address, lambda: got.update(mc.get_multi(keys)))
    assert got == {"gm0": b"changed", **{k: big[k] for k in keys[2:]}}
    # five CAS checks, then one fetch of the changed key and the gone one
    assert moved["cmd_get"] == 7, moved
    assert moved["bytes_written"] < 1000, moved
    m = mc.metrics()["near"]
    assert m["revalidations_unchanged"] == 3 and m["revalidations_changed"] == 2
    assert m["items"] == 4 and b"gm1" not in mc.near_cache._items


def test_without_the_meta_protocol_a_plain_get_revalidates():
    backend = Memcached()
    proxy = Nutcracker([backend])
    try:
        mc = near(proxy.address)
        other = fastmc.Client([backend.address])
        mc.set("t", "v1")
        assert mc.get("t") == "v1"
        assert mc.get("t") == "v1"
        assert mc.metrics()["near"]["hits"] == 1
        other.set("t", "v2")
        time.sleep(TTL * 1.5)
        assert mc.get("t") == "v2"
        time.sleep(TTL * 1.5)
        assert mc.get("t") == "v2"
        m = mc.metrics()["near"]
        assert m["revalidations_changed"] == 1 and m["revalidations_unchanged"] == 1
        other.set("t", "v3")
        time.sleep(TTL * 1.5)
        assert mc.get_multi(["t"]) == {"t": "v3"}  # a batch check falls back to the fetch
    finally:
        proxy.stop()
        backend.stop()


def test_binary_protocol_revalidates_with_a_plain_get(memcached):
    mc = fastmc.Client([memcached.address], binary=True, near_cache={"ttl": TTL, "hot_after": 1})
    mc.set("b", "v1")
    assert mc.get("b") == "v1"
    fastmc.Client([memcached.address]).set("b", "v2")
    time.sleep(TTL * 1.5)
    assert mc.get("b") == "v2"


def test_staleness_is_bounded_under_concurrent_writers(memcached):
    """Writers (another client, and this one) store increasing versions; every read by the
    near client returns a version at least as new as the last one whose write had finished
    ttl (plus a check's round trip) before the read began, and never older than its own
    thread's last write."""
    address = memcached.address
    ttl = 0.03
    slack = 0.05  # a check in flight: its round trip, on two busy cores
    mc = near(address, ttl=ttl, max_items=8)
    other = fastmc.Client([address])
    keys = ["p%d" % i for i in range(4)]
    other.set_multi({k: 0 for k in keys})
    done_at = {k: [(0.0, 0)] for k in keys}  # (time the write finished, version)
    lock = threading.Lock()
    failures = []
    stop = time.monotonic() + 1.5
    version = [0]

    def writer(client, own):
        while time.monotonic() < stop:
            with lock:
                version[0] += 1
                v = version[0]
            k = keys[v % len(keys)]
            client.set(k, v)
            t = time.monotonic()
            with lock:
                done_at[k].append((t, v))
            if own:  # read-your-writes: at once, this thread sees its own write or a newer
                got = mc.get(k)
                if got < v:
                    failures.append(("own", k, v, got))
            time.sleep(0.002)

    def reader():
        i = 0
        while time.monotonic() < stop:
            k = keys[i % len(keys)]
            i += 1
            start = time.monotonic()
            with lock:
                floor = max((v for t, v in done_at[k] if t < start - ttl - slack), default=0)
            got = mc.get(k)
            if got < floor:
                failures.append(("stale", k, floor, got))

    threads = [threading.Thread(target=writer, args=(other, False))]
    threads += [threading.Thread(target=writer, args=(mc, True))]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    m = mc.metrics()["near"]
    assert m["hits"] > 100 and m["revalidations_changed"] + m["revalidations_unchanged"] > 10


@pytest.mark.parametrize("stale_on_error", [True, False])
def test_stale_on_error_serves_held_values_while_the_server_is_down(stale_on_error):
    m = Memcached()
    try:
        mc = fastmc.Client(
            [m.address],
            {"retry_timeout": 1, "connect_timeout": 200},
            near_cache=fastmc.NearCache(
                ttl=TTL, hot_after=1, stale_on_error=stale_on_error, max_stale=0.5
            ),
        )
        mc.set("s", "held")
        assert mc.get("s") == "held"
        m.stop()
        time.sleep(TTL * 1.5)
        if stale_on_error:
            assert mc.get("s") == "held"
            assert mc.metrics()["near"]["stale_served"] == 1
            time.sleep(0.6)  # past ttl + max_stale: the failure raises
        with pytest.raises(fastmc.Error):
            mc.get("s")
    finally:
        m.stop()


def test_stale_on_error_serves_held_values_through_a_timeout():
    """A server that stops answering (SIGSTOP): the check times out (pylibmc's `Error`), and
    the held value is served instead."""
    m = Memcached()
    try:
        mc = fastmc.Client(
            [m.address],
            FAST_FAILURE,
            near_cache=fastmc.NearCache(ttl=TTL, hot_after=1, stale_on_error=True),
        )
        mc.set("t", "held")
        assert mc.get("t") == "held"
        sigstop(m.proc.pid)
        try:
            time.sleep(TTL * 1.5)
            assert mc.get("t") == "held"
            assert mc.metrics()["near"]["stale_served"] == 1
        finally:
            os.kill(m.proc.pid, signal.SIGCONT)
    finally:
        m.stop()
