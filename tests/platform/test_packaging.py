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


# What `import fastmc`, a plain Client's get and set, and `install_as_pylibmc()` must leave
# unimported: each is paid by every process that starts (a CLI run, a serverless cold start, a
# `manage.py` command), and is imported when first used instead.
NOT_AT_IMPORT = (
    "asyncio",
    "ssl",
    "logging",
    "inspect",
    "importlib.abc",
    "importlib.resources",
    "tempfile",
    "subprocess",
    "pathlib",
    "fastmc.aio",
    "fastmc.autodiscovery",
    "fastmc._clusterconfig",
    "fastmc._log",
    "fastmc.django",
    "fastmc.dogpile",
    "fastmc.aiocache",
    "fastmc.opentelemetry",
    "fastmc.prometheus",
    "fastmc.testing",
    "fastmc._formats",
    "fastmc.dnsdiscovery",
    "dns",
    "json",
    "orjson",
    "msgpack",
)

_IMPORTED = """
import sys
import fastmc
step = sys.argv[1]
if step != "import":
    mc = fastmc.Client([sys.argv[2]])
    assert mc.set("lazy", "v") and mc.get("lazy") == "v" and mc.get_multi(["lazy"]) == {"lazy": "v"}
    assert mc.get_or_set("lazy:gos", lambda: "w", 10) == "w" == mc.get("lazy:gos")
if step == "install":
    fastmc.install_as_pylibmc()
    import pylibmc, pylibmc.autoconf, pylibmc.pools, pylibmc.test
    assert pylibmc.Client is fastmc.Client
print(" ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("step", ["import", "get and set", "install"])
def test_import_leaves_out_what_a_plain_client_does_not_need(server, step):
    out = subprocess.run(
        [sys.executable, "-I", "-c", _IMPORTED, step, server.address],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert "fastmc._fastmc" in out
    loaded = sorted(m for m in NOT_AT_IMPORT if m in out)
    assert loaded == [], loaded


def test_what_is_left_out_is_there_when_first_used():
    code = """
import sys
import fastmc
fastmc.install_as_pylibmc()
import pylibmc.autoconf
from pylibmc.autoconf import UnsupportedAutoconfMethod
assert issubclass(pylibmc.autoconf.NoAutoconfFound, Exception)
assert UnsupportedAutoconfMethod.__module__ == "fastmc.autodiscovery"
assert "fastmc._clusterconfig" in sys.modules
import logging
import fastmc._log
assert fastmc._log.LOGGER is logging.getLogger("fastmc")
assert [type(h) for h in fastmc._log.LOGGER.handlers] == [logging.NullHandler]
"""
    subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=60)
