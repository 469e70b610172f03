"""Fixtures shared by several test modules."""

import pytest

from memcached_proc import Memcached
from minimemcached import Relay


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
def relayed():
    """A real memcached behind a relay that records what the client sends: (server, relay)."""
    m = Memcached()
    r = Relay(m.port)
    yield m, r
    r.close()
    m.stop()
