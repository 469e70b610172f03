"""Fixtures for every test directory. The helpers they build on live in tests/support/ (on
pytest's pythonpath): memcached.py starts real servers, fakes.py the in-process fake ones."""

import pytest
from fakes import Relay
from memcached import Memcached


@pytest.fixture(scope="module")
def server():
    """One real memcached for a test module."""
    p = Memcached()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def servers():
    """Three real memcached processes for a test module: their addresses."""
    procs = [Memcached() for _ in range(3)]
    yield [p.address for p in procs]
    for p in procs:
        p.stop()


@pytest.fixture
def mcd():
    """A real memcached of the test's own, which it may stop, restart or SIGSTOP."""
    p = Memcached()
    yield p
    p.stop()


@pytest.fixture
def relayed():
    """A real memcached behind a relay that records what the client sends: (server, relay)."""
    m = Memcached()
    r = Relay(m.port)
    yield m, r
    r.close()
    m.stop()
