"""``Client.get_or_set``: one recompute per miss, expiry or invalidation (see docs/stampede.md).

The policy lives here because it calls the caller's function and sleeps; the protocol does not:
``_lease_get`` is one ``mg <key> v f c N<lease> [R<early>]`` (``src/py/client/lease.rs``), the
winner stores through ``set`` (so the value is ``set``'s, for ``get`` and pylibmc alike) and gives
its lease back through ``_lease_release`` when its function raises. A server without the meta
protocol gets an ``add``-based lock key instead (``_locked``).
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Callable, Literal, Union

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    from ._fastmc import _Key, client

    _Default: TypeAlias = Union[Callable[[], Any], Any]
    _OnWaitTimeout: TypeAlias = Literal["compute", "raise"]

_MISS = object()
# Backoff of a caller waiting for another's recompute: doubles from the first to the last.
_FIRST_POLL = 0.005
_LAST_POLL = 0.1
# The lock key of the fallback, beside the key (it may live on another server).
_LOCK_SUFFIX = ":fastmc-lease"


def _compute(default: _Default) -> Any:
    return default() if callable(default) else default


class _Waiter:
    """The bounded backoff of a caller that did not get the lease."""

    def __init__(self, wait: float) -> None:
        self.deadline = _time.monotonic() + wait
        self.delay = _FIRST_POLL

    def sleep(self) -> bool:
        """Sleep before the next poll; False once the wait is over."""
        left = self.deadline - _time.monotonic()
        if left <= 0:
            return False
        _time.sleep(min(self.delay, left))
        self.delay = min(self.delay * 2, _LAST_POLL)
        return True


def _timed_out(key: _Key, default: _Default, wait: float, on_wait_timeout: str) -> Any:
    if on_wait_timeout == "raise":
        raise TimeoutError(
            "get_or_set(%r): no value after waiting %ss for its recompute" % (key, wait)
        )
    return _compute(default)


def get_or_set(
    mc: client,
    key: _Key,
    default: _Default,
    time: int = 0,
    *,
    lease: int = 10,
    wait: float | None = None,
    recompute_early: int = 0,
    on_wait_timeout: _OnWaitTimeout = "compute",
) -> Any:
    if on_wait_timeout not in ("compute", "raise"):
        raise ValueError("on_wait_timeout must be 'compute' or 'raise'")
    lease = max(1, int(lease))
    wait_s = float(lease if wait is None else wait)
    waiter = _Waiter(wait_s)
    while True:
        state, value, cas = mc._lease_get(key, lease, max(0, int(recompute_early)))
        if state in ("hit", "stale"):
            return value
        if state == "unsupported":
            return _locked(mc, key, default, time, lease, waiter, wait_s, on_wait_timeout)
        if state != "wait":
            return _recompute(mc, key, default, time, state, cas)
        if not waiter.sleep():
            return _timed_out(key, default, wait_s, on_wait_timeout)


def _recompute(mc: client, key: _Key, default: _Default, time: int, state: str, cas: int) -> Any:
    """The lease holder: compute, store, or give the lease back."""
    stored = False
    try:
        value = _compute(default)
        stored = mc.set(key, value, time)
    finally:
        if not stored and state in ("win", "win_stale"):
            # Not the early recompute's: that value is still good, and its lease ends with it.
            mc._lease_release(key, cas, state == "win_stale")
    return value


def _lock_key(key: _Key) -> _Key:
    if isinstance(key, str):
        return key + _LOCK_SUFFIX
    return bytes(key) + _LOCK_SUFFIX.encode()


def _locked(
    mc: client,
    key: _Key,
    default: _Default,
    time: int,
    lease: int,
    waiter: _Waiter,
    wait_s: float,
    on_wait_timeout: str,
) -> Any:
    """Without the meta protocol: whoever ``add``s the lock key recomputes."""
    lock = _lock_key(key)
    while True:
        value = mc.get(key, _MISS)
        if value is not _MISS:
            return value
        if mc.add(lock, b"1", lease):
            try:
                # The previous holder may have stored between our get and our add.
                value = mc.get(key, _MISS)
                if value is not _MISS:
                    return value
                value = _compute(default)
                mc.set(key, value, time)
                return value
            finally:
                mc.delete(lock)
        if not waiter.sleep():
            return _timed_out(key, default, wait_s, on_wait_timeout)
