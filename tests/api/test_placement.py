"""Key placement: every configuration of the golden distribution vectors (generated from real
pylibmc, in tests/data/distribution_vectors.json) maps every key to the same server index."""

import contextlib
import json
from pathlib import Path

import fastmc
import pylibmc
from memcached import free_port

VECTORS = Path(__file__).resolve().parent.parent / "data" / "distribution_vectors.json"


def _vectors():
    return json.loads(VECTORS.read_text())


def test_all_distribution_vectors_match_pylibmc():
    """Every configuration of the shared vectors (generated from real pylibmc), through the
    public API: Client(servers, behaviors).hash(key), clone() for the pool cases."""
    data = _vectors()
    keys = [bytes.fromhex(k["hex"]) for k in data["keys"]]
    mismatches = {}
    for cfg in data["configs"]:
        if cfg["ejected_index"] is not None:
            continue  # needs a dead server: covered by the failure suite
        behaviors = dict(cfg["pylibmc_behaviors"])
        if "namespace" in behaviors:
            behaviors["namespace"] = behaviors["namespace"].encode()
        mc = fastmc.Client(cfg["servers"], behaviors=behaviors)
        if "clone" in cfg["via"] or "Pool" in cfg["via"]:
            mc = mc.clone()
        # `expected` indexes the servers as given; hash() answers, as pylibmc's does, with the
        # index in libmemcached's own list, which `_sort_hosts` sorts (`internal_order`).
        internal = cfg.get("internal_order") or list(range(len(cfg["servers"])))
        bad = 0
        for key, want in zip(keys, cfg["expected"]):
            if want is None:
                continue
            if mc.hash(key) != internal.index(want):
                bad += 1
        if bad:
            mismatches[cfg["name"]] = bad
    assert mismatches == {}


def test_hash_is_pylibmcs_index_with_sorted_hosts():
    """With `_sort_hosts`, pylibmc's hash() is the index in the sorted server list."""
    servers = ["10.0.0.3:11211", "10.0.0.1:11211", "10.0.0.2:11211:2"]
    keys = ["k%d" % i for i in range(200)]
    for behaviors in ({}, {"_sort_hosts": 1}, {"_sort_hosts": 1, "ketama": 1}, {"ketama": 1}):
        theirs = pylibmc.Client(servers, behaviors=dict(behaviors))
        ours = fastmc.Client(servers, behaviors=dict(behaviors))
        assert [ours.hash(k) for k in keys] == [theirs.hash(k) for k in keys], behaviors


def _placements(mod, servers, behaviors, steps, keys):
    mc = mod.Client(servers, behaviors=dict(behaviors))
    for step in steps:
        if step == "clone":
            mc = mc.clone()
        else:
            mc.behaviors = dict(step)
    return [mc.hash(k) for k in keys]


def test_hash_set_later_keeps_pylibmcs_points_until_the_ring_is_rebuilt():
    """libmemcached builds the continuum again on a distribution change, `_sort_hosts`, a clone
    and a server added, never on `hash` (or `ketama_hash`) alone: keys hashed with a hash set
    later land on the points the old hash made, as in pylibmc."""
    servers = ["10.0.0.1:11211", "10.0.0.2:11212", "10.0.0.3:11213"]
    keys = ["k%d" % i for i in range(500)]
    stale = [{"hash": "md5"}]
    steps = (
        stale,
        [{"hash": "crc"}, {"ketama_hash": "md5"}],
        [{"hash": "md5"}, {"ketama": True}],
        [{"hash": "md5"}, {"distribution": "consistent"}],
        [{"hash": "md5"}, {"_sort_hosts": True}],
        [{"hash": "fnv1a_32"}, "clone"],
        [{"hash": "md5", "ketama": True}],
    )
    for behaviors in (
        {"ketama": True},
        {"hash": "crc", "distribution": "consistent ketama spy"},
        {"ketama_weighted": True},
        {},
    ):
        for s in steps:
            theirs = _placements(pylibmc, servers, behaviors, s, keys)
            assert _placements(fastmc, servers, behaviors, s, keys) == theirs, (behaviors, s)
    # the case that tells the two rings apart: most keys move when the points are rebuilt
    rebuilt = _placements(fastmc, servers, {"ketama": True, "hash": "md5"}, [], keys)
    theirs = _placements(pylibmc, servers, {"ketama": True}, stale, keys)
    assert sum(a != b for a, b in zip(rebuilt, theirs)) > len(keys) // 4


def test_an_ejection_rebuilds_the_ring_with_the_hash_of_now(servers):
    """An ejected server makes libmemcached rebuild the continuum, with the hash set since the
    client was built: the ring then matches pylibmc's again."""
    specs = [servers[0], "127.0.0.1:%d" % free_port(), servers[1]]
    keys = ["k%d" % i for i in range(300)]
    beh = {"ketama": True, "remove_failed": 1, "retry_timeout": 1, "dead_timeout": 60}
    got = []
    for mod in (pylibmc, fastmc):
        mc = mod.Client(specs, behaviors=beh)
        mc.behaviors = {"hash": "md5"}
        for k in keys:
            with contextlib.suppress(mod.Error):
                mc.set(k, 1)
        got.append([mc.hash(k) for k in keys])
    assert 1 not in got[0]
    assert got[1] == got[0]


def test_a_sorted_server_list_stays_sorted_as_in_pylibmc(servers):
    """libmemcached sorts its server array in place under `_sort_hosts` and never puts it back:
    turning the behavior off keeps the sorted order (and a clone copies it), which moves every
    modula key of a list not given sorted. Checked where the keys land, and by hash()."""
    by_port = sorted(servers, key=lambda a: int(a.rsplit(":", 1)[1]))
    specs = [by_port[2], by_port[0], by_port[1]]  # no server where sorting puts it
    keys = ["s%d" % i for i in range(200)]
    direct = [fastmc.Client([a]) for a in specs]
    landed = []
    for mod in (pylibmc, fastmc):
        for d in direct:
            d.flush_all()
        mc = mod.Client(specs, behaviors={"_sort_hosts": True})
        mc.behaviors = {"_sort_hosts": False}
        assert mc.set_multi({k: 1 for k in keys}) == []
        landed.append([[i for i, d in enumerate(direct) if d.get(k)] for k in keys])
    assert landed[1] == landed[0]
    named = ["10.0.0.3:11211", "10.0.0.1:11211", "10.0.0.2:11211"]
    for behaviors in ({"_sort_hosts": True}, {"_sort_hosts": True, "ketama": True}):
        for steps in ([{"_sort_hosts": False}], [{"_sort_hosts": False}, "clone"]):
            theirs = _placements(pylibmc, named, behaviors, steps, keys)
            assert _placements(fastmc, named, behaviors, steps, keys) == theirs


def _holder(servers, wire_key):
    """The index of the one server that holds `wire_key` (asked of each server alone)."""
    held = [i for i, s in enumerate(servers) if fastmc.Client([s]).get(wire_key) is not None]
    assert len(held) == 1, (wire_key, held)
    return held[0]


def test_multi_key_calls_place_every_key_where_a_single_key_would_go(servers):
    """A multi-key call works out its keys' servers in a pass of its own before encoding them:
    on three servers every key of a set_multi lands on the server `hash()` names (computed
    apart, from the key with its namespace where the behaviors hash that), pylibmc reads them
    all back where no namespace is involved, and delete_multi removes them from there."""
    keys = ["place:%03d" % i for i in range(120)]
    configs = [
        ({}, True),
        ({"ketama": True}, True),
        ({"hash": "crc"}, True),
        ({"namespace": b"ns:", "_hash_with_prefix_key": True}, False),
        ({"namespace": b"ns:", "_hash_with_prefix_key": False}, False),
    ]
    for n, (behaviors, oracle) in enumerate(configs):
        mc = fastmc.Client(servers, behaviors=dict(behaviors))
        data = {f"{k}:{n}": f"{k}:{n}".encode() for k in keys}
        assert mc.set_multi(data) == []
        prefix = behaviors.get("namespace", b"").decode()
        wrong = [k for k in data if _holder(servers, prefix + k) != mc.hash(k)]
        assert wrong == [], (behaviors, len(wrong))
        if oracle:
            theirs = pylibmc.Client(servers, behaviors=dict(behaviors))
            assert theirs.get_multi(list(data)) == data
        assert mc.delete_multi(list(data))
        left = [k for k in data if any(fastmc.Client([s]).get(prefix + k) for s in servers)]
        assert left == [], behaviors
