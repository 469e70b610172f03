"""Routing keys (`server_key=`; docs/operations.md#routing-keys-keys-that-live-together): every
key method of both clients places its keys on the server its group key maps to, as
libmemcached's `*_by_key` functions do. The oracle is libmemcached itself (the one pylibmc's
wheel bundles, called through ctypes): what it writes by group key, fastmc reads by the same
group key, and fastmc writes to the server libmemcached wrote to, for each distribution, hash,
namespace setting and protocol. Where each key landed is read from each server directly."""

from __future__ import annotations

import asyncio
import ctypes
import glob
import os

import fastmc
import fastmc.aio
import pylibmc
import pytest
from fastmc._fastmc import all_behaviors
from fastmc.consts import distributions, hashers
from holdings import contents

# libmemcached's behavior flags (types/behavior.h) and its namespace callback
BEHAVIOR_FLAGS = {"hash": 2, "ketama": 3, "distribution": 9, "_hash_with_prefix_key": 25}
BINARY_PROTOCOL = 18
CALLBACK_NAMESPACE = 0

# fastmc's behaviors (pylibmc's names); libmemcached gets their codes
CONFIGS = {
    "modula": {},
    "modula-md5": {"hash": "md5"},
    "modula-crc": {"hash": "crc"},
    "ketama": {"ketama": 1},
    "consistent-fnv1a_32": {"distribution": "consistent", "hash": "fnv1a_32"},
    "weighted": {"distribution": "consistent weighted"},
}
CODES = {"hash": hashers, "distribution": distributions}
WEIGHTS = (1, 2, 3)
GROUPS = ["user:%d" % i for i in range(24)]


@pytest.fixture(scope="module")
def libmemcached():
    """The libmemcached of pylibmc's wheel (what pylibmc users run)."""
    libs = os.path.join(os.path.dirname(os.path.dirname(pylibmc.__file__)), "pylibmc.libs")
    found = glob.glob(os.path.join(libs, "libmemcached*.so*"))
    if not found:
        pytest.skip("this pylibmc bundles no libmemcached (built against the system's)")
    lib = ctypes.CDLL(found[0])
    lib.memcached_create.restype = ctypes.c_void_p
    lib.memcached_create.argtypes = [ctypes.c_void_p]
    lib.memcached_free.argtypes = [ctypes.c_void_p]
    lib.memcached_server_add_with_weight.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_ushort,
        ctypes.c_uint32,
    ]
    lib.memcached_behavior_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    lib.memcached_callback_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.memcached_set_by_key.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_long,
        ctypes.c_uint32,
    ]
    return lib


class Libmemcached:
    """A libmemcached client configured as `behaviors` configure fastmc."""

    def __init__(self, lib, servers, behaviors, namespace, binary):
        self.lib = lib
        self.memc = lib.memcached_create(None)
        # as pylibmc does it: the behaviors first, in its order, then the servers
        settings = dict(behaviors, **({"_hash_with_prefix_key": 1} if namespace else {}))
        for name in sorted(settings, key=list(all_behaviors).index):
            value = settings[name]
            code = CODES[name][value] if name in CODES else value
            assert lib.memcached_behavior_set(self.memc, BEHAVIOR_FLAGS[name], code) == 0
        for addr, weight in zip(servers, WEIGHTS):
            host, port = addr.rsplit(":", 1)
            rc = lib.memcached_server_add_with_weight(self.memc, host.encode(), int(port), weight)
            assert rc == 0
        if binary:
            assert lib.memcached_behavior_set(self.memc, BINARY_PROTOCOL, 1) == 0
        if namespace:
            self.ns = ctypes.c_char_p(namespace)
            assert lib.memcached_callback_set(self.memc, CALLBACK_NAMESPACE, self.ns) == 0

    def set_by_key(self, group: bytes, key: bytes, value: bytes) -> None:
        rc = self.lib.memcached_set_by_key(
            self.memc, group, len(group), key, len(key), value, len(value), 0, 0
        )
        assert rc == 0, rc

    def close(self):
        self.lib.memcached_free(self.memc)


def holder(servers, key):
    """The one server that holds `key` (its index)."""
    held = [i for i, got in enumerate(contents(servers, [key])) if key in got]
    assert len(held) == 1, (key, held)
    return held[0]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("namespace", [b"", b"ns:"], ids=["plain", "namespace"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_libmemcached_by_key_and_fastmc_agree(servers, libmemcached, config, namespace, binary):
    behaviors = CONFIGS[config]
    weighted = [f"{a}:{w}" for a, w in zip(servers, WEIGHTS)]
    lm = Libmemcached(libmemcached, servers, behaviors, namespace, binary)
    fast_behaviors = dict(behaviors)
    if namespace:
        fast_behaviors.update(namespace=namespace, _hash_with_prefix_key=1)
    mc = fastmc.Client(weighted, behaviors=fast_behaviors, binary=binary)
    tag = "%s-%s-%s" % (config, namespace.decode() or "plain", binary)
    moved = 0
    try:
        for group in GROUPS:
            key = "%s:%s:profile" % (tag, group)
            lm.set_by_key(group.encode(), key.encode(), b"from libmemcached")
            # fastmc reads it by the group key (and by its own placement only by chance)
            assert mc.get(key, server_key=group) == b"from libmemcached", (key, group)
            wire = (namespace + key.encode()).decode()
            where = holder(servers, wire)
            mine = key + ":fastmc"
            assert mc.set(mine, b"x", server_key=group)
            assert holder(servers, (namespace + mine.encode()).decode()) == where, (mine, group)
            moved += mc.hash(key) != where
    finally:
        lm.close()
    # the group key, not the key, decided for a good share of them
    assert moved >= len(GROUPS) // 4, moved


def every_write(mc, g, k):
    """Each write method once, key `k` + a suffix, by group `g`: the keys it wrote."""
    assert mc.set(k + "set", 1, server_key=g)
    assert mc.add(k + "add", 1, server_key=g)
    assert mc.set(k + "rep", 0, server_key=g) and mc.replace(k + "rep", 1, server_key=g)
    assert mc.set(k + "app", "a", server_key=g) and mc.append(k + "app", "b", server_key=g)
    assert mc.set(k + "pre", "b", server_key=g) and mc.prepend(k + "pre", "a", server_key=g)
    assert mc.set(k + "nr", 1, noreply=True, server_key=g) is True
    assert mc.set_multi({k + "m1": 1, k + "m2": 2}, server_key=g) == []
    assert mc.add_multi({k + "am": 1}, server_key=g) == []
    assert mc.set(k + "ctr", 5, server_key=g) and mc.incr(k + "ctr", server_key=g) == 6
    assert mc.decr(k + "ctr", server_key=g) == 5
    assert mc.incr(k + "new", 1, initial=7, time=60, server_key=g) == 7
    return [
        k + s for s in ("set", "add", "rep", "app", "pre", "nr", "m1", "m2", "am", "ctr", "new")
    ]


def test_every_method_of_the_blocking_client_follows_the_group(servers):
    mc = fastmc.Client(servers, behaviors={"ketama": True, "cas": True})
    for g in GROUPS[:6]:
        k = "blk:%s:" % g
        where = servers[mc.hash(g)]
        written = every_write(mc, g, k)
        for key in written:
            assert holder(servers, key) == servers.index(where), (key, g)
        # reads by the group find them; each read method once
        got = mc.get_multi(written, server_key=g)
        assert set(got) == set(written)
        assert mc.get(k + "set", server_key=g) == 1
        value, token = mc.gets(k + "set", server_key=g)
        assert value == 1
        assert mc.cas(k + "set", 2, token, server_key=g)
        assert mc.gets_multi([k + "set"], server_key=g)[k + "set"][0] == 2
        assert mc.gat(k + "set", 60, server_key=g) == 2
        assert mc.gat_multi([k + "m1"], 60, server_key=g) == {k + "m1": 1}
        assert mc.touch(k + "m1", 60, server_key=g)
        assert mc.touch_multi([k + "m2"], 60, server_key=g) == []
        assert mc.incr_multi([k + "ctr"], server_key=g) is None
        assert mc.get(k + "ctr", server_key=g) == 6
        got = mc.get_or_set(k + "gos", lambda: "computed", 60, server_key=g)
        assert got == "computed" and holder(servers, k + "gos") == servers.index(where)
        assert mc.invalidate(k + "gos", server_key=g)
        assert mc.delete(k + "set", server_key=g)
        assert mc.delete_multi([k + "m1", k + "m2"], server_key=g)
        assert mc.invalidate_multi([k + "add"], server_key=g)
        assert mc.get_multi([k + "set", k + "m1"], server_key=g) == {}


def test_every_method_of_the_asyncio_client_follows_the_group(servers):
    async def main():
        async with fastmc.aio.Client(servers, behaviors={"ketama": True, "cas": True}) as mc:
            blocking = fastmc.Client(servers, behaviors={"ketama": True})
            for g in GROUPS[:6]:
                k = "aio:%s:" % g
                where = servers.index(servers[blocking.hash(g)])
                assert await mc.set(k + "a", 1, server_key=g)
                assert await mc.set_multi({k + "b": 2, k + "c": 3}, server_key=g) == []
                assert await mc.incr(k + "n", 1, initial=1, server_key=g) == 1
                # many requests at once, as the loop would batch them
                await asyncio.gather(*(mc.set(k + str(i), i, server_key=g) for i in range(20)))
                keys = [k + s for s in ("a", "b", "c", "n", *map(str, range(20)))]
                for key in keys:
                    assert holder(servers, key) == where, (key, g)
                got = await mc.get_multi(keys, server_key=g)
                assert set(got) == set(keys)
                assert await mc.get(k + "a", server_key=g) == 1
                gets = await asyncio.gather(*(mc.get(key, server_key=g) for key in keys))
                assert gets == [got[key] for key in keys]
                _, token = await mc.gets(k + "a", server_key=g)
                assert await mc.cas(k + "a", 9, token, server_key=g)
                assert await mc.touch(k + "a", 60, server_key=g)
                assert await mc.gat(k + "a", 60, server_key=g) == 9
                value = await mc.get_or_set(k + "gos", lambda: "v", 60, server_key=g)
                assert value == "v" and holder(servers, k + "gos") == where
                assert await mc.invalidate(k + "gos", server_key=g)
                assert await mc.delete(k + "a", server_key=g)
                assert await mc.delete_multi(keys[1:3], server_key=g)

    asyncio.run(main())


def test_a_call_made_inside_a_grouped_call_has_no_group_of_its_own(servers):
    """A value whose pickling calls the client (with no server_key) places its key by itself,
    not by the group of the call that is pickling it."""
    mc = fastmc.Client(servers, behaviors={"ketama": True})
    inner = ["inner:%d" % i for i in range(12)]

    class Noisy:
        def __reduce__(self):
            for k in inner:
                mc.set(k, 1)
            return (int, (0,))

    assert mc.set("outer", Noisy(), server_key="user:1")
    assert holder(servers, "outer") == mc.hash("user:1")
    assert [holder(servers, k) for k in inner] == [mc.hash(k) for k in inner]
    assert len({mc.hash(k) for k in inner}) > 1  # they would all be on one server otherwise

    async def aio():
        async with fastmc.aio.Client(servers, behaviors={"ketama": True}) as amc:
            assert await amc.set("anr", 1, noreply=True, server_key="user:1")
            assert await amc.get("anr", server_key="user:1") == 1
            assert holder(servers, "anr") == mc.hash("user:1")

    asyncio.run(aio())


def test_a_group_of_the_wrong_type_is_refused_and_an_empty_one_is_none(servers):
    mc = fastmc.Client(servers, behaviors={"ketama": True})
    with pytest.raises(TypeError, match="server_key"):
        mc.get("k", server_key=5)
    # an empty group key places each key by itself, as libmemcached's reads do
    assert mc.set("solo", 1, server_key=b"")
    assert holder(servers, "solo") == mc.hash("solo")
    assert mc.get("solo", server_key=None) == 1
