"""A lone request on an idle loop (docs/aio.md, "An idle loop"): the call waits for the reply
itself, on the loop's selector too, and returns a resolved future; anything the loop has to
do (a queued callback, a due timer, a readable descriptor, a signal) ends that wait at once or
keeps it from starting, and the request then waits on the loop as usual."""

import asyncio
import math
import os
import selectors
import signal
import socket
import sys
import threading

import fastmc
import fastmc.aio
import pytest
from loops import counting, run_on
from memcached import sigstop

if sys.platform != "linux":
    pytest.skip("the idle wait runs on Linux only (direct_off.rs)", allow_module_level=True)

_CountingEpoll = counting(selectors.EpollSelector)


def test_on_an_idle_loop_a_lone_request_needs_no_turn_of_the_loop(server):
    keys = ["idle%d" % i for i in range(20)]

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set_multi(dict.fromkeys(keys, "v"))
            await mc.get_multi(keys)
            moved0, woken0, _ = mc._idle_waits
            n = 200
            before = _CountingEpoll.turns
            done_at_once = 0
            for _ in range(n):
                fut = mc._get_multi(keys)
                done_at_once += fut.done()
                assert await fut == dict.fromkeys(keys, "v")
            turns = _CountingEpoll.turns - before
            moved, woken, _ = mc._idle_waits
            # a reply slower than the wait's limit (a stall of the machine) waits on the loop
            assert done_at_once >= n * 0.9, done_at_once
            assert moved - moved0 == done_at_once
            assert woken == woken0
            assert turns <= n - done_at_once, turns

    run_on(asyncio.SelectorEventLoop(_CountingEpoll()), main)


def test_a_loop_with_work_gets_a_pending_future_at_once(server):
    async def main():
        loop = asyncio.get_running_loop()
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            waits = mc._idle_waits
            # a callback queued
            loop.call_soon(lambda: None)
            fut = mc._get("f")
            assert not fut.done()
            assert await fut == "v"
            # a timer due
            loop.call_later(0, lambda: None)
            fut = mc._get("f")
            assert not fut.done()
            assert await fut == "v"
            assert mc._idle_waits == waits  # no wait began

    asyncio.run(main())


def _stopped_then_resumed(mcd, body, loop=None):
    """Run `body(mc)` with mcd stopped after a first value was written, then resumed (on
    `loop` if given, else on a new default loop)."""

    async def main():
        async with fastmc.aio.Client([mcd.address]) as mc:
            await mc.set("s", "v")
            sigstop(mcd.proc.pid)
            try:
                fut = await body(mc)
                assert not fut.done()  # the server cannot have answered
            finally:
                os.kill(mcd.proc.pid, signal.SIGCONT)
            assert await fut == "v"

    if loop is None:
        asyncio.run(main())
    else:
        run_on(loop, main)


def test_a_readable_descriptor_ends_the_wait(mcd):
    async def body(mc):
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        got = []

        def read():
            got.append(a.recv(10))
            loop.remove_reader(a)

        loop.add_reader(a, read)
        b.send(b"x")  # readable before the call: its wait ends at once
        moved, woken, timed_out = mc._idle_waits
        fut = mc._get("s")
        assert mc._idle_waits == (moved, woken + 1, timed_out)
        for _ in range(10):
            await asyncio.sleep(0)
        assert got == [b"x"]
        a.close()
        b.close()
        return fut

    _stopped_then_resumed(mcd, body)


def test_a_signal_ends_the_wait(mcd):
    async def body(mc):
        loop = asyncio.get_running_loop()
        got = []
        loop.add_signal_handler(signal.SIGUSR1, got.append, "usr1")
        try:
            moved, woken, timed_out = mc._idle_waits
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
            fut = mc._get("s")
            assert mc._idle_waits == (moved, woken + 1, timed_out)
            for _ in range(10):
                await asyncio.sleep(0)
            assert got == ["usr1"]
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        return fut

    _stopped_then_resumed(mcd, body)


def test_a_wait_that_runs_out_leaves_the_request_to_the_loop(mcd):
    async def body(mc):
        moved, woken, timed_out = mc._idle_waits
        fut = mc._get("s")
        assert mc._idle_waits == (moved, woken, timed_out + 1)
        # the loop goes on with other work while the request waits on it
        ticks = 0
        for _ in range(5):
            await asyncio.sleep(0.002)
            ticks += 1
        assert ticks == 5 and not fut.done()
        return fut

    _stopped_then_resumed(mcd, body)


class _LoopClockBehind(asyncio.SelectorEventLoop):
    """A loop with a clock of its own (as test loops with virtual time have)."""

    def time(self) -> float:
        return super().time() - 1000.0


def test_the_next_timer_is_read_on_the_loops_own_clock(mcd):
    """A timer 50 ms away on the loop's clock leaves the wait its time, and it runs out; read on
    the system's clock, that timer would look long past and no wait would begin."""

    async def body(mc):
        loop = asyncio.get_running_loop()
        fired = []
        loop.call_later(0.05, fired.append, 1)
        moved, woken, timed_out = mc._idle_waits
        fut = mc._get("s")
        assert mc._idle_waits == (moved, woken, timed_out + 1)
        assert fired == []
        await asyncio.sleep(0.06)
        assert fired == [1]
        return fut

    _stopped_then_resumed(mcd, body, _LoopClockBehind())


def test_a_timer_at_infinity_leaves_the_wait_its_limit(server):
    """`asyncio.sleep(math.inf)` (a task that sleeps for good) schedules a timer no duration
    can hold: the wait takes its own limit, and the client goes on serving."""

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("f", "v")
            forever = asyncio.ensure_future(asyncio.sleep(math.inf))
            await asyncio.sleep(0)  # its timer is scheduled
            moved, _, _ = mc._idle_waits
            for _ in range(3):
                assert await mc.get("f") == "v"
            assert mc._idle_waits[0] == moved + 3
            assert mc._in_flight == 0
            forever.cancel()

    asyncio.run(main())
