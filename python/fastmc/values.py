"""What a client does with pickled values: pylibmc's way (unpickle anything), refuse pickles,
read only signed ones, or unpickle through an allow list of classes (docs/security.md); what it
stores structured values in: pickle as pylibmc, or JSON or msgpack under flags of their own
(docs/security.md#values-without-pickle); and how it compresses values: zlib as pylibmc, or
zstd when asked (docs/features.md#compression-zstd).

Both clients take the same keyword arguments (``fastmc.Client`` and ``fastmc.aio.Client``)::

    fastmc.Client(servers, pickle="refuse")
    fastmc.Client(servers, serializer="json", pickle="refuse")
    fastmc.Client(servers, pickle="signed", signing_keys=[current, *older])
    fastmc.Client(servers, pickle_classes=[datetime.date, "decimal.Decimal"])
    fastmc.Client(servers, compression="zstd", zstd_level=3, zstd_dict=dictionary)

and each argument left out takes its default from the environment, so that code that builds its
own client (Flask-Caching, Django's ``PyLibMCCache``, dogpile) gets the policy without a change:

- ``FASTMC_PICKLE``: ``allow`` (the default: pylibmc's behaviour), ``refuse`` or ``signed``;
- ``FASTMC_SIGNING_KEYS``: the signing keys, separated by commas, the current one first;
- ``FASTMC_ACCEPT_UNSIGNED_PICKLES``: ``1`` to read unsigned pickles too in ``signed`` mode
  (while a fleet migrates);
- ``FASTMC_PICKLE_CLASSES``: the allow list, dotted names separated by commas;
- ``FASTMC_SERIALIZER``: ``pickle`` (the default: pylibmc's), ``json`` or ``msgpack``;
- ``FASTMC_COMPRESSION``: ``zlib`` (the default: pylibmc's) or ``zstd``;
- ``FASTMC_ZSTD_LEVEL``, ``FASTMC_ZSTD_MIN_LEN``: ``zstd_level`` and ``zstd_min_len``;
- ``FASTMC_ZSTD_DICT_FILE``: the file that holds ``zstd_dict``.
"""

from __future__ import annotations

import io
import os
import pickle as _pickle
from collections.abc import Iterable
from typing import Any, Callable, Union

from . import _fastmc

__all__ = [
    "RefusedValueError",
    "allow_list_loads",
    "compression_arguments",
    "policy_arguments",
    "train_zstd_dict",
]

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
    # Set on each instance after construction: PyPy's Unpickler takes its file in __new__ as
    # well, so a subclass __init__ with other arguments would hand it the bytes.
    allowed: frozenset[tuple[str, str]] = frozenset()

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
        unpickler = _AllowListUnpickler(io.BytesIO(data))
        unpickler.allowed = allowed
        return unpickler.load()

    return loads


def _env_list(name: str) -> list[str]:
    return [p.strip() for p in os.environ.get(name, "").split(",") if p.strip()]


def policy_arguments(
    pickle: str | None,
    pickle_classes: Iterable[_Class] | None,
    signing_keys: Iterable[str | bytes] | None,
    accept_unsigned_pickles: bool | None,
    serializer: str | None = None,
) -> dict[str, Any]:
    """The native constructor's value-policy arguments; ``None`` takes the environment's."""
    if serializer is None:
        serializer = os.environ.get("FASTMC_SERIALIZER", "").strip() or "pickle"
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
        "serializer": serializer,
    }


def train_zstd_dict(samples: Iterable[bytes], size: int = 16 << 10) -> bytes:
    """A zstd dictionary of at most ``size`` bytes, trained on ``samples``: values like those it
    will compress (a few hundred or more; zstd's trainer refuses too few). Give it to every client
    as ``zstd_dict``; each value compressed with it names it, so that a client without it raises
    instead of misreading the value."""
    return _fastmc._zstd_train([bytes(s) for s in samples], size)


def _env_int(name: str) -> int | None:
    text = os.environ.get(name, "").strip()
    return int(text) if text else None


def compression_arguments(
    compression: str | None,
    zstd_level: int | None,
    zstd_dict: bytes | None,
    zstd_min_len: int | None,
) -> dict[str, Any]:
    """The native constructor's compression arguments; ``None`` takes the environment's."""
    if compression is None:
        compression = os.environ.get("FASTMC_COMPRESSION", "").strip() or "zlib"
    if zstd_level is None:
        zstd_level = _env_int("FASTMC_ZSTD_LEVEL")
    if zstd_min_len is None:
        zstd_min_len = _env_int("FASTMC_ZSTD_MIN_LEN")
    if zstd_dict is None:
        path = os.environ.get("FASTMC_ZSTD_DICT_FILE", "").strip()
        if path:
            with open(path, "rb") as f:
                zstd_dict = f.read()
    elif not isinstance(zstd_dict, (bytes, bytearray, memoryview)):
        raise TypeError("zstd_dict takes the dictionary's bytes, not %r" % (zstd_dict,))
    args: dict[str, Any] = {"compression": compression, "zstd_min_len": zstd_min_len or 0}
    if zstd_level is not None:
        args["zstd_level"] = zstd_level
    if zstd_dict is not None:
        args["zstd_dict"] = bytes(zstd_dict)
    return args
