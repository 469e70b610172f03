"""fastmc's pytest plugin: fixtures for tests of code that caches with fastmc.

Installed as the ``pytest11`` entry point ``fastmc.testing.plugin`` (named as the module, so
that ``-p fastmc.testing.plugin`` or ``pytest_plugins`` load it once), it only defines
fixtures: no server starts and no socket opens until a test asks for one (loading it imports
fastmc, as a test module importing fastmc would). ``-p no:fastmc.testing.plugin`` turns it off.

- ``fastmc_fake_server``: a fresh ``FakeServer`` for the test (closed after it);
- ``fastmc_fake``: a ``fastmc.Client`` on that fake; the fake is its ``fake`` attribute
  (``fastmc_fake.fake.advance(60)``);
- ``fastmc_fake_aio``: a ``fastmc.aio.Client`` on that fake (its ``fake`` attribute too), for
  coroutine tests;
- ``fastmc_server``: a ``fastmc.Client`` on a real memcached, one for the session on a free
  loopback port, flushed before each test; the test is skipped where memcached is not
  installed (``MEMCACHED`` names the binary, else ``memcached`` on ``PATH``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from . import FakeServer

__all__ = ["fastmc_fake", "fastmc_fake_aio", "fastmc_fake_server", "fastmc_server"]


@pytest.fixture
def fastmc_fake_server() -> Iterator[FakeServer]:
    """A fresh in-process fake memcached for one test."""
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def fastmc_fake(fastmc_fake_server: FakeServer) -> Any:
    """A ``fastmc.Client`` on a fresh fake memcached (the fake: its ``fake`` attribute)."""
    client = fastmc_fake_server.client()
    client.fake = fastmc_fake_server
    return client


@pytest.fixture
def fastmc_fake_aio(fastmc_fake_server: FakeServer) -> Any:
    """A ``fastmc.aio.Client`` on a fresh fake memcached (the fake: its ``fake`` attribute)."""
    client = fastmc_fake_server.aio_client()
    client.fake = fastmc_fake_server
    return client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"version\r\n")
            return s.recv(64).startswith(b"VERSION")
    except OSError:
        return False


@pytest.fixture(scope="session")
def _fastmc_memcached() -> Iterator[str]:
    """A real memcached on a free loopback port for the session: its address."""
    binary = os.environ.get("MEMCACHED") or shutil.which("memcached")
    if not binary:
        pytest.skip("memcached is not installed (set MEMCACHED or put it on PATH)")
    port = _free_port()
    cmd = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "64"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd += ["-u", "nobody"]  # memcached refuses to run as root without a user
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("memcached (%s) did not start on port %d" % (binary, port))
            time.sleep(0.02)
        yield "127.0.0.1:%d" % port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def fastmc_server(_fastmc_memcached: str) -> Any:
    """A ``fastmc.Client`` on a real memcached, flushed for this test."""
    from fastmc import Client

    client = Client([_fastmc_memcached])
    client.flush_all()
    return client
