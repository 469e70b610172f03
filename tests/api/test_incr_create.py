"""incr/decr with ``initial=`` (and ``time=``): a missing counter is created at its initial value.

Three ways to the same result, compared with one another and with a model of memcached's
counters: the meta ``ma`` command's auto-create (memcached with the meta protocol: one round
trip), the binary protocol's own initial value, and, where the server has no meta protocol
(twemproxy), the classic ``incr`` then ``add``. The same script runs on each, on both clients,
and on fastmc.testing's fake; results, exceptions, stored bytes, flags and expiry must agree.
"""

from __future__ import annotations

import asyncio
import socket

import fastmc
import fastmc.aio
import pytest
from fakes import LineServer, ScriptedServer
from fastmc.testing import FakeServer
from memcached import Memcached
from nutcracker import Nutcracker

MAX = 2**64 - 1

# (method, key, delta, initial, time): None for initial means a plain incr/decr.
SCRIPT = [
    ("incr", "a", 1, 10, 0),
    ("incr", "a", 5, 10, 0),
    ("decr", "b", 3, 2, 0),
    ("decr", "b", 3, 2, 0),
    ("incr", "plain", 1, None, 0),
    ("incr", "max", 1, MAX, 0),
    ("incr", "max", 1, MAX, 0),
    ("incr", "text", 1, 0, 0),
    ("incr", "ttl", 2, 7, 100),
    ("decr", "ttl", 1, 7, 100),
]


def model() -> list[object]:
    """What memcached's counters give for SCRIPT (with ``text`` holding a non-number)."""
    held: dict[str, object] = {"text": b"x"}
    out: list[object] = []
    for method, key, delta, initial, _ in SCRIPT:
        if key not in held:
            if initial is None:
                out.append(fastmc.NotFound)
                continue
            held[key] = initial
            out.append(initial)
            continue
        v = held[key]
        if not isinstance(v, int):
            out.append(fastmc.ClientError)
            continue
        v = (v + delta) % 2**64 if method == "incr" else max(v - delta, 0)
        held[key] = v
        out.append(v)
    return out


def outcome(call) -> object:
    try:
        return call()
    except fastmc.Error as e:
        return type(e)


def run_blocking(mc) -> list[object]:
    mc.set("text", b"x")
    out: list[object] = []
    for m, k, d, i, t in SCRIPT:
        kw = {} if i is None else {"initial": i, "time": t}
        out.append(outcome(lambda m=m, k=k, d=d, kw=kw: getattr(mc, m)(k, d, **kw)))
    return out


def run_aio(address: str, **kw) -> list[object]:
    async def go() -> list[object]:
        out: list[object] = []
        async with fastmc.aio.Client([address], **kw) as mc:
            await mc.set("text", b"x")
            for m, k, d, i, t in SCRIPT:
                call = getattr(mc, m)
                try:
                    out.append(await (call(k, d) if i is None else call(k, d, initial=i, time=t)))
                except fastmc.Error as e:
                    out.append(type(e))
        return out

    return asyncio.run(go())


def raw(address: str, line: bytes, lines: int = 1) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(line)
        got = b""
        while got.count(b"\r\n") < lines:
            got += s.recv(4096)
        return got


def stored(address: str) -> tuple[bytes, bytes]:
    """What the server holds for "a" (value and flags) and the expiry class of "ttl"."""
    a = raw(address, b"mg a v f\r\n", lines=2)
    ttl = raw(address, b"mg ttl t\r\n").split()
    t = int(ttl[1][1:])
    return a, b"expires" if 0 < t <= 100 else b"t=%d" % t


@pytest.fixture
def backend():
    m = Memcached()
    yield m
    m.stop()


@pytest.mark.parametrize("path", ["meta", "binary", "twemproxy", "meta aio", "twemproxy aio"])
def test_every_path_gives_memcacheds_counters(backend, path):
    want = model()
    proxy = Nutcracker([backend]) if path.startswith("twemproxy") else None
    address = proxy.address if proxy else backend.address
    try:
        if path.endswith("aio"):
            got = run_aio(address)
        else:
            mc = fastmc.Client([address], binary=path == "binary")
            got = run_blocking(mc)
            # A non-number fails as it fails a plain incr (the binary protocol's class is its
            # own: UnknownReadFailure).
            want[7] = outcome(lambda: mc.incr("text", 1))
    finally:
        if proxy:
            proxy.close()
    assert got == want
    # A created counter holds its digits under flags 0, whichever way it was created, and the
    # expiry it was created with.
    assert stored(backend.address) == (b"VA 2 f0\r\n15\r\n", b"expires")


def test_the_fake_gives_what_memcached_gives(backend):
    with FakeServer() as fake:
        assert run_blocking(fake.client()) == run_blocking(fastmc.Client([backend.address]))
        assert fake.items()[b"a"][:2] == (b"15", 0)
        assert 0 < (fake.items()[b"ttl"][2] or 0) <= 100


def test_a_created_counter_is_one_ma_command(relayed):
    _, relay = relayed
    mc = fastmc.Client([relay.address])
    assert mc.incr("hits", initial=5, time=60) == 5
    sent = relay.take_until(lambda got: got.endswith(b" v\r\n"))
    assert sent.endswith(b"ma hits N60 J5 D1 v\r\n")
    assert sent.count(b"\r\n") == 2  # the meta probe `mn`, then the one command
    assert mc.decr("hits", 2, initial=5) == 3
    assert relay.take_until(lambda got: got.endswith(b"\r\n")) == b"ma hits N0 J5 D2 MD v\r\n"


def test_on_three_servers_each_key_is_created_on_one_server():
    procs = [Memcached() for _ in range(3)]
    try:
        mc = fastmc.Client([p.address for p in procs], behaviors={"ketama": True})
        keys = ["k%d" % i for i in range(30)]
        assert [mc.incr(k, initial=i) for i, k in enumerate(keys)] == list(range(30))
        assert mc.get_multi(keys) == {k: str(i).encode() for i, k in enumerate(keys)}
        held = [fastmc.Client([p.address]).get_multi(keys) for p in procs]
        assert sorted(k for h in held for k in h) == sorted(keys)
        assert all(held)  # spread over the three
    finally:
        for p in procs:
            p.stop()


class AddLoses(LineServer):
    """A server without the meta protocol where another client creates the counter between
    this client's `incr` (a miss) and its `add` (not stored): the `incr` is sent again."""

    incrs = 0

    def answer(self, line):
        if line.startswith(b"add "):
            return b"NOT_STORED\r\n"
        if line.startswith(b"incr "):
            self.incrs += 1
            return b"NOT_FOUND\r\n" if self.incrs == 1 else b"8\r\n"
        return b"" if line == b"1" else b"ERROR\r\n"  # the add's data block: no answer


def test_the_fallback_increments_a_counter_another_client_created():
    with AddLoses() as s:
        mc = fastmc.Client([s.address])
        assert mc.incr("c", 1, initial=1) == 8
        lines = [ln for ln in bytes(s.received).split(b"\r\n") if ln]
        assert [ln.split()[0] for ln in lines] == [b"mn", b"incr", b"add", b"1", b"incr"]


@pytest.mark.parametrize(
    ("kw", "exc"),
    [
        ({"time": 5}, TypeError),
        ({"initial": -1}, ValueError),
        ({"initial": 2**64}, ValueError),
        ({"initial": "1"}, TypeError),
        ({"initial": 1.5}, TypeError),
        ({"initial": True}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_sent(kw, exc):
    with ScriptedServer() as s:
        with pytest.raises(exc):
            fastmc.Client([s.address]).incr("k", **kw)

        async def aio() -> None:
            async with fastmc.aio.Client([s.address]) as mc:
                await mc.decr("k", **kw)

        with pytest.raises(exc):
            asyncio.run(aio())
        assert bytes(s.received) == b""


def test_initial_none_is_a_plain_incr(server):
    mc = fastmc.Client([server.address])
    mc.delete("n")
    with pytest.raises(fastmc.NotFound):
        mc.incr("n", initial=None)
