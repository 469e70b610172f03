"""Fixtures shared by the value tests (tests/api/test_value_policy.py, test_compression.py)."""

import fastmc
import pytest
from aio_blocking import Blocking


@pytest.fixture(params=["blocking", "aio"])
def make(request, server):
    """A maker of clients on the module's server with the options given: blocking fastmc, or
    fastmc.aio driven through a blocking facade; closed after the test."""
    made = []

    def client(**kwargs):
        if request.param == "blocking":
            c = fastmc.Client([server.address], **kwargs)
        else:
            c = Blocking([server.address], **kwargs)
        made.append(c)
        return c

    yield client
    for c in made:
        if isinstance(c, Blocking):
            c.close()
