"""TTL jitter (behaviors `ttl_jitter`, `ttl_jitter_by_key`; docs/operations.md#ttl-jitter): each
relative expiry a write sends is shortened by up to the given percent of itself, never
lengthened; absolute times and 0 go as given; by key, every client gives a key the same expiry.
Read back from a real memcached with meta `mg <key> t`."""

import asyncio
import time

import fastmc
import fastmc.aio
import pytest
from holdings import ttls

TTL = 1000
KEYS = ["jit:%d" % i for i in range(300)]


def close_to(got, want):
    """Equal but for the server's clock ticking between the two writes."""
    return all(abs(got[k] - want[k]) <= 1 for k in want) and got.keys() == want.keys()


def test_off_by_default_and_left_out_of_the_behaviors(server):
    mc = fastmc.Client([server.address])
    assert mc.set_multi(dict.fromkeys(KEYS, 1), time=TTL) == []
    assert set(ttls(server.address, KEYS).values()) <= {TTL - 1, TTL}
    assert "ttl_jitter" not in mc.get_behaviors()


def test_random_jitter_spreads_within_its_share(server):
    mc = fastmc.Client([server.address], behaviors={"ttl_jitter": 20})
    assert mc.get_behaviors()["ttl_jitter"] == 20
    assert mc.set_multi(dict.fromkeys(KEYS, 1), time=TTL) == []
    left = ttls(server.address, KEYS).values()
    assert all(TTL * 0.8 - 1 <= t <= TTL for t in left), sorted(left)
    assert len(set(left)) > 50 and sum(left) / len(left) < TTL * 0.95
    # random: the same keys written again get other expiries
    assert mc.set_multi(dict.fromkeys(KEYS, 1), time=TTL) == []
    again = ttls(server.address, KEYS).values()
    assert sum(abs(a - b) > 1 for a, b in zip(left, again)) > 100


def test_by_key_every_client_and_every_write_agrees(server):
    behaviors = {"ttl_jitter": 50, "ttl_jitter_by_key": 1}
    one = fastmc.Client([server.address], behaviors=behaviors)
    two = fastmc.Client([server.address], behaviors=behaviors, binary=True)
    assert one.set_multi(dict.fromkeys(KEYS, 1), time=TTL) == []
    want = ttls(server.address, KEYS)
    assert all(TTL / 2 - 1 <= t <= TTL for t in want.values())
    assert len(set(want.values())) > 100
    assert two.set_multi(dict.fromkeys(KEYS, 2), time=TTL) == []
    assert close_to(ttls(server.address, KEYS), want)
    # every write that sets an expiry, each key on its own path
    k = KEYS
    assert one.set(k[0], 1, time=TTL) and one.add(k[1] + "x", 1, time=TTL) is True
    assert one.replace(k[2], 3, time=TTL) and one.touch(k[3], TTL)
    assert one.set(k[4], 4, time=TTL, noreply=True) is True and one.get(k[4]) == 4
    assert one.touch_multi(k[5:8], time=TTL) == []
    assert one.delete(k[8]) and one.incr(k[8], 1, initial=5, time=TTL) == 5
    cas = fastmc.Client([server.address], behaviors={**behaviors, "cas": True})
    _, token = cas.gets(k[9])
    assert cas.cas(k[9], 9, token, time=TTL)

    async def aio():
        async with fastmc.aio.Client([server.address], behaviors=behaviors) as mc:
            assert await mc.set(k[10], 10, time=TTL)
            assert await mc.set_multi({k[11]: 11, k[12]: 12}, time=TTL) == []

    asyncio.run(aio())
    written = k[:1] + k[2:13]
    assert close_to(ttls(server.address, written), {x: want[x] for x in written})
    # the wire key is what counts: the namespace makes another key, so another expiry
    pre = fastmc.Client([server.address], behaviors={**behaviors, "namespace": b"ns:"})
    assert pre.set_multi(dict.fromkeys(KEYS, 1), time=TTL) == []
    other = ttls(server.address, ["ns:" + x for x in KEYS])
    assert sum(abs(other["ns:" + x] - want[x]) > 1 for x in KEYS) > 100


def test_absolute_times_and_no_expiry_go_as_given(server):
    mc = fastmc.Client([server.address], behaviors={"ttl_jitter": 100})
    at = int(time.time()) + TTL
    assert mc.set_multi(dict.fromkeys(KEYS[:50], 1), time=at) == []
    assert all(TTL - 2 <= t <= TTL for t in ttls(server.address, KEYS[:50]).values())
    assert mc.set_multi(dict.fromkeys(KEYS[:50], 1), time=0) == []
    assert set(ttls(server.address, KEYS[:50]).values()) == {-1}
    # never below one second
    assert mc.set(KEYS[0], 1, time=1) and ttls(server.address, KEYS[:1])[KEYS[0]] in (0, 1)


@pytest.mark.parametrize("value", [-1, 101])
def test_a_share_outside_0_to_100_is_refused(server, value):
    with pytest.raises(fastmc.Error):
        fastmc.Client([server.address], behaviors={"ttl_jitter": value})
