"""Fixtures for the pytest-benchmark versions of the key scenarios (`pytest benches/`).

These are benchmarks, not tests: `pytest tests` never collects them (pyproject's testpaths is
`tests`). They start their own throwaway memcached and reuse the columns of the benchmark suite
(benches/mcbench: floor, fastmc, peers), so both measure the same thing the same way.

Environment: FASTMC_BENCH_MODULE as for bench.py (development aid: fill the fastmc column with a
stand-in such as pylibmc); FASTMC_BENCH_PIN=off to let the scheduler place client and server
(default: both pinned to one CPU, as bench.py does; see benches/README.md).
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mcbench.columns import PEER_MAKERS, PEERS, Floor, load_fastmc, make_fastmc
from mcbench.measure import pinned
from mcbench.servers import server_info, start_memcached

CLIENTS = ["floor text", "floor meta", "fastmc", *PEERS]


@pytest.fixture(scope="session")
def memcached():
    server = start_memcached()
    try:
        pids = [] if os.environ.get("FASTMC_BENCH_PIN", "auto") == "off" else [server.proc.pid]
        with pinned(pids):
            yield server.address
    finally:
        server.stop()  # also closes its stderr pipe


@pytest.fixture(scope="session")
def fastmc_module():
    return load_fastmc()  # (module or None, module name, error or None)


@pytest.fixture(scope="session")
def columns(memcached, fastmc_module):
    mod, modname, _err = fastmc_module
    cols = {}
    meta = server_info(memcached)["meta"]
    cols["floor text"] = Floor("floor text", "pt0", [memcached], "text", meta)
    if meta:
        cols["floor meta"] = Floor("floor meta", "pt1", [memcached], "meta", True)
    if mod is not None:
        cols["fastmc"] = make_fastmc(mod, modname, [memcached], "pt2")
    for i, name in enumerate(PEERS):
        cols[name] = PEER_MAKERS[name]([memcached], f"pt{3 + i}")
    yield cols
    for c in cols.values():
        c.close()


@pytest.fixture(params=CLIENTS)
def col(request, columns, fastmc_module):
    name = request.param
    if name not in columns:
        if name == "fastmc":
            pytest.skip(
                f"fastmc not importable: {fastmc_module[2]} "
                "(test_fastmc_is_importable fails for this)"
            )
        pytest.skip(f"{name} not available")
    return columns[name]
