"""debug(key) (docs/operations.md#debug-what-the-server-holds-of-a-key): memcached's meta debug
command, an item's metadata as the server reports it, or None for a missing key; on both
clients, with a namespace and a routing key, against a real memcached and the in-process fake;
where the command cannot be sent (the binary protocol), pylibmc's NotSupported-class error."""

import asyncio

import fastmc
import fastmc.aio
import fastmc.testing
import pytest

FIELDS = {"exp", "la", "cas", "fetch", "cls", "size"}
CAS = {"cas": True}  # for gets, the CAS debug should report


def check(meta, cas, value_len, ttl):
    assert set(meta) >= FIELDS, meta
    assert meta["cas"] == cas
    assert isinstance(meta["fetch"], bool)
    assert meta["cls"] >= 1 and meta["size"] >= 48 + value_len
    # memcached 1.6.18 (Debian bookworm) reports the seconds left with the sign flipped;
    # 1.6.45 and the fake report them as they are; -1 is no expiry on both
    assert meta["exp"] == -1 if ttl == 0 else ttl - 2 <= abs(meta["exp"]) <= ttl


@pytest.fixture(params=["memcached", "fake"])
def address(request, server):
    if request.param == "memcached":
        yield server.address
    else:
        with fastmc.testing.FakeServer() as fake:
            yield fake.address


def test_an_item_as_the_server_reports_it(address):
    mc = fastmc.Client([address], behaviors=CAS)
    mc.set("dbg", b"abc", time=100)
    _, cas = mc.gets("dbg")
    meta = mc.debug("dbg")
    check(meta, cas, 3, 100)
    mc.set("forever", b"x" * 1000)
    check(mc.debug("forever"), mc.gets("forever")[1], 1000, 0)
    assert mc.debug("missing") is None
    mc.delete("dbg")
    assert mc.debug("dbg") is None


def test_a_fetch_is_seen_by_the_real_server(server):
    mc = fastmc.Client([server.address])
    mc.set("fetched", 1)
    assert mc.debug("fetched")["fetch"] is False
    mc.get("fetched")
    assert mc.debug("fetched")["fetch"] is True


def test_namespace_and_routing_key(servers):
    ns = fastmc.Client(servers[:1], behaviors={"namespace": b"ns:", **CAS})
    ns.set("spaced", 1)
    assert ns.debug("spaced")["cas"] == ns.gets("spaced")[1]
    plain = fastmc.Client(servers[:1])
    assert plain.debug("spaced") is None and plain.debug("ns:spaced") is not None
    mc = fastmc.Client(servers, behaviors=CAS)
    mc.set("grouped", 1, server_key="user:7")
    assert mc.debug("grouped", server_key="user:7") is not None
    holder = [a for a in servers if fastmc.Client([a]).get("grouped") is not None]
    assert len(holder) == 1
    others = [a for a in servers if a not in holder]
    assert all(fastmc.Client([a]).debug("grouped") is None for a in others)
    assert fastmc.Client(holder).debug("grouped")["cas"] == mc.gets("grouped", "user:7")[1]


def test_bad_keys_and_the_binary_protocol(server):
    mc = fastmc.Client([server.address])
    with pytest.raises(ValueError, match="too long"):  # as pylibmc refuses any such key
        mc.debug("x" * 251)
    with pytest.raises(TypeError):
        mc.debug(3)
    binary = fastmc.Client([server.address], binary=True)
    with pytest.raises(fastmc.Error, match="debug"):
        binary.debug("k")


def test_the_asyncio_client(address):
    async def run():
        async with fastmc.aio.Client([address], behaviors=CAS) as mc:
            await mc.set("adbg", b"v", time=50)
            _, cas = await mc.gets("adbg")
            return await mc.debug("adbg"), await mc.debug("nope"), cas

    meta, missing, cas = asyncio.run(run())
    check(meta, cas, 1, 50)
    assert missing is None
