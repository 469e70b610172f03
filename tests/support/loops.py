"""Event loops for the asyncio client's tests: selectors that count the loop's turns, a
coroutine run on a loop of the test's own, and a future the loop is made to leave pending."""

import asyncio
import selectors


def counting(base: type[selectors.BaseSelector]) -> type[selectors.BaseSelector]:
    """A `base` selector that counts how many times the loop looked (`turns`, per class)."""

    class Counting(base):  # type: ignore[valid-type,misc]
        turns = 0

        def select(self, timeout=None):  # type: ignore[no-untyped-def]
            type(self).turns += 1
            return super().select(timeout)

    return Counting


def run_on(loop: asyncio.AbstractEventLoop, main) -> None:  # type: ignore[no-untyped-def]
    """Run `main()` to completion on `loop`, then close it."""
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def pending_get(mc, key: str = "f"):  # type: ignore[no-untyped-def]
    """`mc._get(key)` with a callback queued first: the loop has work, so the call returns its
    future pending instead of waiting for the reply itself (docs/aio.md, "An idle loop")."""
    asyncio.get_running_loop().call_soon(lambda: None)
    return mc._get(key)
