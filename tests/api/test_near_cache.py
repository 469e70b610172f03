"""The near cache (fastmc.NearCache) on the blocking client, against a real memcached: off by
default and untouched when off; admission after hot_after reads; every write through the
client drops its key's near copy at once; the bounds; get_multi; clones; fork; metrics.
Revalidation by CAS and bounded staleness are in test_near_revalidation.py."""

import os
import time

import fastmc
import pytest

PLAIN_STATS = ("cmd_get", "get_hits", "get_misses")


def stats(address):
    """The server's counters, read by a client without a near cache."""
    s = fastmc.Client([address]).get_stats()[0][1]
    return {k: int(s[k]) for k in ("cmd_get", "get_hits", "bytes_written", "cmd_set")}


def near(address, **options):
    options.setdefault("ttl", 60)
    nc = fastmc.NearCache(**options)
    return fastmc.Client([address], {"cas": True}, near_cache=nc)


@pytest.fixture
def address(server):
    fastmc.Client([server.address]).flush_all()
    return server.address


def test_off_by_default_the_plain_class(address):
    mc = fastmc.Client([address])
    assert type(mc) is fastmc.Client
    assert mc.near_cache is None
    assert "near" not in mc.metrics()
    assert type(fastmc.Client([address], near_cache=None)) is fastmc.Client


def test_held_after_hot_after_reads_then_served_without_the_server(address):
    mc = near(address, hot_after=3)
    mc.set("k", "v")
    assert [mc.get("k") for _ in range(2)] == ["v", "v"]
    assert mc.metrics()["near"]["items"] == 0  # two reads: not hot yet
    assert mc.get("k") == "v"  # the third: fetched and kept
    assert mc.metrics()["near"]["items"] == 1
    before = stats(address)["cmd_get"]
    assert [mc.get("k") for _ in range(50)] == ["v"] * 50
    assert mc["k"] == "v" and "k" in mc
    assert stats(address)["cmd_get"] == before
    m = mc.metrics()["near"]
    assert m["hits"] == 52 and m["misses"] == 3 and m["fills"] == 1


def test_a_miss_is_not_held_and_default_is_returned(address):
    mc = near(address, hot_after=1)
    assert mc.get("absent", "d") == "d"
    assert mc.get("absent") is None
    assert mc.metrics()["near"]["items"] == 0


def test_str_and_bytes_keys_are_one_key(address):
    mc = near(address, hot_after=1)
    mc.set("k", b"1")
    assert mc.get(b"k") == b"1"
    mc.set(b"k", b"2")
    assert mc.get("k") == b"2"


def test_mutable_values_are_a_copy_per_read(address):
    mc = near(address, hot_after=1)
    mc.set("d", {"a": [1]})
    first = mc.get("d")
    first["a"].append(2)
    assert mc.get("d") == {"a": [1]}
    assert mc.metrics()["near"]["hits"] == 1


def _admit(mc, key, value=b"old"):
    mc.set(key, value)
    assert mc.get(key) == value
    assert mc.get(key) == value
    assert mc.near_cache.metrics()["items"] >= 1


# Each write through the client, and what a get of "k" must return right after it.
WRITES = [
    ("set", lambda mc: mc.set("k", b"new"), b"new"),
    ("set noreply", lambda mc: mc.set("k", b"new", noreply=True), b"new"),
    ("setitem", lambda mc: mc.__setitem__("k", b"new"), b"new"),
    ("replace", lambda mc: mc.replace("k", b"new"), b"new"),
    ("append", lambda mc: mc.append("k", b"+"), b"old+"),
    ("prepend", lambda mc: mc.prepend("k", b"-"), b"-old"),
    ("cas", lambda mc: mc.cas("k", b"new", mc.gets_multi(["k"])["k"][1]), b"new"),
    ("delete", lambda mc: mc.delete("k"), None),
    ("delete noreply", lambda mc: mc.delete("k", noreply=True), None),
    ("delitem", lambda mc: mc.__delitem__("k"), None),
    (
        "add after delete",
        lambda mc: (fastmc.Client(mc.addresses).delete("k"), mc.add("k", b"new")),
        b"new",
    ),
    ("set_multi", lambda mc: mc.set_multi({"k": b"new"}), b"new"),
    ("set_multi prefix", lambda mc: mc.set_multi({"": b"new"}, key_prefix="k"), b"new"),
    (
        "add_multi",
        lambda mc: (fastmc.Client(mc.addresses).delete("k"), mc.add_multi({"k": b"new"})),
        b"new",
    ),
    ("replace_multi", lambda mc: mc.replace_multi({"k": b"new"}), b"new"),
    ("delete_multi", lambda mc: mc.delete_multi(["k"]), None),
    ("delete_multi iterator", lambda mc: mc.delete_multi(iter(["k"])), None),
    ("delete_multi prefix", lambda mc: mc.delete_multi(["k"], key_prefix=""), None),
    ("invalidate", lambda mc: mc.invalidate("k"), b"old"),
    ("invalidate_multi", lambda mc: mc.invalidate_multi(["k"]), b"old"),
    ("flush_all", lambda mc: mc.flush_all(), None),
]


@pytest.mark.parametrize("name,write,after", WRITES, ids=[w[0] for w in WRITES])
def test_every_write_drops_the_near_copy_at_once(address, name, write, after):
    mc = near(address, hot_after=1)
    _admit(mc, "k")
    write(mc)
    assert mc.near_cache.metrics()["items"] == 0
    assert mc.get("k") == after


@pytest.mark.parametrize(
    "write",
    [
        lambda mc: mc.incr("n"),
        lambda mc: mc.decr("n", 2),
        lambda mc: mc.incr_multi(["n"], delta=5),
        lambda mc: mc.incr_multi(["x"], "n"[0], delta=5) if False else mc.incr_multi(["n"]),
        lambda mc: mc.touch("n", 100),
        lambda mc: mc.touch_multi(["n"], 100),
        lambda mc: mc.gat("n", 100),
        lambda mc: mc.gat_multi(["n"], 100),
        lambda mc: mc.get_or_set("n", 7),
    ],
    ids=[
        "incr",
        "decr",
        "incr_multi",
        "incr_multi default",
        "touch",
        "touch_multi",
        "gat",
        "gat_multi",
        "get_or_set",
    ],
)
def test_counters_touch_and_leases_drop_or_serve_current(address, write):
    mc = near(address, hot_after=1)
    plain = fastmc.Client([address])
    _admit(mc, "n", b"10")
    write(mc)
    assert mc.get("n") == plain.get("n")


def test_get_or_set_serves_a_held_value_and_its_lease_drops_it(address):
    mc = near(address, hot_after=1)
    _admit(mc, "g", "held")
    before = stats(address)["cmd_get"]
    assert mc.get_or_set("g", "computed") == "held"
    assert stats(address)["cmd_get"] == before
    fastmc.Client([address]).delete("g")
    mc.near_cache.clear()
    assert mc.get_or_set("g", "computed") == "computed"
    assert mc.get("g") == "computed"


def test_a_held_key_written_stays_hot(address):
    mc = near(address, hot_after=3)
    mc.set("w", b"1")
    for _ in range(3):
        assert mc.get("w") == b"1"
    assert mc.near_cache.metrics()["items"] == 1
    mc.set("w", b"2")
    assert mc.near_cache.metrics()["items"] == 0
    assert mc.get("w") == b"2"  # fetched, and held again at once
    assert mc.near_cache.metrics()["items"] == 1


def test_a_write_that_overlaps_a_fetch_keeps_nothing(address):
    mc = near(address, hot_after=1)
    mc.set("k", b"old")
    since = mc.near_cache.start()
    mc.set("k", b"new")  # lands while a fetch that read b"old" is in flight
    mc.near_cache.keep(b"k", None, b"old", 5, 3, since)
    assert mc.near_cache.metrics()["items"] == 0
    assert mc.get("k") == b"new"


def test_max_items_and_max_bytes_are_hard_bounds(address):
    mc = near(address, hot_after=1, max_items=20, max_bytes=4000)
    for i in range(200):
        mc.set("k%d" % i, b"x" * (i % 50))
        mc.get("k%d" % i)
        m = mc.metrics()["near"]
        assert m["items"] <= 20 and m["bytes"] <= 4000
    assert m["evictions"] > 0
    mc.set("huge", b"x" * 5000)
    mc.get("huge")
    assert b"huge" not in mc.near_cache._items


def test_a_scan_of_one_off_reads_does_not_push_out_the_hot_set(address):
    mc = near(address, hot_after=2, max_items=10)
    hot = ["hot%d" % i for i in range(10)]
    mc.set_multi({k: k.encode() for k in hot})
    for _ in range(2):
        for k in hot:
            mc.get(k)
    mc.set_multi({"scan%d" % i: b"s" for i in range(500)})
    for i in range(500):
        assert mc.get("scan%d" % i) == b"s"
    assert sorted(mc.near_cache._items) == sorted(k.encode() for k in hot)
    assert mc.metrics()["near"]["evictions"] == 0


def test_get_multi_serves_what_it_holds_and_fetches_the_rest_in_one_batch(address):
    mc = near(address, hot_after=1)
    mc.set_multi({"m%d" % i: i for i in range(10)})
    assert mc.get_multi(["m%d" % i for i in range(5)]) == {"m%d" % i: i for i in range(5)}
    before = stats(address)
    got = mc.get_multi(["m%d" % i for i in range(10)] + ["absent"])
    assert got == {"m%d" % i: i for i in range(10)}
    after = stats(address)
    assert after["cmd_get"] - before["cmd_get"] == 6  # the 5 not held and the miss
    assert mc.metrics()["near"]["items"] == 10
    assert mc.get_multi(["0", "1"], key_prefix="m") == {"0": 0, "1": 1}


def test_server_key_reads_are_held_apart_and_writes_drop_every_variant(address):
    mc = near(address, hot_after=1)
    mc.set("s", b"a", server_key="group")
    assert mc.get("s", server_key="group") == b"a"
    assert mc.get("s", server_key="group") == b"a"
    assert mc.metrics()["near"]["hits"] == 1
    mc.set("s", b"b")
    assert mc.get("s", server_key="group") == b"b"


def test_clones_and_pools_share_the_near_cache(address):
    mc = near(address, hot_after=1)
    clone = mc.clone()
    assert clone.near_cache is mc.near_cache
    _admit(mc, "c")
    clone.set("c", b"by clone")
    assert mc.get("c") == b"by clone"
    with fastmc.ClientPool(mc, 2).reserve() as pooled:
        assert pooled.near_cache is mc.near_cache


def test_a_near_cache_serves_one_clients_servers(address, servers):
    nc = fastmc.NearCache()
    fastmc.Client([address], near_cache=nc)
    fastmc.Client([address], near_cache=nc)
    with pytest.raises(ValueError):
        fastmc.Client(servers, near_cache=nc)


@pytest.mark.parametrize(
    "options",
    [
        {"ttl": 0},
        {"max_items": 0},
        {"max_bytes": 0},
        {"hot_after": 0},
        {"window": 0},
        {"max_stale": -1},
    ],
)
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError):
        fastmc.NearCache(**options)
    with pytest.raises(TypeError):
        fastmc.Client(["127.0.0.1:1"], near_cache=42)


def test_options_as_a_dict(address):
    mc = fastmc.Client([address], near_cache={"ttl": 5, "hot_after": 1})
    assert isinstance(mc.near_cache, fastmc.NearCache) and mc.near_cache.ttl == 5
    assert "NearCache(ttl=5.0" in repr(mc.near_cache)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_after_fork_the_child_starts_empty(address):
    mc = near(address, hot_after=1)
    _admit(mc, "f")
    pid = os.fork()
    if pid == 0:
        ok = mc.near_cache.metrics()["items"] == 0 and mc.get("f") == b"old"
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert mc.near_cache.metrics()["items"] == 1


def test_prometheus_exports_the_near_counters(address):
    import fastmc.prometheus
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    mc = near(address, hot_after=1)
    registry = CollectorRegistry()
    fastmc.prometheus.register(mc, client="web", registry=registry)
    _admit(mc, "p")
    mc.set("p", b"2")
    samples = {
        smp.name: smp.value
        for fam in text_string_to_metric_families(generate_latest(registry).decode())
        for smp in fam.samples
        if smp.labels == {"client": "web"}
    }
    assert samples["fastmc_near_hits_total"] == 1
    assert samples["fastmc_near_fills_total"] == 1
    assert samples["fastmc_near_invalidations_total"] == 1
    assert samples["fastmc_near_items"] == 0


def test_a_lease_read_drops_the_near_copy(address):
    mc = near(address, hot_after=1)
    _admit(mc, "l")
    mc._lease_get("l", 10, 0)
    assert mc.near_cache.metrics()["items"] == 0


def test_checks_read_the_namespaced_item(address):
    mc = fastmc.Client(
        [address], {"namespace": b"ns:"}, near_cache=fastmc.NearCache(ttl=0.05, hot_after=1)
    )
    mc.set("k", b"1")
    assert mc.get("k") == b"1"
    fastmc.Client([address]).set("ns:k", b"2")
    time.sleep(0.08)
    assert mc.get("k") == b"2"  # the check asked for ns:k, saw its CAS change
    time.sleep(0.08)
    assert mc.get("k") == b"2"
    m = mc.metrics()["near"]
    assert m["revalidations_changed"] == 1 and m["revalidations_unchanged"] == 1
