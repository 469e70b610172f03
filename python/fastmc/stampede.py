"""``get_or_set``: one recompute per miss, expiry or invalidation (see docs/stampede.md).

The policy is written once, as a generator of the steps it needs (``_policy``): a lease read,
a store, a lease release, a get, an ``add`` of a lock key, a delete, calling the caller's
function, a pause. ``get_or_set`` runs those steps on the blocking client (``time.sleep``),
``aget_or_set`` on the asyncio client (``asyncio.sleep``; the function may be a coroutine
function), both through ``fastmc._steps``. A lease read is one ``mg <key> v f c N<lease> [R<early>]`` (``src/py/client/lease.rs``);
the winner stores through ``set`` (so the value is ``set``'s, for ``get`` and pylibmc alike) and
gives its lease back when its function raises. A server without the meta protocol gets an
``add``-based lock key instead.
"""

from __future__ import annotations

import contextlib
import time as _time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Callable, Literal, Union

from ._steps import adrive, drive

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    from ._fastmc import _Key

    _Default: TypeAlias = Union[Callable[[], Any], Any]
    _OnWaitTimeout: TypeAlias = Literal["compute", "raise"]
    # A step of the policy: its name and arguments; what it returns is sent back.
    _Step: TypeAlias = tuple[Any, ...]

_MISS = object()
# Backoff of a caller waiting for another's recompute: doubles from the first to the last.
_FIRST_POLL = 0.005
_LAST_POLL = 0.1
# The lock key of the fallback, beside the key (it may live on another server).
_LOCK_SUFFIX = ":fastmc-lease"


class _Waiter:
    """The bounded backoff of a caller that did not get the lease."""

    def __init__(self, wait: float) -> None:
        self.deadline = _time.monotonic() + wait
        self.delay = _FIRST_POLL

    def next_pause(self) -> float | None:
        """How long to pause before the next poll; None once the wait is over."""
        left = self.deadline - _time.monotonic()
        if left <= 0:
            return None
        pause = min(self.delay, left)
        self.delay = min(self.delay * 2, _LAST_POLL)
        return pause


def _lock_key(key: _Key) -> _Key:
    if isinstance(key, str):
        return key + _LOCK_SUFFIX
    return bytes(key) + _LOCK_SUFFIX.encode()


def _lease_args(lease: int, recompute_early: int, on_wait_timeout: str) -> tuple[int, int]:
    """The lease read's arguments, checked: (lease seconds, early-recompute seconds)."""
    if on_wait_timeout not in ("compute", "raise"):
        raise ValueError("on_wait_timeout must be 'compute' or 'raise'")
    return max(1, int(lease)), max(0, int(recompute_early))


# What a lease read answers when the caller just gets the value (no recompute, no wait).
_SERVED = frozenset(("hit", "stale"))


def _policy(
    key: _Key,
    time: int,
    lease: int,
    wait: float | None,
    recompute_early: int,
    on_wait_timeout: str,
    first: tuple[str, Any, int],
) -> Generator[_Step, Any, Any]:
    """Everything after the first lease read (``first``, which did not serve the value)."""
    wait_s = float(lease if wait is None else wait)
    waiter = _Waiter(wait_s)
    state, value, cas = first
    while True:
        if state in _SERVED:
            return value
        if state == "unsupported":
            return (yield from _locked(key, time, lease, waiter, wait_s, on_wait_timeout))
        if state != "wait":
            return (yield from _recompute(key, time, state, cas))
        pause = waiter.next_pause()
        if pause is None:
            return (yield from _timed_out(key, wait_s, on_wait_timeout))
        yield ("sleep", pause)
        state, value, cas = yield ("lease_get", key, lease, recompute_early)


def _timed_out(key: _Key, wait: float, on_wait_timeout: str) -> Generator[_Step, Any, Any]:
    if on_wait_timeout == "raise":
        raise TimeoutError(
            "get_or_set(%r): no value after waiting %ss for its recompute" % (key, wait)
        )
    return (yield ("compute",))


def _recompute(key: _Key, time: int, state: str, cas: int) -> Generator[_Step, Any, Any]:
    """The lease holder: compute, store, or give the lease back. Not the early recompute's:
    that value is still good, and its lease ends with it."""
    release = state in ("win", "win_stale")
    try:
        value = yield ("compute",)
        stored = yield ("set", key, value, time)
    except GeneratorExit:
        raise
    except BaseException:
        if release:
            # The first failure is the caller's: a release that fails too (the server the set
            # timed out on is now down) must not replace it. The lease then ends with its TTL.
            with contextlib.suppress(Exception):
                yield ("lease_release", key, cas, state == "win_stale")
        raise
    if not stored and release:
        yield ("lease_release", key, cas, state == "win_stale")
    return value


def _locked(
    key: _Key, time: int, lease: int, waiter: _Waiter, wait_s: float, on_wait_timeout: str
) -> Generator[_Step, Any, Any]:
    """Without the meta protocol: whoever ``add``s the lock key recomputes."""
    lock = _lock_key(key)
    while True:
        value = yield ("get", key, _MISS)
        if value is not _MISS:
            return value
        if (yield ("add", lock, b"1", lease)):
            try:
                # The previous holder may have stored between our get and our add.
                value = yield ("get", key, _MISS)
                if value is not _MISS:
                    return value
                value = yield ("compute",)
                yield ("set", key, value, time)
                return value
            finally:
                yield ("delete", lock)
        pause = waiter.next_pause()
        if pause is None:
            return (yield from _timed_out(key, wait_s, on_wait_timeout))
        yield ("sleep", pause)


def get_or_set(
    mc: Any,
    key: _Key,
    default: _Default,
    time: int = 0,
    *,
    lease: int = 10,
    wait: float | None = None,
    recompute_early: int = 0,
    on_wait_timeout: _OnWaitTimeout = "compute",
    server_key: _Key | None = None,
) -> Any:
    """The policy on a blocking client (``server_key``: every step placed by that group key)."""
    lease, early = _lease_args(lease, recompute_early, on_wait_timeout)
    # The common case, a value to serve, in one call: the policy only runs past it.
    first = mc._lease_get(key, lease, early, server_key)
    if first[0] in _SERVED:
        return first[1]
    gen = _policy(key, time, lease, wait, early, on_wait_timeout, first)
    return drive(gen, lambda s: _run_step(mc, s, default, server_key, _time.sleep, "_"))


def _run_step(
    mc: Any, s: _Step, default: _Default, server_key: _Key | None, sleep: Any, native: str
) -> Any:
    """What one step of the policy does, on either client (``native``: the prefix of its lease
    rows, ``_`` or the asyncio client's ``_a``). The asyncio client's calls, and its ``sleep``
    (asyncio's), return awaitables, which its driver awaits."""
    name, *args = s
    if name == "compute":
        return default() if callable(default) else default
    if name == "sleep":
        return sleep(args[0])
    if name in ("lease_get", "lease_release"):
        return getattr(mc, native + name)(*args, server_key)
    return getattr(mc, name)(*args, server_key=server_key)


async def aget_or_set(
    self: Any,
    key: _Key,
    default: _Default,
    time: int = 0,
    *,
    lease: int = 10,
    wait: float | None = None,
    recompute_early: int = 0,
    on_wait_timeout: _OnWaitTimeout = "compute",
    server_key: _Key | None = None,
) -> Any:
    """``fastmc.Client.get_or_set`` as a coroutine; ``default`` may also be a coroutine
    function (awaited by the one caller that recomputes). It is ``fastmc.aio.Client.get_or_set``
    itself, hence ``self``."""
    import asyncio  # here: a blocking client's get_or_set does not need it

    mc = self
    lease, early = _lease_args(lease, recompute_early, on_wait_timeout)
    first = await mc._alease_get(key, lease, early, server_key)
    if first[0] in _SERVED:
        return first[1]
    gen = _policy(key, time, lease, wait, early, on_wait_timeout, first)
    # (a step's exception is handed to the policy: its finally gives the lease back)
    return await adrive(gen, lambda s: _run_step(mc, s, default, server_key, asyncio.sleep, "_a"))
