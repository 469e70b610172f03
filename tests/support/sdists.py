"""Other projects' own test suites, fetched from PyPI at test time (never vendored): ``unpacked``
downloads a project's sdist once into the virtualenv and returns its unpacked tree."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile


def unpacked(project: str, version: str, marker: str = "tests") -> pathlib.Path:
    """The unpacked sdist of ``project==version`` (downloaded on first use, kept under the
    virtualenv); ``marker`` is a path inside it that says the tree is complete."""
    cache = pathlib.Path(sys.prefix) / "sdists"
    tree = cache / f"{project}-{version}"
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
    with tarfile.open(cache / f"{project}-{version}.tar.gz") as tar:
        if hasattr(tarfile, "data_filter"):  # the safe extraction filter (3.12, backported)
            tar.extractall(cache, filter="data")
        else:
            tar.extractall(cache)
    return tree
