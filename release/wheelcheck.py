"""What a fastmc wheel and sdist must hold, as functions that list the problems found (an empty
list: the file is right). `make wheels` (release/wheels.py) applies them to every release file,
and `make test` to a wheel built from the working tree (tests/platform/test_packaging.py), so the
rules live in one place. Standard library only: this runs in CI's test venv and under any CPython
3.9 to 3.15."""

from __future__ import annotations

import configparser
import email.message
import email.parser
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# 3.14 and 3.15: where this machine lacks them, release/wheels.py runs Debian's (release/sid.py)
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
# The free-threaded builds a wheel is made for as well (cp314t, cp315t): built against maturin's
# own record of their configuration where no such interpreter can be had (docs/packaging.md).
FREE_THREADED = ("3.14", "3.15")
# PyPy: the interpreter the PyPy wheel is built with and run on (Debian unstable's `pypy3`,
# release/sid.py), its wheel's tags, and the one target it is built for.
PYPY = "pypy3"
PYPY_TAGS = "pp311-pypy311_pp80"
PYPY_TARGET = "x86_64-unknown-linux-gnu"

# The extension module: per-version (cpython-313-x86_64-linux-gnu, cpython-314t-...), PyPy's
# (pypy311-pp80-x86_64-linux-gnu), abi3, or macOS (darwin).
EXTENSION = re.compile(
    r"^fastmc/_fastmc\.(cpython-3\d+t?-[a-z0-9_-]+|pypy3\d+-pp\d+-[a-z0-9_-]+|abi3)\.so$"
)


def soabi(python_tag: str, abi_tag: str) -> str:
    """The start of the extension's SOABI a wheel's tags call for: cpython-313, cpython-314t
    (free-threaded), pypy311-pp80, or abi3."""
    if abi_tag == "abi3":
        return "abi3"
    if python_tag.startswith("pp"):
        return abi_tag.replace("_", "-")
    return f"cpython-{abi_tag[2:]}"


def cargo_version() -> str:
    """The version, from its single source: [package] version in Cargo.toml (pyproject.toml
    declares it dynamic; the extension reports it as fastmc.__version__)."""
    text = (ROOT / "Cargo.toml").read_text()
    package = text.split("[package]", 1)[1].split("\n[", 1)[0]
    match = re.search(r'^version\s*=\s*"([^"]+)"', package, re.M)
    if not match:
        raise RuntimeError("no version in Cargo.toml's [package]")
    return match.group(1)


def source_files(*paths: str) -> set[str]:
    """The files git tracks under `paths` (relative to the repository), or, outside a git
    checkout (or without git, as in release/sid.py's root), what is on disk there (caches and
    build outputs left out)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", *paths], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        if out:
            return set(out)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = set()
    for p in paths:
        base = ROOT / p
        for f in [base] if base.is_file() else base.rglob("*"):
            # caches and build outputs (`maturin develop` leaves the extension in python/fastmc)
            if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".so"):
                found.add(f.relative_to(ROOT).as_posix())
    return found


# The operating systems wheels are built and checked for (docs/packaging.md): a classifier may
# name these and no other.
OPERATING_SYSTEMS = {"Operating System :: POSIX :: Linux", "Operating System :: MacOS"}

# Named explicitly too, so that losing one from the repository fails the checks as well.
TYPING = {"fastmc/_fastmc.pyi", "fastmc/py.typed"}


def package_files() -> set[str]:
    """The Python package as it must appear in a wheel: fastmc/<file> for every file of
    python/fastmc (modules, the _fastmc.pyi stub, py.typed)."""
    return TYPING | {f.split("/", 1)[1] for f in source_files("python/fastmc")}


def metadata_problems(meta: email.message.Message, version: str) -> list[str]:
    """Core metadata (a wheel's METADATA or an sdist's PKG-INFO) against pyproject.toml's promises."""
    problems = []
    expect = {
        "Name": "fastmc",
        "Version": version,
        "Requires-Python": ">=3.9",
        "License": "MIT",
    }
    for field, value in expect.items():
        if meta.get(field) != value:
            problems.append(f"metadata {field} is {meta.get(field)!r}, not {value!r}")
    for field in ("Summary", "Author", "Keywords"):
        if not meta.get(field):
            problems.append(f"metadata {field} is empty")
    if not (meta.get("Description-Content-Type") or "").startswith("text/markdown"):
        problems.append("metadata: the README is not declared as Markdown")
    if "Project-URL" in meta or "Home-page" in meta:
        problems.append("metadata names a URL; the project has no public home yet")
    classifiers = meta.get_all("Classifier") or []
    for minor in PYTHONS:
        if f"Programming Language :: Python :: {minor}" not in classifiers:
            problems.append(f"classifier for Python {minor} missing")
    for c in classifiers:
        # Only the platforms a wheel is built and checked for (docs/packaging.md).
        if c.startswith("Operating System ::") and c not in OPERATING_SYSTEMS:
            problems.append(f"classifier {c!r} claims a platform no wheel is built or tested for")
    for c in sorted(OPERATING_SYSTEMS - set(classifiers)):
        problems.append(f"classifier {c!r} missing")
        python = re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c)
        if python and python.group(1) not in PYTHONS:
            problems.append(f"classifier {c!r} claims an untested Python")
    for needed in ("License :: OSI Approved :: MIT License", "Typing :: Typed"):
        if needed not in classifiers:
            problems.append(f"classifier {needed!r} missing")
    if "django" not in (meta.get_all("Provides-Extra") or []):
        problems.append("the django extra is missing")
    return problems


def wheel_problems(path: Path, version: str | None = None) -> list[str]:
    """A wheel holds exactly the package (every file of python/fastmc, the stubs and py.typed
    among them), one extension module matching the wheel's tag, the license and complete
    metadata with the Cargo.toml version, and nothing else."""
    version = version or cargo_version()
    path = Path(path)
    name_parts = path.name[: -len(".whl")].split("-")
    if len(name_parts) != 5:
        return [f"{path.name}: not a wheel file name"]
    dist, wversion, python_tag, abi_tag, platform_tag = name_parts
    problems = []
    if (dist, wversion) != ("fastmc", version):
        problems.append(f"file name says {dist} {wversion}, not fastmc {version}")
    info = f"fastmc-{version}.dist-info/"
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        meta = email.parser.Parser().parsestr(zf.read(info + "METADATA").decode())
        wheel = email.parser.Parser().parsestr(zf.read(info + "WHEEL").decode())
        entry_points = zf.read(info + "entry_points.txt").decode()
        license_text = (
            zf.read(info + "licenses/LICENSE").decode()
            if (info + "licenses/LICENSE" in names)
            else ""
        )
    expected = package_files()
    extensions = sorted(n for n in names if EXTENSION.match(n))
    allowed = {
        *expected,
        *extensions,
        *(
            info + f
            for f in ("METADATA", "WHEEL", "RECORD", "entry_points.txt", "licenses/LICENSE")
        ),
    }
    missing = sorted(expected - names)
    if missing:
        problems.append(f"missing from the wheel: {missing}")
    stray = sorted(n for n in names - allowed if not n.startswith(info + "sboms/"))
    if stray:
        problems.append(f"stray files in the wheel: {stray}")
    if len(extensions) != 1:
        problems.append(f"expected one extension module, found {extensions}")
    else:
        (ext,) = extensions
        abi = soabi(python_tag, abi_tag)
        want = ".abi3.so" if abi == "abi3" else f".{abi}-"
        if want not in ext:
            problems.append(f"extension {ext} does not match the tag {python_tag}-{abi_tag}")
    if license_text.strip() != (ROOT / "LICENSE").read_text().strip():
        problems.append("the wheel's LICENSE is missing or differs from the repository's")
    problems += metadata_problems(meta, version)
    if wheel.get("Root-Is-Purelib") != "false":
        problems.append("WHEEL: Root-Is-Purelib is not false")
    tags = set(wheel.get_all("Tag") or [])
    named = {f"{python_tag}-{abi_tag}-{p}" for p in platform_tag.split(".")}
    if tags != named:
        problems.append(f"WHEEL tags {sorted(tags)} differ from the file name's {sorted(named)}")
    scripts = configparser.ConfigParser()
    scripts.read_string(entry_points)
    if scripts.get("console_scripts", "fastmc", fallback="").strip() != "fastmc.__main__:main":
        problems.append("the fastmc console script is not declared")
    return problems


# What an sdist may hold besides src/ and python/fastmc: what a build needs (Cargo.toml's
# `include` and maturin's additions). The tests stay out on purpose (docs/packaging.md).
SDIST_TOP = {"PKG-INFO", "pyproject.toml", "Cargo.toml", "Cargo.lock", "LICENSE", "README.md"}


def sdist_problems(path: Path, version: str | None = None) -> list[str]:
    """An sdist holds exactly PKG-INFO, the build files, the license, the README, every Rust
    source under src/ and every file of python/fastmc, under one fastmc-<version>/ directory:
    no build output, virtualenv, results, caches or tests."""
    version = version or cargo_version()
    top = f"fastmc-{version}/"
    problems = []
    with tarfile.open(path) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        names = {m.name for m in members}
        outside = sorted(n for n in names if not n.startswith(top))
        if outside:
            problems.append(f"files outside {top}: {outside}")
        rel = {n[len(top) :] for n in names if n.startswith(top)}
        pkg_info = tar.extractfile(top + "PKG-INFO") if top + "PKG-INFO" in names else None
        meta = email.parser.Parser().parsestr(pkg_info.read().decode()) if pkg_info else None
    expected = SDIST_TOP | source_files("src", "python/fastmc")
    expected |= {"python/" + f for f in TYPING}
    missing = sorted(expected - rel)
    if missing:
        problems.append(f"missing from the sdist: {missing}")
    stray = sorted(rel - expected)
    if stray:
        problems.append(f"stray files in the sdist: {stray}")
    if meta is None:
        problems.append("no PKG-INFO")
    else:
        problems += metadata_problems(meta, version)
        if meta.get_payload().strip() != (ROOT / "README.md").read_text().strip():
            problems.append("PKG-INFO's description is not the README")
    return problems
