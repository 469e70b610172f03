"""Cheap packaging checks for CI: the sdist builds and carries everything a wheel build needs with
complete metadata; the extension links no system library beyond the C runtime; the typed usage
example runs. (Building wheels from the sdist is a multi-minute compile: see docs/integrations.md
for the manual checks.)"""

import email
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import fastmc
import pytest
from memcached import Memcached

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    out = tmp_path_factory.mktemp("sdist")
    subprocess.run(
        [maturin, "sdist", "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (path,) = out.glob("fastmc-*.tar.gz")
    with tarfile.open(path) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        top = tar.getnames()[0].split("/", 1)[0]
        pkg_info = tar.extractfile(top + "/PKG-INFO").read().decode()
    return names, email.message_from_string(pkg_info)


def test_sdist_has_every_source_file(sdist):
    names, _ = sdist
    git = subprocess.run(
        [
            "git",
            "ls-files",
            "src",
            "python",
            "Cargo.toml",
            "Cargo.lock",
            "pyproject.toml",
            "README.md",
            "LICENSE",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    tracked = git.stdout.split() if git.returncode == 0 else []
    if not tracked:  # not a git checkout: check the essentials only
        tracked = ["Cargo.toml", "Cargo.lock", "pyproject.toml", "src/lib.rs"]
    missing = sorted(set(tracked) - names)
    assert missing == []
    for needed in (
        "python/fastmc/_fastmc.pyi",
        "python/fastmc/py.typed",
        "LICENSE",
        "python/fastmc/django.py",
        "python/fastmc/__main__.py",
    ):
        assert needed in names


def test_sdist_metadata_is_complete(sdist):
    _, meta = sdist
    assert meta["Name"] == "fastmc"
    assert meta["Version"] == fastmc.__version__
    assert meta["Requires-Python"] == ">=3.9"
    assert meta["License"] == "MIT"
    assert meta["Summary"] and meta["Author"] and meta["Keywords"]
    classifiers = meta.get_all("Classifier")
    for minor in range(9, 14):
        assert "Programming Language :: Python :: 3.%d" % minor in classifiers
    assert "License :: OSI Approved :: MIT License" in classifiers
    assert "Typing :: Typed" in classifiers
    assert meta["Description-Content-Type"].startswith("text/markdown")
    readme = (ROOT / "README.md").read_text()
    assert meta.get_payload().strip() == readme.strip()


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
