"""Large values come back intact through every read path: values over the read buffer's usual
64 KiB, and over 1 MiB, whose read buffer becomes the value's instead of being copied out of
(one per read of the reply; others read with it are copied). get, gets, get_multi with
several large values in one reply and small ones between them, str and bytes, the text and
binary protocols, one server and three, and the asyncio client."""

import asyncio
import hashlib

import fastmc
import fastmc.aio
import pytest
from memcached import Memcached

SIZES = (70_000, 900_000, 1_100_000, 3 << 20)


@pytest.fixture(scope="module")
def big_servers():
    """Three memcached that store items up to 8 MiB."""
    procs = [Memcached("-I", "8m", memory_mb=128) for _ in range(3)]
    yield [p.address for p in procs]
    for p in procs:
        p.stop()


def value(key, size):
    """Bytes that differ at every offset and from key to key: a slice taken at a wrong offset,
    or another key's value, cannot pass."""
    seed = hashlib.sha256(key.encode()).digest()
    block = b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(256))
    return (block * (size // len(block) + 1))[:size]


def mapping(tag):
    """Large values with small ones between them, a str among them."""
    out = {}
    for i, size in enumerate(SIZES):
        out[f"{tag}:big{i}"] = value(f"{tag}:big{i}", size)
        out[f"{tag}:small{i}"] = b"s%d" % i
    out[f"{tag}:text"] = value(f"{tag}:text", 2 << 20).hex()[: 2 << 20]
    return out


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("nservers", [1, 3])
def test_large_values_read_back_intact(big_servers, binary, nservers):
    mc = fastmc.Client(big_servers[:nservers], binary=binary, behaviors={"cas": True})
    want = mapping(f"l{int(binary)}{nservers}")
    assert mc.set_multi(want) == []
    keys = [*want, "missing"]
    for _ in range(2):  # the connections' read buffers as the first round left them
        assert mc.get_multi(keys) == want
        for k, v in want.items():
            assert mc.get(k) == v
        k = next(iter(want))
        got, cas = mc.gets(k)
        assert got == want[k] and cas
    # A small reply after large ones, on the same connections.
    assert mc.get_multi([k for k in want if "small" in k]) == {
        k: v for k, v in want.items() if "small" in k
    }


def test_large_values_read_back_intact_through_asyncio(big_servers):
    want = mapping("aio")

    async def main():
        mc = fastmc.aio.Client(big_servers)
        assert await mc.set_multi(want) == []
        assert await mc.get_multi(list(want)) == want
        # One call alone (the loop's thread may run it) and several at once (the workers).
        k = next(iter(want))
        assert await mc.get(k) == want[k]
        got = await asyncio.gather(*(mc.get(k) for k in want))
        assert got == list(want.values())

    asyncio.run(main())
