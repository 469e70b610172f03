"""fastmc: a fast, thread-safe, drop-in replacement for pylibmc with a Rust core.

Use it as ``import fastmc as pylibmc``, or call :func:`install_as_pylibmc` before anything
imports ``pylibmc`` so that such code gets fastmc unchanged.
"""

from __future__ import annotations

import sys as _sys
import types as _types
from typing import Any as _Any

from . import _fastmc
from ._fastmc import *  # noqa: F403 (exceptions and constants, re-exported as pylibmc does)
from ._fastmc import __version__ as __version__
from ._fastmc import exceptions as exceptions
from .client import Client as Client
from .consts import distributions as distributions
from .consts import hashers as hashers
from .near import NearCache as NearCache
from .pools import ClientPool as ClientPool
from .pools import ThreadMappedPool as ThreadMappedPool

_pylibmc = _fastmc

# Server state changes are logged on the "fastmc" logger (fastmc._log, imported when fastmc
# first logs, with a NullHandler: as a library, nothing is printed unless the application
# configures logging). Nothing else a plain Client's get and set do not need is imported here:
# no asyncio, ssl, logging or importlib.abc (tests/platform/test_packaging.py).


def build_info() -> str:
    return (
        f"fastmc {__version__} (pylibmc 1.6.3 API, libmemcached 1.0.16 placement; "
        f"compression={_fastmc.support_compression}, sasl={_fastmc.support_sasl})"
    )


def install_as_pylibmc() -> None:
    """Register fastmc under the module names of pylibmc (``pylibmc``, ``_pylibmc`` and the
    ``pylibmc.*`` submodules), so that code doing ``import pylibmc`` gets fastmc.

    Call it before the code that imports pylibmc runs: modules that already imported the real
    pylibmc keep their reference to it.

    ``pylibmc`` is a module of its own that reads fastmc's names through (``pylibmc.Client is
    fastmc.Client``), with pylibmc's name and the pylibmc API version fastmc implements as
    ``__version__``; it is imported through the import system, so that the agents that patch
    pylibmc when it is imported (ddtrace under ``ddtrace-run``) patch it, and not fastmc.
    """
    import importlib
    import sys
    from importlib import machinery

    global _pylibmc_module
    if _pylibmc_module is None:
        _pylibmc_module = _PylibmcModule("pylibmc", __doc__)
        _pylibmc_module.__path__ = list(_sys.modules[__name__].__path__)
        _pylibmc_module.__version__ = _PYLIBMC_API_VERSION
    aliases: dict[str, _types.ModuleType] = {"pylibmc": _pylibmc_module, "_pylibmc": _fastmc}
    for sub in ("client", "consts", "pools", "test", "autoconf"):
        aliases["pylibmc." + sub] = importlib.import_module(__name__ + "." + sub)
    finder = _AliasFinder(aliases)
    standard = (machinery.BuiltinImporter, machinery.FrozenImporter, machinery.PathFinder)
    at = next((i for i, f in enumerate(sys.meta_path) if f in standard), len(sys.meta_path))
    sys.meta_path.insert(at, finder)  # after the hooks' finders, before the real pylibmc's
    try:
        for name, module in aliases.items():
            if sys.modules.get(name) is not module:
                sys.modules.pop(name, None)
                importlib.import_module(name)
    finally:
        sys.meta_path.remove(finder)


_PYLIBMC_API_VERSION = "1.6.3"
"""The pylibmc release whose API fastmc implements: ``pylibmc.__version__`` once installed."""


class _PylibmcModule(_types.ModuleType):
    """``pylibmc`` after :func:`install_as_pylibmc`: fastmc's names, read through; a name set on
    it (an agent's ``pylibmc.Client = TracedClient``) stays on it and leaves fastmc alone."""

    __version__: str

    def __getattr__(self, name: str) -> _Any:
        return getattr(_sys.modules[__name__], name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(_sys.modules[__name__])) | set(self.__dict__))


_pylibmc_module: _PylibmcModule | None = None


class _AliasFinder:
    """Finds the modules of :func:`install_as_pylibmc` under pylibmc's names: a meta path
    finder and its loader (the import system asks only for these methods; importlib.abc's base
    classes would import importlib.resources with every ``import fastmc``)."""

    def __init__(self, modules: dict[str, _types.ModuleType]) -> None:
        self.modules = modules
        self.specs: dict[str, _Any] = {}

    def find_spec(self, fullname: str, path: _Any = None, target: _Any = None) -> _Any:
        module = self.modules.get(fullname)
        if module is None:
            return None
        from importlib import util

        loader: _Any = self  # a loader by its methods, not by importlib.abc's class
        return util.spec_from_loader(fullname, loader, is_package=hasattr(module, "__path__"))

    def create_module(self, spec: _Any) -> _types.ModuleType:
        module = self.modules[spec.name]
        self.specs[spec.name] = module.__dict__.get("__spec__")
        return module

    def exec_module(self, module: _types.ModuleType) -> None:
        # fastmc's own modules keep their spec; the pylibmc module keeps the one it was given.
        spec = module.__spec__
        if spec is not None and self.specs.get(spec.name) is not None:
            module.__spec__ = self.specs[spec.name]


__all__ = [
    "hashers",
    "distributions",
    "Client",
    "ClientPool",
    "ThreadMappedPool",
    "NearCache",
    "build_info",
    "install_as_pylibmc",
] + [n for n in dir(_fastmc) if not n.startswith("_") and n != "client"]
