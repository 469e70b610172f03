"""The near cache on the asyncio client, against a real memcached: a near hit is answered
without suspending (no I/O, no worker thread); every write drops the near copy; checks by CAS
(the 100 KB value not re-sent); get_multi; stale_on_error; one near cache for a blocking and an
asyncio client of the same servers."""

import asyncio

import fastmc
import fastmc.aio
import pytest
from memcached import Memcached

TTL = 0.05


def near(address, **options):
    options.setdefault("ttl", 60)
    options.setdefault("hot_after", 1)
    return fastmc.aio.Client([address], near_cache=fastmc.NearCache(**options))


@pytest.fixture
def address(server):
    fastmc.Client([server.address]).flush_all()
    return server.address


def test_off_by_default(address):
    async def main():
        mc = fastmc.aio.Client([address])
        assert type(mc) is fastmc.aio.Client and mc.near_cache is None
        await mc.close()

    asyncio.run(main())


def test_a_near_hit_completes_without_suspending(address):
    async def main():
        mc = near(address)
        await mc.set("k", "v")
        assert await mc.get("k") == "v"
        coro = mc.get("k")
        with pytest.raises(StopIteration) as stopped:
            coro.send(None)  # answered at once: no future awaited, so no I/O and no thread
        assert stopped.value.value == "v"
        assert mc.metrics()["near"]["hits"] == 1
        await mc.close()

    asyncio.run(main())


WRITES = {
    "set": (lambda mc: mc.set("k", b"new"), b"new"),
    "set noreply": (lambda mc: mc.set("k", b"new", noreply=True), b"new"),
    "append": (lambda mc: mc.append("k", b"+"), b"old+"),
    "delete": (lambda mc: mc.delete("k"), None),
    "touch": (lambda mc: mc.touch("k", 100), b"old"),
    "set_multi": (lambda mc: mc.set_multi({"k": b"new"}), b"new"),
    "delete_multi": (lambda mc: mc.delete_multi(["k"]), None),
    "delete_multi iterator": (lambda mc: mc.delete_multi(iter(["k"])), None),
    "invalidate": (lambda mc: mc.invalidate("k"), b"old"),
    "invalidate_multi": (lambda mc: mc.invalidate_multi(["k"]), b"old"),
    "gat": (lambda mc: mc.gat("k", 100), b"old"),
    "flush_all": (lambda mc: mc.flush_all(), None),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_every_write_drops_the_near_copy(address, name):
    write, after = WRITES[name]

    async def main():
        mc = near(address)
        await mc.set("k", b"old")
        assert await mc.get("k") == b"old"
        assert mc.near_cache.metrics()["items"] == 1
        await write(mc)
        assert mc.near_cache.metrics()["items"] == 0
        assert await mc.get("k") == after
        await mc.close()

    asyncio.run(main())


def test_counters_and_get_or_set(address):
    async def main():
        mc = near(address)
        await mc.set("n", b"10")
        assert await mc.get("n") == b"10"
        assert await mc.incr("n") == 11
        assert await mc.get("n") == b"11"
        assert await mc.get_or_set("n", 0) == b"11"  # held: served near
        await mc.delete("g")
        assert await mc.get_or_set("g", "computed") == "computed"
        assert await mc.get("g") == "computed"
        await mc.close()

    asyncio.run(main())


def test_checks_by_cas_and_fetches_a_changed_value(address):
    async def main():
        mc = near(address, ttl=TTL)
        other = fastmc.Client([address])
        big = b"b" * 100_000
        await mc.set("big", big)
        assert await mc.get("big") == big
        await asyncio.sleep(TTL * 1.5)
        assert await mc.get("big") == big  # learns what the server answers
        before = int(other.get_stats()[0][1]["bytes_written"])
        for _ in range(5):
            await asyncio.sleep(TTL * 1.5)
            assert await mc.get("big") == big
        after = int(other.get_stats()[0][1]["bytes_written"])
        assert after - before < 5 * 100 + 4000  # five short answers and one stats reply
        other.set("big", b"changed")
        await asyncio.sleep(TTL * 1.5)
        assert await mc.get("big") == b"changed"
        m = mc.metrics()["near"]
        assert m["revalidations_unchanged"] >= 5 and m["revalidations_changed"] == 1
        await mc.close()

    asyncio.run(main())


def test_get_multi_serves_held_keys_and_fetches_the_rest(address):
    async def main():
        mc = near(address)
        await mc.set_multi({"m%d" % i: i for i in range(6)})
        await mc.get_multi(["m0", "m1", "m2"])
        got = await mc.get_multi(["m%d" % i for i in range(6)])
        assert got == {"m%d" % i: i for i in range(6)}
        assert mc.metrics()["near"]["hits"] == 3
        mc.near_cache.ttl = TTL
        await asyncio.sleep(TTL * 1.5)
        fastmc.Client([address]).set("m5", "changed")
        got = await mc.get_multi(["m%d" % i for i in range(6)])
        assert got == {**{"m%d" % i: i for i in range(5)}, "m5": "changed"}
        m = mc.metrics()["near"]
        assert m["revalidations_unchanged"] == 5 and m["revalidations_changed"] == 1
        await mc.close()

    asyncio.run(main())


def test_stale_on_error():
    m = Memcached()
    try:

        async def main():
            mc = near(m.address, ttl=TTL, stale_on_error=True, max_stale=30)
            await mc.set("s", "held")
            assert await mc.get("s") == "held"
            m.stop()
            await asyncio.sleep(TTL * 1.5)
            assert await mc.get("s") == "held"
            assert mc.metrics()["near"]["stale_served"] == 1
            with pytest.raises(fastmc.Error):
                await mc.get("not held")
            await mc.close()

        asyncio.run(main())
    finally:
        m.stop()


def test_one_near_cache_for_a_blocking_and_an_asyncio_client(address):
    nc = fastmc.NearCache(ttl=60, hot_after=1)
    blocking = fastmc.Client([address], near_cache=nc)

    async def main():
        mc = fastmc.aio.Client([address], near_cache=nc)
        await mc.set("shared", b"1")
        assert await mc.get("shared") == b"1"
        blocking.set("shared", b"2")  # drops the copy both clients read
        assert await mc.get("shared") == b"2"
        await mc.close()

    asyncio.run(main())
