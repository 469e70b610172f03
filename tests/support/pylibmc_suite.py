"""pylibmc 1.6.3's own test suite, run with fastmc installed as pylibmc: its sdist is fetched
from PyPI at test time (BSD-licensed; not vendored), unpacked under the virtualenv, and run in
a child process (``install_as_pylibmc`` replaces the modules named pylibmc there, not here).

``python pylibmc_suite.py doctests SRC`` runs the doctests in the docstrings of pylibmc's own
modules (``SRC`` is its ``src/pylibmc``) against fastmc; the pytest side runs its ``tests/``."""

from __future__ import annotations

import ast
import doctest
import importlib
import pathlib
import sys

from sdists import unpacked

VERSION = "1.6.3"


def fetch_sdist() -> pathlib.Path:
    """pylibmc's unpacked sdist (downloaded once, kept under the virtualenv)."""
    return unpacked("pylibmc", VERSION)


def run_module_doctests(src: pathlib.Path) -> tuple[int, int]:
    """(attempted, failed) over the doctests of every docstring in ``src/*.py``."""
    import fastmc

    fastmc.install_as_pylibmc()
    attempted = failed = 0
    for path in sorted(src.glob("*.py")):
        name = "pylibmc" if path.stem == "__init__" else "pylibmc." + path.stem
        try:
            module_globals = dict(vars(importlib.import_module(name)))
        except ImportError:
            module_globals = {}
        tree = ast.parse(path.read_text())
        defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        for node in [tree, *(n for n in ast.walk(tree) if isinstance(n, defs))]:
            doc = ast.get_docstring(node, clean=False)
            if not doc or ">>>" not in doc:
                continue
            where = "%s.%s" % (name, getattr(node, "name", "<module>"))
            test = doctest.DocTestParser().get_doctest(
                doc, dict(module_globals), where, str(path), getattr(node, "lineno", 0)
            )
            result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
            attempted += result.attempted
            failed += result.failed
    return attempted, failed


if __name__ == "__main__" and sys.argv[1:2] == ["doctests"]:
    tried, bad = run_module_doctests(pathlib.Path(sys.argv[2]))
    print("doctests: %d attempted, %d failed" % (tried, bad))
    sys.exit(1 if bad or not tried else 0)
