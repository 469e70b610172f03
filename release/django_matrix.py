"""Django's own cache tests on each Django that fastmc supports, each on a CPython it supports
(`make django-matrix`; `make test` runs Django 5.2 on the venv's CPython 3.11 already):

    python release/django_matrix.py [5.2 6.0 6.1]

For each Django: a debug wheel of the tree for that CPython (pyenv's), a fresh virtualenv that
installs it and the newest release of that Django from PyPI, Django's tests from that release's
sdist, and its `PyLibMCCacheTests` run by Django's own runner twice over, as in
tests/platform/test_django_suite.py: on Django's PyLibMCCache with fastmc installed as pylibmc,
and on fastmc.django.FastMCCache. Exit status 0 when every one passed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from ends import build  # (first: it imports wheels, which puts tests/support on the path)
from memcached import Memcached
from wheels import ROOT, find_python, fresh_venv, pip_install, say

# What pip needs from this machine's environment to reach PyPI (a proxy's CA, a mirror); the
# venvs are otherwise isolated from it (wheels.fresh_venv).
PYPI_ENV = (
    "PIP_CERT",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_DEFAULT_TIMEOUT",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
)
# Each Django, and the CPython it runs on here (Django 6 needs 3.12 or later).
MATRIX = {"5.2": "3.12", "6.0": "3.12", "6.1": "3.13"}
SUITE = ROOT / "tests" / "support" / "django_suite"


def newest(venv_python: Path, env: dict, series: str) -> str:
    """The newest release of Django `series` on PyPI, as pip sees it for this Python."""
    out = subprocess.run(
        [str(venv_python), "-m", "pip", "index", "versions", "django"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"Available versions: (.*)", out)
    assert found, out
    for v in found.group(1).split(", "):
        if v == series or v.startswith(series + "."):
            return v
    raise RuntimeError(f"no Django {series} on PyPI for this Python")


def django_tests(venv_python: Path, env: dict, version: str, tmp: Path) -> Path:
    """Django's tests/ from its sdist."""
    subprocess.run(
        [
            *(str(venv_python), "-m", "pip", "download", "-q", "--no-binary", ":all:"),
            *("--no-deps", f"django=={version}", "-d", str(tmp)),
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    (sdist,) = tmp.glob(f"[dD]jango-{version}.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    return next(tmp.glob("[dD]jango-*/tests"))


def run_suite(venv_python: Path, env: dict, tests: Path, server: str) -> str:
    r = subprocess.run(
        [
            *(str(venv_python), "runtests.py", "--settings=fastmc_settings", "--parallel=1"),
            *("-v", "2", "cache.tests.PyLibMCCacheTests", "fastmc_cache_tests"),
        ],
        cwd=tests,
        env=dict(env, FASTMC_MEMCACHED=server, PYTHONPATH=f"{SUITE}{os.pathsep}{tests}"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = r.stdout + r.stderr
    ran = re.search(r"Ran (\d+) tests", out)
    ours = out.count("(fastmc_cache_tests.FastMCCacheTests.")
    if r.returncode != 0 or not ran or "\nOK" not in out or 2 * ours != int(ran.group(1)):
        raise RuntimeError(f"Django's cache tests failed:\n{out[-4000:]}")
    return "%s tests, %s" % (ran.group(1), out[out.rindex("\nOK") + 1 :].splitlines()[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("series", nargs="*", default=list(MATRIX))
    args = ap.parse_args()
    problems = []
    server = Memcached()
    wheels: dict[str, tuple[Path, str]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="fastmc-django-") as tmpdir:
            tmp = Path(tmpdir)
            for series in args.series:
                minor = MATRIX.get(series)
                python = find_python(minor) if minor else None
                if python is None:
                    problems.append(f"Django {series}: no CPython {minor} (pyenv install it)")
                    continue
                t0 = time.monotonic()
                work = tmp / f"django{series}"
                work.mkdir()
                try:
                    if minor not in wheels:
                        out = tmp / f"wheel{minor}"
                        wheels[minor] = (out, build(python, out))
                    out, version = wheels[minor]
                    venv_python, env = fresh_venv(python, work / "venv")
                    pip_install(venv_python, env, out, version, work)
                    env.update({k: os.environ[k] for k in PYPI_ENV if k in os.environ})
                    django = newest(venv_python, env, series)
                    subprocess.run(
                        [str(venv_python), "-m", "pip", "install", "-q", f"django=={django}"],
                        env=env,
                        check=True,
                        capture_output=True,
                    )
                    line = run_suite(
                        venv_python,
                        env,
                        django_tests(venv_python, env, django, work),
                        server.address,
                    )
                except (RuntimeError, subprocess.CalledProcessError) as e:
                    problems.append(f"Django {series} on CPython {minor}: {e}")
                    continue
                say(f"Django {django} on CPython {minor}: {line} ({time.monotonic() - t0:.0f} s)")
    finally:
        server.stop()
    for p in problems:
        say(f"FAILED: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
