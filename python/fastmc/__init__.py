"""fastmc: a fast, thread-safe, drop-in replacement for pylibmc with a Rust core.

Use it as ``import fastmc as pylibmc``, or call :func:`install_as_pylibmc` before anything
imports ``pylibmc`` so that such code gets fastmc unchanged.
"""

import logging as _logging

from . import _fastmc
from ._fastmc import *  # noqa: F403 (exceptions and constants, re-exported as pylibmc does)
from ._fastmc import __version__ as __version__
from ._fastmc import exceptions as exceptions
from .client import Client as Client
from .consts import distributions as distributions
from .consts import hashers as hashers
from .pools import ClientPool as ClientPool
from .pools import ThreadMappedPool as ThreadMappedPool

_pylibmc = _fastmc

# Server state changes are logged on the "fastmc" logger; as a library, nothing is printed
# unless the application configures logging (Python's convention for libraries).
_logging.getLogger("fastmc").addHandler(_logging.NullHandler())


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
    """
    import importlib
    import sys

    this = sys.modules[__name__]
    sys.modules["pylibmc"] = this
    sys.modules["_pylibmc"] = _fastmc
    for sub in ("client", "consts", "pools", "test", "autoconf"):
        sys.modules["pylibmc." + sub] = importlib.import_module(__name__ + "." + sub)


__all__ = [
    "hashers",
    "distributions",
    "Client",
    "ClientPool",
    "ThreadMappedPool",
    "build_info",
    "install_as_pylibmc",
] + [n for n in dir(_fastmc) if not n.startswith("_") and n != "client"]
