"""pylibmc 1.6.3's own test suite passes with fastmc standing in for pylibmc: its tests/ (41
tests, among them test_cmemcached and the ElastiCache autoconf tests) and the doctests of its
modules' docstrings. The suite talks to memcached on 127.0.0.1:11211 (the autoconf tests know no
other address), so a memcached is started there for it."""

import os
import pathlib
import subprocess
import sys

import pytest
from memcached import Memcached
from pylibmc_suite import fetch_sdist
from sdists import run_pytest

SUPPORT = pathlib.Path(__file__).resolve().parent.parent / "support"


@pytest.fixture(scope="module")
def sdist():
    return fetch_sdist()


@pytest.fixture(scope="module")
def on_11211():
    m = Memcached(port=11211)
    yield m
    m.stop()


def test_pylibmc_test_suite(sdist, on_11211, tmp_path):
    (tmp_path / "tests").symlink_to(sdist / "tests")
    (tmp_path / "conftest.py").write_text("import fastmc\n\nfastmc.install_as_pylibmc()\n")
    env = dict(os.environ, MEMCACHED_HOST="127.0.0.1", MEMCACHED_PORT="11211")
    rc, out, summary = run_pytest(tmp_path, ["tests"], env)
    assert rc == 0, out[-5000:]
    assert summary.startswith("41 passed"), summary


def test_pylibmc_module_doctests(sdist, on_11211):
    r = subprocess.run(
        [
            sys.executable,
            str(SUPPORT / "pylibmc_suite.py"),
            "doctests",
            str(sdist / "src" / "pylibmc"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "failed" in r.stdout and ", 0 failed" in r.stdout, r.stdout
