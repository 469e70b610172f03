"""Policies written once, as generators of the I/O steps they need, for both clients: the
blocking client runs each step (``drive``), the asyncio client awaits it (``adrive``). A step's
result is sent back into the generator, its exception thrown into it (where its ``finally``
clauses run); what the generator returns is the call's result. Used by ``get_or_set``
(``stampede``) and the near cache's reads (``_nearfront``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Callable


def _advance(
    gen: Generator[Any, Any, Any], result: Any, error: BaseException | None
) -> tuple[bool, Any]:
    """Hand the generator the last step's result (or its exception): ``(False, next step)``,
    or ``(True, what it returned)`` once it is done."""
    try:
        return False, (gen.send(result) if error is None else gen.throw(error))
    except StopIteration as done:
        return True, done.value


def drive(gen: Generator[Any, Any, Any], step: Callable[[Any], Any]) -> Any:
    """Run ``gen`` to its end, each step done by ``step``."""
    result: Any = None
    error: BaseException | None = None
    while True:
        finished, s = _advance(gen, result, error)
        if finished:
            return s
        result, error = None, None
        try:
            result = step(s)
        except BaseException as e:  # handed to the generator
            error = e


async def adrive(gen: Generator[Any, Any, Any], step: Callable[[Any], Any]) -> Any:
    """``drive`` for the asyncio client: what ``step`` returns is awaited when awaitable."""
    from inspect import isawaitable

    result: Any = None
    error: BaseException | None = None
    while True:
        finished, s = _advance(gen, result, error)
        if finished:
            return s
        result, error = None, None
        try:
            result = step(s)
            if isawaitable(result):
                result = await result
        except BaseException as e:  # handed to the generator
            error = e
