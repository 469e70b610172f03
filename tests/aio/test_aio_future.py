"""The future fastmc.aio's native methods return (`_fastmc.aio_future`, docs/aio.md): asyncio
treats it as a future (tasks, `gather`, `wait_for`, `ensure_future`, done callbacks with their
context, cancellation with a message), and a task awaiting a lone request resumes in the loop
turn whose reader callback read the reply, not one turn later.

On an idle loop a lone request's reply is waited for inside the call (docs/aio.md, "An idle
loop"), and the future comes back resolved; the tests that need a pending one queue a callback
first (`loops.pending_get`), so the loop has work and the call returns at once."""

import asyncio
import contextvars
import gc
import selectors
import sys
import time
import typing

import fastmc
import fastmc.aio
import pytest
from loops import counting, pending_get, run_on


def test_it_is_an_asyncio_future_to_asyncio(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            fut = mc._get("f")
            assert asyncio.isfuture(fut)
            assert asyncio.ensure_future(fut) is fut
            assert fut.get_loop() is asyncio.get_running_loop()
            assert await fut == "v"
            assert fut.done() and not fut.cancelled()
            assert fut.result() == "v" and fut.exception() is None
            assert await asyncio.gather(mc._get("f"), mc._get("nothing", 7)) == ["v", 7]
            assert await asyncio.wait_for(mc._get("f"), 5) == "v"
            done, _ = await asyncio.wait([mc._get("f")])
            assert [d.result() for d in done] == ["v"]
            # an error is the future's exception, raised where it is awaited
            bad = mc._incr("f", 1)  # "v" is not a number
            with pytest.raises(fastmc.Error):
                await bad
            assert isinstance(bad.exception(), fastmc.Error)

    asyncio.run(main())


def test_a_pending_future_has_no_result_yet(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            fut = pending_get(mc)
            assert not fut.done()
            with pytest.raises(asyncio.InvalidStateError):
                fut.result()
            with pytest.raises(asyncio.InvalidStateError):
                fut.exception()
            await fut

    asyncio.run(main())


def test_done_callbacks_run_once_in_their_context(server):
    var = contextvars.ContextVar("var", default="unset")

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", 1)
            seen = []
            fut = pending_get(mc)
            ctx = contextvars.copy_context()
            ctx.run(var.set, "theirs")
            fut.add_done_callback(lambda f: seen.append(("a", f.result(), var.get())), context=ctx)
            gone = fut.add_done_callback
            gone(lambda f: seen.append(("b", f.result(), var.get())))
            removed = lambda f: seen.append("removed")  # noqa: E731
            fut.add_done_callback(removed)
            assert fut.remove_done_callback(removed) == 1
            assert fut.remove_done_callback(removed) == 0
            var.set("mine")
            await fut
            await asyncio.sleep(0)
            assert sorted(seen) == [("a", 1, "theirs"), ("b", 1, "unset")]
            # added once done: called on the next turn
            late = []
            fut.add_done_callback(late.append)
            assert late == []
            await asyncio.sleep(0)
            assert late == [fut]
            # the task's own context is the one it resumes in
            assert var.get() == "mine"

    asyncio.run(main())


def test_cancel_with_a_message_and_the_reply_is_dropped(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            fut = pending_get(mc)
            called = []
            fut.add_done_callback(called.append)
            assert fut.cancel("enough")
            assert not fut.cancel()
            assert fut.cancelled() and fut.done()
            with pytest.raises(asyncio.CancelledError, match="enough"):
                fut.result()
            with pytest.raises(asyncio.CancelledError):
                await fut
            await asyncio.sleep(0)
            assert called == [fut]
            # the cancelled request's reply went nowhere; the next ones read their own
            for _ in range(3):
                assert await mc.get("f") == "v"
            while mc._in_flight:
                await asyncio.sleep(0.001)

    asyncio.run(main())


def test_a_task_cancelled_while_it_waits_raises_cancelled(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            task = asyncio.ensure_future(mc.get("f"))
            await asyncio.sleep(0)  # the task now waits on the future
            task.cancel("stop")
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await mc.get("f") == "v"

    asyncio.run(main())


_CountingSelector = counting(selectors.PollSelector)


@pytest.mark.skipif(sys.platform != "linux", reason="no direct requests (direct_off.rs)")
def test_a_lone_request_costs_one_turn_of_the_loop(server):
    """The reader callback that reads the reply resumes the waiting task itself; with
    `loop.create_future()` the task would resume one turn later (two turns per request). (A
    poll selector: on epoll, an idle loop's lone request waits in the call, test_aio_idle.)"""
    keys = ["t%d" % i for i in range(20)]

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set_multi(dict.fromkeys(keys, "v"))
            await mc.get_multi(keys)
            n = 200
            before = _CountingSelector.turns
            for _ in range(n):
                assert await mc.get_multi(keys) == dict.fromkeys(keys, "v")
            turns = _CountingSelector.turns - before
            begun, _ = mc._direct_counts
            assert begun >= n
            assert turns <= n * 1.2, turns

    run_on(asyncio.SelectorEventLoop(_CountingSelector()), main)


def test_the_collector_sees_what_it_holds(server):
    """A waiting task and its future refer to each other (the task's wakeup is among the
    future's callbacks): the future shows the collector its loop and callbacks, so such a
    cycle left behind (a loop closed with the task pending) can be collected."""

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            fut = pending_get(mc)
            cb = lambda f: None  # noqa: E731
            fut.add_done_callback(cb)
            held = gc.get_referents(fut)
            assert asyncio.get_running_loop() in held
            assert cb in held
            await fut
            assert cb not in gc.get_referents(fut)

    asyncio.run(main())


def test_pythons_own_task_implementation_drives_it_too(server):
    """asyncio's pure-Python Task (used where its C accelerator is not) awaits, resumes and
    cancels on the same protocol."""
    import asyncio.tasks
    import random

    py_task = asyncio.tasks._PyTask  # type: ignore[attr-defined]
    # From 3.14 the pure-Python Task records itself where only the pure-Python current_task looks
    current_task = asyncio.current_task
    if sys.version_info >= (3, 14):
        current_task = asyncio.tasks._py_current_task  # type: ignore[attr-defined]

    async def body():
        assert type(current_task()) is py_task
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set_multi({"p%d" % i: i for i in range(10)})
            assert await mc.get_multi(["p1", "p2"]) == {"p1": 1, "p2": 2}
            rng = random.Random(3)
            cancelled = 0
            for _ in range(300):
                t = asyncio.ensure_future(mc.get("p7"))
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
                t.cancel()
                assert await mc.get("p9") == 9
                if t.cancelled():
                    cancelled += 1
                else:
                    assert t.result() == 7
            assert cancelled > 0

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_task_factory(lambda loop, coro, **kw: py_task(coro, loop=loop, **kw))
        await loop.create_task(body())

    asyncio.run(main())


def test_any_number_of_tasks_may_await_one_future(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            fut = pending_get(mc)

            async def wait():
                return await fut

            assert await asyncio.gather(wait(), wait(), wait()) == ["v", "v", "v"]
            # iterated by hand while pending, as asyncio.Future refuses it
            fut = pending_get(mc)
            it = fut.__await__()
            assert next(it) is fut
            fut._asyncio_future_blocking = True
            with pytest.raises(RuntimeError, match="await wasn't used with future"):
                next(it)
            fut._asyncio_future_blocking = False
            await fut

    asyncio.run(main())


def test_callbacks_survive_a_future_resolved_while_one_is_removed(server):
    """`remove_done_callback` compares with `==`, which is Python code: when that code cancels
    the future, the callbacks kept still run."""

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            fut = pending_get(mc)
            seen = []

            class CancelsOnCompare:
                def __call__(self, f):
                    seen.append("compared-one")

                def __eq__(self, other):
                    fut.cancel()
                    return False

                __hash__ = None

            fut.add_done_callback(CancelsOnCompare())
            fut.add_done_callback(seen.append)
            assert fut.remove_done_callback(print) == 0
            assert fut.cancelled()
            await asyncio.sleep(0)
            assert seen == ["compared-one", fut]
            while mc._in_flight:
                await asyncio.sleep(0.001)

    asyncio.run(main())


def test_a_resumed_task_never_overtakes_what_was_queued_before(server):
    """A reply read while other callbacks wait in the loop's queue resumes its task after
    them, as an asyncio future would: running it in the reader's turn is only for an empty
    queue."""

    async def main():
        loop = asyncio.get_running_loop()
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            order = []
            fut = pending_get(mc)  # a lone request: the loop's thread reads its reply
            time.sleep(0.02)  # the reply is in the socket before the loop looks again
            # runs in the next turn before the reader: queues a callback ahead of the wakeup
            loop.call_soon(loop.call_soon, order.append, "queued first")
            assert await fut == "v"
            order.append("resumed")
            await asyncio.sleep(0)
            assert order == ["queued first", "resumed"]

    asyncio.run(main())


def test_future_type_is_subscriptable():
    """`aio_future[T]`, as `asyncio.Future[T]`: the stub's future is generic in its result."""
    alias = fastmc._fastmc.aio_future[int]
    assert typing.get_origin(alias) is fastmc._fastmc.aio_future
    assert typing.get_args(alias) == (int,)
