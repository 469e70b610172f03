"""What a client does with pickled values: pylibmc's way (unpickle anything), refuse pickles,
read only signed ones, or unpickle through an allow list of classes. See docs/security.md.

Both clients take the same keyword arguments (``fastmc.Client`` and ``fastmc.aio.Client``)::

    fastmc.Client(servers, pickle="refuse")
    fastmc.Client(servers, pickle="signed", signing_keys=[current, *older])
    fastmc.Client(servers, pickle_classes=[datetime.date, "decimal.Decimal"])

and each argument left out takes its default from the environment, so that code that builds its
own client (Flask-Caching, Django's ``PyLibMCCache``, dogpile) gets the policy without a change:

- ``FASTMC_PICKLE``: ``allow`` (the default: pylibmc's behaviour), ``refuse`` or ``signed``;
- ``FASTMC_SIGNING_KEYS``: the signing keys, separated by commas, the current one first;
- ``FASTMC_ACCEPT_UNSIGNED_PICKLES``: ``1`` to read unsigned pickles too in ``signed`` mode
  (while a fleet migrates);
- ``FASTMC_PICKLE_CLASSES``: the allow list, dotted names separated by commas.
"""

from __future__ import annotations

import io
import os
import pickle as _pickle
from collections.abc import Iterable
from typing import Any, Callable, Union

from . import _fastmc

__all__ = ["RefusedValueError", "allow_list_loads", "policy_arguments"]

RefusedValueError = _fastmc.RefusedValueError

# What protocol 0 to 3 pickles of plain values name (protocol 4 and 5, pylibmc's default, name
# none of them): always allowed, as they run no code of their own.
_PLAIN = frozenset(
    ("builtins", n) for n in ("set", "frozenset", "bytearray", "complex", "slice", "range")
)

_Class = Union[type, str]


def _dotted(cls: _Class) -> tuple[str, str]:
    if isinstance(cls, str):
        module, dot, name = cls.rpartition(".")
        if not dot or not module or not name:
            raise ValueError("pickle_classes: %r is not a dotted module.Name" % (cls,))
        return module, name
    if isinstance(cls, type):
        return cls.__module__, cls.__qualname__
    raise TypeError("pickle_classes takes classes or dotted names, not %r" % (cls,))


class _AllowListUnpickler(_pickle.Unpickler):
    def __init__(self, data: bytes, allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            raise RefusedValueError(
                "value refused: its pickle names %s.%s, which is not in pickle_classes"
                % (module, name)
            )
        return super().find_class(module, name)


def allow_list_loads(classes: Iterable[_Class]) -> Callable[[bytes], Any]:
    """A ``pickle.loads`` that builds only the listed classes (and plain containers): a pickle
    that names anything else (a function, ``os.system``, a class not listed) raises
    :class:`RefusedValueError` before it is called."""
    allowed = _PLAIN | {_dotted(c) for c in classes}

    def loads(data: bytes) -> Any:
        return _AllowListUnpickler(data, allowed).load()

    return loads


def _env_list(name: str) -> list[str]:
    return [p.strip() for p in os.environ.get(name, "").split(",") if p.strip()]


def policy_arguments(
    pickle: str | None,
    pickle_classes: Iterable[_Class] | None,
    signing_keys: Iterable[str | bytes] | None,
    accept_unsigned_pickles: bool | None,
) -> dict[str, Any]:
    """The native constructor's value-policy arguments; ``None`` takes the environment's."""
    if pickle is None:
        pickle = os.environ.get("FASTMC_PICKLE", "").strip() or "allow"
    if signing_keys is None:
        signing_keys = _env_list("FASTMC_SIGNING_KEYS")
    if isinstance(signing_keys, (str, bytes)):
        raise TypeError("signing_keys takes a list of keys (the current one first), not one key")
    keys = [k.encode() if isinstance(k, str) else bytes(k) for k in signing_keys]
    if accept_unsigned_pickles is None:
        accept_unsigned_pickles = os.environ.get("FASTMC_ACCEPT_UNSIGNED_PICKLES", "") == "1"
    if pickle_classes is None:
        pickle_classes = _env_list("FASTMC_PICKLE_CLASSES") or None
    return {
        "pickle": pickle,
        "signing_keys": keys,
        "accept_unsigned_pickles": accept_unsigned_pickles,
        "pickle_loads": None if pickle_classes is None else allow_list_loads(pickle_classes),
    }
