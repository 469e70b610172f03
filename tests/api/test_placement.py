"""Key placement: every configuration of the golden distribution vectors (generated from real
pylibmc, in tests/data/distribution_vectors.json) maps every key to the same server index."""

import json
from pathlib import Path

import fastmc

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
        bad = 0
        for key, want in zip(keys, cfg["expected"]):
            if want is None:
                continue
            if mc.hash(key) != want:
                bad += 1
        if bad:
            mismatches[cfg["name"]] = bad
    assert mismatches == {}
