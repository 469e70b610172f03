"""pytest-benchmark versions of the key scenarios: `pytest benches/` (not part of `pytest tests`).

Each benchmark runs once per column (floor text, floor meta, fastmc, the peers) and checks what
it read back. Compare the columns of one group:

    pytest benches/ --benchmark-group-by=group --benchmark-sort=mean
"""

from __future__ import annotations

import pytest

from mcbench.verify import diff, values_for


def test_fastmc_is_importable(fastmc_module):
    mod, name, err = fastmc_module
    assert mod is not None, f"`import {name}` failed: {err}; the fastmc column is missing"


def _items(col, scope, n, salt="|p"):
    keys = col.keys(scope, n)
    return list(zip(keys, values_for(keys, salt)))


@pytest.mark.benchmark(group="single get")
def test_single_get(benchmark, col):
    items = _items(col, "pg", 1)
    assert col.stored_ok(col.set_multi(dict(items)), 1)
    bad = benchmark(col.loop_get, items)
    assert bad == 0, "get returned a wrong value"


@pytest.mark.benchmark(group="single set")
def test_single_set(benchmark, col):
    items = _items(col, "ps", 1)
    bad = benchmark(col.loop_set, items)
    assert bad == 0, "set not acknowledged"
    assert col.read_back([items[0][0]]) == dict(items)


@pytest.mark.benchmark(group="get_multi 1000")
def test_get_multi_1000(benchmark, col):
    items = _items(col, "pm", 1000)
    mapping = dict(items)
    assert col.stored_ok(col.set_multi(mapping), 1000)
    keys = [k for k, _ in items]
    res = benchmark(col.get_multi, keys)
    got = col.decode_get(res, keys)
    assert got == mapping, diff(got, mapping)


@pytest.mark.benchmark(group="set_multi 1000")
def test_set_multi_1000(benchmark, col):
    mapping = dict(_items(col, "pn", 1000))
    res = benchmark(col.set_multi, mapping)
    assert col.stored_ok(res, 1000), str(res)[:100]
    got = col.read_back(list(mapping))
    assert got == mapping, diff(got, mapping)


@pytest.mark.benchmark(group="delete_multi 1000")
def test_delete_multi_1000(benchmark, col):
    mapping = dict(_items(col, "pd", 1000))
    keys = list(mapping)

    def setup():
        assert col.stored_ok(col.set_multi(mapping), 1000)
        return (keys,), {}

    rounds = 5 if col.name.startswith("pylibmc") else 30  # pylibmc deletes one key at a time
    res = benchmark.pedantic(col.delete_multi, setup=setup, rounds=rounds)
    assert col.deleted_ok(res, 1000), str(res)[:100]
    assert not col.read_back(keys)
