"""fastmc.opentelemetry: OpenTelemetry client spans for ``fastmc.Client`` and ``fastmc.aio.Client``.

``pip install fastmc[opentelemetry]``; ``opentelemetry-instrument`` finds
:class:`FastMCInstrumentor` through the ``opentelemetry_instrumentor`` entry point, or::

    from fastmc.opentelemetry import FastMCInstrumentor
    FastMCInstrumentor().instrument()          # tracer_provider=..., capture_keys=False

Each public call that talks to a server makes one CLIENT span, named after the method
(``get``, ``get_multi``, ...), with the database-client attributes of the semantic conventions
(docs/operations.md lists them). The methods are wrapped at the Python level, on the classes,
only while instrumented: an application that never instruments runs the native methods as
before, and ``uninstrument()`` puts them back.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Mapping
from typing import Any, Callable, ClassVar

from opentelemetry import trace

# The module opens with "# type: ignore", so mypy sees none of its names.
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)
from opentelemetry.trace import SpanKind

from . import _fastmc
from ._keyargs import KEY, METHODS, call_keys
from .aio import Client as _AioClient
from .client import Client as _SyncClient

__all__ = ["FastMCInstrumentor"]


CAPTURE_KEYS_ENV = "OTEL_PYTHON_FASTMC_CAPTURE_KEYS"
"""Set to ``true`` to record keys in ``db.query.text`` under ``opentelemetry-instrument``."""

_QUERY_TEXT_LIMIT = 1024


class _State:
    tracer: trace.Tracer = trace.NoOpTracer()
    capture_keys = False
    saved: ClassVar[list[tuple[type, str, bool, Any]]] = []


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return "%s.%s" % (cls.__module__, cls.__qualname__)


def _servers(mc: Any) -> list[dict[str, Any]]:
    """Each server's ``server.address``/``server.port``, in the ring's order (``hash()`` indexes
    it), from ``metrics()`` (no I/O); built again after ``set_servers`` (which gives the client a
    new ``addresses`` list)."""
    cached = mc.__dict__.get("_fastmc_otel_servers")
    if cached is not None and cached[0] is mc.addresses:
        servers: list[dict[str, Any]] = cached[1]
        return servers
    servers = []
    for name in mc.metrics():
        if name.startswith("/"):  # a UNIX socket: its path, no port
            servers.append({"server.address": name})
        else:
            host, _, port = name.rpartition(":")
            servers.append({"server.address": host, "server.port": int(port)})
    mc.__dict__["_fastmc_otel_servers"] = (mc.addresses, servers)
    return servers


def _as_bytes(key: Any) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def _server_attributes(mc: Any, keys: Collection[Any], prefix: Any) -> dict[str, Any]:
    """``server.address``/``server.port`` of the one server the keys map to; none when they
    span several servers (the convention has no attribute for several servers)."""
    servers = _servers(mc)
    if len(servers) == 1:
        return servers[0]
    index = -1
    for key in keys:
        i = mc.hash(_as_bytes(prefix) + _as_bytes(key) if prefix else key)
        if index not in (-1, i):
            return {}
        index = i
    return servers[index] if 0 <= index < len(servers) else {}


def _hot_attributes(mc: Any, key: Any, server_key: Any) -> dict[str, Any]:
    """``fastmc.hot_key.rank`` (1: the hottest) and ``fastmc.hot_key.requests`` (estimated)
    where hot-key telemetry is on and the key is among its server's hottest; no key is
    recorded."""
    hot = mc._hot_rank(key, server_key)
    if hot is None:
        return {}
    return {"fastmc.hot_key.rank": hot[0], "fastmc.hot_key.requests": hot[1]}


def _call_attributes(
    mc: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    one = METHODS[name][0] == KEY
    attrs: dict[str, Any] = {"db.system.name": "memcached", "db.operation.name": name}
    try:
        keys, prefix = call_keys(name, args, kwargs)
        if not one and len(keys) != 1 and METHODS[name][0] is not None:
            # one key is one operation, not a batch (the convention)
            attrs["db.operation.batch.size"] = len(keys)
        if keys or len(_servers(mc)) == 1:
            attrs.update(_server_attributes(mc, keys, prefix))
        if one:
            attrs.update(_hot_attributes(mc, keys[0], kwargs.get("server_key")))
        if _State.capture_keys and keys:
            words = [(_as_bytes(prefix) + _as_bytes(k)).decode("utf-8", "replace") for k in keys]
            attrs["db.query.text"] = " ".join([name, *words])[:_QUERY_TEXT_LIMIT]
    except Exception:
        # A bad argument: the call itself raises pylibmc's error, recorded on the span.
        pass
    return attrs


def _start(mc: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    # Every attribute at creation, where a sampler sees them (the convention asks it of the
    # server's address and port); one validation of them in the SDK instead of two.
    return _State.tracer.start_as_current_span(
        name, kind=SpanKind.CLIENT, attributes=_call_attributes(mc, name, args, kwargs)
    )


def _traced_sync(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _start(self, name, args, kwargs) as span:
            try:
                return method(self, *args, **kwargs)
            except BaseException as exc:
                span.set_attribute("error.type", _error_type(exc))
                raise

    return traced


def _traced_async(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The span is current in the calling task's context, so it is the child of whatever
        # span the task had when it called, across the await.
        with _start(self, name, args, kwargs) as span:
            try:
                return await method(self, *args, **kwargs)
            except BaseException as exc:
                span.set_attribute("error.type", _error_type(exc))
                raise

    return traced


def _wrap(cls: type, wrapper: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> None:
    for name in METHODS:
        original = getattr(cls, name)
        own = name in cls.__dict__
        _State.saved.append((cls, name, own, cls.__dict__.get(name)))
        setattr(cls, name, wrapper(name, original))


class FastMCInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Spans for every call of ``fastmc.Client`` and ``fastmc.aio.Client`` (and their
    subclasses: fastmc installed as pylibmc, the Django backend, discovered clients).

    ``instrument(tracer_provider=None, capture_keys=False)``: with ``capture_keys=True`` (or
    ``OTEL_PYTHON_FASTMC_CAPTURE_KEYS=true``) each span's ``db.query.text`` is the method and its
    keys (``get user:1``); off by default, as keys may hold personal data.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        _State.tracer = trace.get_tracer(
            __name__,
            _fastmc.__version__,
            tracer_provider=kwargs.get("tracer_provider"),
            schema_url="https://opentelemetry.io/schemas/1.33.0",
        )
        env = os.environ.get(CAPTURE_KEYS_ENV, "").strip().lower() in ("1", "true", "yes")
        _State.capture_keys = bool(kwargs.get("capture_keys", env))
        _wrap(_SyncClient, _traced_sync)
        _wrap(_AioClient, _traced_async)

    def _uninstrument(self, **kwargs: Any) -> None:
        for cls, name, own, original in reversed(_State.saved):
            if own:
                setattr(cls, name, original)
            else:
                delattr(cls, name)
        _State.saved.clear()
        _State.tracer = trace.NoOpTracer()
