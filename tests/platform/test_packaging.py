"""Cheap packaging checks for CI: the sdist and a wheel built from the working tree hold exactly
what they must (the package, the .pyi stub and py.typed, the license, complete metadata with the
one version; the rules are release/wheelcheck.py's, which `make wheels` applies to the release
files); the extension links no system library beyond the C runtime; the typed usage example runs.
(The release wheels are built and checked by `make wheels`: docs/packaging.md.)"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fastmc
import pytest
import wheelcheck
from memcached import Memcached

ROOT = Path(__file__).resolve().parents[2]


def _maturin(*args, out):
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    subprocess.run(
        [maturin, *args, "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=600
    )


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    if os.environ.get("FASTMC_TEST_SDIST"):  # the file under test, given (release/sid.py)
        return Path(os.environ["FASTMC_TEST_SDIST"])
    out = tmp_path_factory.mktemp("sdist")
    _maturin("sdist", out=out)
    (path,) = out.glob("fastmc-*.tar.gz")
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    # The wheel under test when one is given: release/sid.py runs the suite on an installed
    # wheel, where no cargo is at hand to build one.
    if os.environ.get("FASTMC_TEST_WHEEL"):
        return Path(os.environ["FASTMC_TEST_WHEEL"])
    # The debug profile `make develop` has just built, so this only packs it (about a second).
    out = tmp_path_factory.mktemp("wheel")
    _maturin("build", out=out)
    (path,) = out.glob("fastmc-*.whl")
    return path


def test_sdist_holds_what_a_build_needs_and_nothing_else(sdist):
    assert wheelcheck.sdist_problems(sdist) == []


def test_wheel_holds_the_package_stubs_license_and_metadata(wheel):
    assert wheelcheck.wheel_problems(wheel) == []


def test_version_has_one_source(wheel):
    # Cargo.toml's version is the extension's __version__ and the wheel's (pyproject.toml
    # declares it dynamic)
    assert fastmc.__version__ == wheelcheck.cargo_version()
    assert wheel.name.split("-")[1] == fastmc.__version__


def test_extension_needs_no_system_library():
    ldd = shutil.which("ldd")
    assert ldd, "ldd (Debian's libc-bin) is needed for this check"
    out = subprocess.run(
        [ldd, fastmc._fastmc.__file__], capture_output=True, text=True, check=True
    ).stdout
    libs = {line.split()[0] for line in out.splitlines() if line.strip()}
    allowed = (
        "linux-vdso",
        "libc.so",
        "libm.so",
        "libgcc_s.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "ld-linux",
        "/lib64/ld-linux",
        "libutil.so",
    )
    unexpected = sorted(lib for lib in libs if not lib.startswith(allowed))
    assert unexpected == []  # no libmemcached, libssl, libz, libsasl


def test_typed_usage_example_runs():
    server = Memcached()
    try:
        r = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "typed_usage.py"), server.address],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("hello True [] [b'zz']")
