"""Other projects' own test suites, fetched from PyPI at test time (never vendored): ``unpacked``
downloads a project's sdist once into the virtualenv and returns its unpacked tree;
``run_pytest`` runs such a suite in a child process, free of this suite's pytest settings."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile

# pytest options that leave out this suite's own settings (its addopts and warning filters)
_CLEAN = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "-o", "filterwarnings="]


def unpacked(
    project: str, version: str, marker: str = "tests", dist: str | None = None
) -> pathlib.Path:
    """The unpacked sdist of ``project==version`` (downloaded on first use, kept under the
    virtualenv); ``marker`` is a path inside it that says the tree is complete; ``dist`` is the
    sdist's own name where it differs from the project's (``dogpile_cache``)."""
    cache = pathlib.Path(sys.prefix) / "sdists"
    dist = dist or project
    tree = cache / f"{dist}-{version}"
    if (tree / marker).exists():
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-binary",
            ":all:",
            "--no-deps",
            f"{project}=={version}",
            "-d",
            str(cache),
        ],
        check=True,
    )
    with tarfile.open(cache / f"{dist}-{version}.tar.gz") as tar:
        if hasattr(tarfile, "data_filter"):  # the safe extraction filter (3.12, backported)
            tar.extractall(cache, filter="data")
        else:
            tar.extractall(cache)
    return tree


def run_pytest(
    root: pathlib.Path, args: list[str], env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """``pytest`` in a child process rooted at ``root``: (return code, output, its last line)."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", *_CLEAN, "--rootdir", str(root), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr
    return r.returncode, out, last
