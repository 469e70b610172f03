"""fastmc.aio.Client gives what fastmc.Client gives: every differential case of ``cases.py``
(return values, exception classes and messages), text and binary, one and three servers; and the
two clients (and pylibmc) share one cache: values written by one read back identically through
the other, and keys land on the same servers."""

import asyncio

import fastmc
import fastmc.aio
import pylibmc
import pytest
from aio_blocking import Blocking
from cases import CASES, MULTI_SERVER_CASES, TEXT_CASES, VALUES

# Cases about blocking-only API (pools of clients, clone, the mapping protocol's identity).
ALL = {**CASES, **TEXT_CASES}
NOT_ASYNC = {"pool", "clone_same_class"}
# Cases that call with a wrong number of arguments: the coroutines are Python functions, whose
# TypeError says so in Python's words; the class is the same.
ARG_COUNTS = {"delete_argument_messages", "delete_two_args"}


def classes_only(v):
    """`v` with each ("TypeError", message) pair reduced to the class."""
    if isinstance(v, (list, tuple)):
        if len(v) == 2 and v[0] == "TypeError" and isinstance(v[1], str):
            return "TypeError"
        if len(v) == 3 and v[:2] == ("raise", "TypeError"):
            return v[:2]
        return type(v)(classes_only(x) for x in v)
    return v


def detailed(fn):
    """("ok", value) or ("raise", class name, message)."""
    try:
        return ("ok", fn())
    except Exception as e:
        return ("raise", type(e).__name__, str(e))


def both(addrs, name, behaviors=None, binary=False):
    case = ALL[name]
    sync = fastmc.Client(addrs, behaviors=behaviors, binary=binary)
    sync.flush_all()
    ours = detailed(lambda: case(fastmc, sync))
    aio = Blocking(addrs, behaviors=behaviors, binary=binary)
    try:
        aio.flush_all()
        theirs = detailed(lambda: case(fastmc, aio))
    finally:
        aio.close()
    if name in ARG_COUNTS:
        return classes_only(ours), classes_only(theirs)
    return ours, theirs


@pytest.mark.parametrize("name", sorted(set(ALL) - NOT_ASYNC))
def test_case_text(servers, name):
    ours, theirs = both(servers[:1], name)
    assert theirs == ours


@pytest.mark.parametrize("name", sorted(set(CASES) - NOT_ASYNC))
def test_case_binary(servers, name):
    ours, theirs = both(servers[:1], name, binary=True)
    assert theirs == ours


@pytest.mark.parametrize("name", MULTI_SERVER_CASES)
@pytest.mark.parametrize("distribution", ["modula", "consistent"])
def test_case_three_servers(servers, name, distribution):
    ours, theirs = both(servers, name, {"distribution": distribution})
    assert theirs == ours


def test_values_cross_clients_both_ways(servers):
    sync = fastmc.Client(servers)
    oracle = pylibmc.Client(servers)

    async def main():
        async with fastmc.aio.Client(servers) as mc:
            for i, v in enumerate(VALUES):
                sync.set("s%d" % i, v)
                oracle.set("p%d" % i, v)
                await mc.set("a%d" % i, v)
            for i, v in enumerate(VALUES):
                assert await mc.get("s%d" % i) == v
                assert await mc.get("p%d" % i) == v
                assert sync.get("a%d" % i) == v
                assert oracle.get("a%d" % i) == v
            keys = ["a%d" % i for i in range(len(VALUES))]
            assert await mc.get_multi(keys) == sync.get_multi(keys)

    asyncio.run(main())


def test_keys_land_where_pylibmc_puts_them(servers):
    """Each key is written by pylibmc, then overwritten through the asyncio client (single and
    multi sets): the new value is on the server pylibmc chose, and on no other."""
    keys = ["place%d" % i for i in range(200)]
    behaviors = {"distribution": "consistent"}
    per_server = [fastmc.Client([a]) for a in servers]
    oracle = pylibmc.Client(servers, behaviors=behaviors)
    oracle.flush_all()
    oracle.set_multi(dict.fromkeys(keys, "pylibmc"))
    home = {k: [i for i, c in enumerate(per_server) if c.get(k) is not None] for k in keys}
    assert all(len(h) == 1 for h in home.values())
    assert len({h[0] for h in home.values()}) == 3

    async def main():
        async with fastmc.aio.Client(servers, behaviors=behaviors) as mc:
            await mc.set_multi(dict.fromkeys(keys[100:], "aio"))
            await asyncio.gather(*(mc.set(k, "aio") for k in keys[:100]))

    asyncio.run(main())
    for k in keys:
        assert [i for i, c in enumerate(per_server) if c.get(k) == "aio"] == home[k]
        assert [i for i, c in enumerate(per_server) if c.get(k) is not None] == home[k]


def test_overridden_serialize_and_deserialize(server):
    class Upper(fastmc.aio.Client):
        def serialize(self, value):
            return str(value).upper().encode(), 0

        def deserialize(self, data, flags):
            return data.decode() + "!"

    async def main():
        async with Upper([server.address]) as mc:
            await mc.set("u", "abc")
            assert await mc.get("u") == "ABC!"
            await mc.set_multi({"u1": "x", "u2": "y"})
            assert await mc.get_multi(["u1", "u2"]) == {"u1": "X!", "u2": "Y!"}

    asyncio.run(main())


def test_requests_of_concurrent_tasks_travel_together(relayed):
    """100 tasks each awaiting one get at the same time: the server receives far fewer
    request lines than requests (gets merged into multi-key lines by the server's worker),
    and every task gets its own value."""
    server, relay = relayed
    fastmc.Client([server.address]).set_multi({"t%d" % i: i for i in range(100)})

    async def main():
        async with fastmc.aio.Client(["127.0.0.1:%d" % relay.port]) as mc:
            await mc.get("warm")
            relay.take()
            got = await asyncio.gather(*(mc.get("t%d" % i) for i in range(100)))
            assert got == list(range(100))
            return relay.take()

    sent = asyncio.run(main())
    lines = [line for line in sent.split(b"\r\n") if line.startswith(b"get ")]
    keys = sum(len(line.split()) - 1 for line in lines)
    assert keys == 100
    assert len(lines) <= 20, len(lines)
