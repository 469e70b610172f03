"""Fixtures of the fault suite (``mcd``, a real memcached of the test's own, is in
tests/conftest.py).

Real memcached processes are killed, restarted and SIGSTOPped; the scriptable fake server
(fakes.FakeMemcached) produces the faults a real one cannot. Where another client is known to
have failed in a scenario, the docstring of the test that covers it says how (with the public
issue where there is one)."""

import pytest
from fakes import FakeMemcached


@pytest.fixture
def fake():
    """A scriptable fake memcached (see fakes.FakeMemcached) for one test."""
    with FakeMemcached() as f:
        yield f
