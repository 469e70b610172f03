"""Fixtures of the fault suite (``mcd``, a real memcached of the test's own, is in
tests/conftest.py)."""

import pytest
from fakes import FakeMemcached


@pytest.fixture
def fake():
    """A scriptable fake memcached (see fakes.FakeMemcached) for one test."""
    with FakeMemcached() as f:
        yield f
