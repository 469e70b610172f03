"""Warm-up (docs/operations.md#warm-up-connections-before-traffic): `warm_up(n)` and the
constructor's `warm_up=n` leave n connections per server in the pool, each checked by a round
trip, on both clients and both protocols; a server that cannot be warmed is reported (or, from
the constructor, logged), never raised; a fresh process's first requests dial nothing."""

import asyncio
import logging
import socket

import fastmc
import fastmc.aio
import pytest
from memcached import Memcached


def pools(mc):
    return {a: (m["connections_opened"], m["connections_idle"]) for a, m in mc.metrics().items()}


@pytest.fixture(scope="module")
def two():
    procs = [Memcached(), Memcached()]
    yield [p.address for p in procs]
    for p in procs:
        p.stop()


@pytest.fixture
def silent():
    """An address whose listener accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield "127.0.0.1:%d" % s.getsockname()[1]
    s.close()


@pytest.mark.parametrize("binary", [False, True])
def test_each_server_gets_its_connections_and_the_first_requests_dial_nothing(two, binary):
    mc = fastmc.Client(two, binary=binary)
    assert mc.warm_up(3) == {}
    assert pools(mc) == {a: (3, 3) for a in two}
    # a second warm-up checks the idle ones and opens none
    assert mc.warm_up(3) == {} and pools(mc) == {a: (3, 3) for a in two}
    for i in range(50):
        mc.set("w%d" % i, i)
    assert mc.get_multi(["w%d" % i for i in range(50)]) == {"w%d" % i: i for i in range(50)}
    assert all(opened == 3 for opened, _ in pools(mc).values())


def test_a_partial_fleet_is_reported_not_raised(two, silent):
    dead = "127.0.0.1:1"
    behaviors = {"connect_timeout": 500, "_poll_timeout": 300}
    mc = fastmc.Client([*two, dead, silent], behaviors=behaviors)
    failed = mc.warm_up(2)
    assert set(failed) == {dead, silent}
    assert isinstance(failed[dead], fastmc.ConnectionError)
    assert isinstance(failed[silent], fastmc.Error)
    assert "warm_up" in str(failed[dead])
    assert all(pools(mc)[a] == (2, 2) for a in two)


def test_the_constructor_warms_and_logs_what_failed(two, caplog):
    mc = fastmc.Client(two, warm_up=2)
    assert pools(mc) == {a: (2, 2) for a in two}
    with caplog.at_level(logging.WARNING, logger="fastmc"):
        fastmc.Client([two[0], "127.0.0.1:1"], warm_up=1)
    assert any("warm-up of 127.0.0.1:1 failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("n", [0, 65, -1])
def test_a_count_outside_1_to_64_is_refused(two, n):
    with pytest.raises((ValueError, OverflowError)):
        fastmc.Client(two).warm_up(n)


def test_the_asyncio_client_warms_on_a_worker_thread(two):
    async def main():
        async with fastmc.aio.Client(two, warm_up=2) as mc:
            assert pools(mc) == {a: (2, 2) for a in two}
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            ticker = asyncio.create_task(tick())
            assert await mc.warm_up(4) == {}
            ticker.cancel()
            assert ticks > 0  # the loop ran while the connections were opened
            assert pools(mc) == {a: (4, 4) for a in two}
            assert await mc.set("aw", 1) and await mc.get("aw") == 1

    asyncio.run(main())
