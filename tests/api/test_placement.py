"""Key placement: every configuration of the golden distribution vectors (generated from real
pylibmc, in tests/data/distribution_vectors.json) maps every key to the same server index."""

import json
from pathlib import Path

import fastmc
import pylibmc

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
