"""Fixtures for every test directory.

The suite, by topic (run ``pytest tests``; real memcached processes are started as needed):

- ``api/``: what the client does against healthy servers, compared with real pylibmc where it
  can be: the differential cases (text and binary protocol), the meta-protocol batches, noreply,
  hostile input (keys, values, integers, times), server addresses and key placement;
- ``aio/``: the asyncio client: every differential case against the blocking client, shared
  values and placement, and its faults (stopped servers, cancellation storms, loops, forks);
- ``faults/``: what it guarantees when servers misbehave: broken replies, timeouts, dead
  servers, restarts, forks and interruptions, threads and big batches, and the long soak test
  (marked ``soak``, off by default);
- ``platform/``: SASL and TLS, the frameworks (Django, Flask-Caching, dogpile.cache), the
  tracers (OpenTelemetry, ddtrace), the command line and the packaging;
- ``support/`` (on pytest's pythonpath, imported by bare name): ``memcached`` starts real
  servers, ``fakes`` the in-process fake ones, ``threads`` runs workers and forked children,
  ``cases`` holds the differential cases, ``checks`` shared client settings and counts,
  ``aio_blocking`` drives the asyncio client from synchronous code, ``dnsmasq`` a real DNS
  server for the DNS discovery tests.

The directories are not packages (pytest imports each test file by its bare name), so a test
file's name must be unique across all of them. The Rust files here (``*.rs``) are cargo's
integration tests, and ``data/`` holds the golden placement vectors both suites read.
"""

import pytest
from dnsmasq import LOOPBACKS, DnsMasq, port_free_everywhere
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


@pytest.fixture(scope="module")
def pods():
    """A memcached on each of 127.0.0.1-127.0.0.4, one port for all (the pods of a
    StatefulSet, as a headless Service's DNS shows them): the port."""
    port = port_free_everywhere()
    procs = [Memcached(host=ip, port=port) for ip in LOOPBACKS]
    yield port
    for p in procs:
        p.stop()


@pytest.fixture
def dns():
    """dnsmasq on a free loopback port, with no records yet (`DnsMasq.set_hosts`)."""
    d = DnsMasq()
    yield d
    d.close()


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
