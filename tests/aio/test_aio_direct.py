"""fastmc.aio's lone requests, which the event loop's thread drives itself (docs/aio.md): they
give the blocking client's results, a stall or a stale connection hands them to the blocking
driver without blocking the loop, a cancelled one never leaves its reply for another request,
and requests issued while one runs there go to the workers."""

import asyncio
import os
import random
import signal
import sys
import time

import fastmc
import fastmc.aio
import pytest
from memcached import FAST_FAILURE as FAST
from memcached import sigstop

pytestmark = pytest.mark.skipif(
    sys.platform != "linux",
    reason="the loop's thread drives requests on Linux only (src/dispatch/direct_off.rs)",
)


def test_lone_requests_run_on_the_loop_thread_with_the_blocking_results(servers):
    addrs = servers
    sync = fastmc.Client(addrs)
    keys = ["direct:%d" % i for i in range(200)]

    async def main():
        async with fastmc.aio.Client(addrs, behaviors={"cas": True}) as mc:
            await mc.get_multi(keys)  # the first request per server connects (workers)
            # the first multi-key write asks each server whether it has the meta protocol:
            # that probe is I/O after the batch, left to the blocking driver
            assert await mc.set_multi(dict.fromkeys(keys, "v")) == []
            begun0, handed0 = mc._direct_counts
            assert await mc.get_multi(keys) == dict.fromkeys(keys, "v")
            assert await mc.set("one", 41) is True
            assert await mc.incr("one", 1) == 42
            assert await mc.decr("one", 2) == 40
            assert await mc.add("one", 0) is False
            assert await mc.replace("one", "x") is True
            assert await mc.append("one", "y") is True
            assert await mc.get("one") == "xy"
            value, cas = await mc.gets("one")
            assert value == "xy"
            assert await mc.cas("one", "z", cas) is True
            assert await mc.touch("one", 100) is True
            assert await mc.touch("missing", 100) is False
            assert await mc.delete("one") is True
            assert await mc.delete("one") is False
            assert await mc.delete_multi(keys[:100]) is True
            assert await mc.get_multi(keys) == dict.fromkeys(keys[100:], "v")
            assert await mc.set_multi({"n1": 1, "n2": 5}) == []
            assert await mc.incr_multi(["n1", "n2"], delta=2) is None
            assert await mc.get_multi(["n1", "n2"]) == {"n1": 3, "n2": 7}
            begun, handed = mc._direct_counts
            assert begun - begun0 == 19 and handed == handed0
        # what the blocking client sees is what the asyncio client wrote
        assert sync.get_multi(keys) == dict.fromkeys(keys[100:], "v")
        assert sync.get("one") is None

    asyncio.run(main())


def test_requests_issued_meanwhile_go_to_the_workers_and_travel_together(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("w", "v")
            begun0, _ = mc._direct_counts
            got = await asyncio.gather(*(mc.get("w") for _ in range(100)))
            assert got == ["v"] * 100
            begun, _ = mc._direct_counts
            assert begun - begun0 == 1  # the first alone; the other 99 went to the workers

    asyncio.run(main())


def test_a_stalled_lone_request_is_handed_off_and_never_blocks_the_loop(mcd):
    async def main():
        async with fastmc.aio.Client([mcd.address], behaviors=FAST) as mc:
            await mc.set("s", "v")
            assert await mc.get("s") == "v"
            _, handed0 = mc._direct_counts
            sigstop(mcd.proc.pid)
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.005)
                    ticks += 1

            tick = asyncio.ensure_future(ticker())
            t0 = time.monotonic()
            with pytest.raises(fastmc.Error, match="TIMEOUT") as ei:
                await mc.get("s")
            waited = time.monotonic() - t0
            tick.cancel()
            assert not isinstance(ei.value, fastmc.NotFound)
            assert 0.25 <= waited < 2.0 and ticks >= 20
            assert mc._direct_counts[1] == handed0 + 1
            os.kill(mcd.proc.pid, signal.SIGCONT)
            # back after retry_timeout, with the right value
            await asyncio.sleep(1.1)
            assert await mc.get("s") == "v"

    asyncio.run(main())


def test_a_lone_request_on_a_connection_the_server_closed_is_replayed(mcd):
    """memcached restarted on the same port: the pooled connection is dead. A read finds out
    after sending and is replayed on a new connection by the blocking driver; a write is never
    sent on it (the pooled connection is peeked at first)."""

    async def main():
        async with fastmc.aio.Client([mcd.address]) as mc:
            await mc.set("r", "before")
            assert await mc.get("r") == "before"
            mcd.restart()
            assert await mc.get("r") is None  # a new server: the value is gone, no error
            assert await mc.set("r", "after") is True
            assert await mc.get("r") == "after"

    asyncio.run(main())


def test_cancelled_lone_requests_never_leave_a_reply_for_another(server):
    keys = ["c%d" % i for i in range(50)]

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set_multi({k: k + "-value" for k in keys})
            rng = random.Random(7)
            for _ in range(2000):
                k = rng.choice(keys)
                t = asyncio.ensure_future(mc.get(k))
                for _ in range(rng.randrange(3)):
                    await asyncio.sleep(0)
                t.cancel()
                other = rng.choice(keys)
                assert await mc.get(other) == other + "-value"
                if not t.cancelled():
                    assert t.result() == k + "-value"
            begun, _ = mc._direct_counts
            assert begun > 1000

    asyncio.run(main())


def test_lone_requests_on_uvloop(server):
    """uvloop watches the client's epoll descriptor like asyncio's loop does."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed")

    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("uv", 0)
            begun0, handed0 = mc._direct_counts
            for i in range(200):
                assert await mc.incr("uv") == i + 1
            assert await mc.get_multi(["uv", "none"]) == {"uv": 200}
            t = asyncio.ensure_future(mc.get("uv"))
            await asyncio.sleep(0)
            t.cancel()
            assert await mc.delete("uv") is True
            begun, handed = mc._direct_counts
            assert begun - begun0 >= 202 and handed == handed0

    uvloop.run(main())
