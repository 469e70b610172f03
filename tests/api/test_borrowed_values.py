"""Values of 32 KiB or more are sent from the caller's own bytes, between their command line and
its end, by vectored sends, instead of being copied into the request buffer. What reaches the
server must be byte for byte what the copy sent: a single set, a quiet batch with large and
small values, after a sync marker put in front of the requests, and in the pieces of a large
write; the asyncio client's loop copies them in, and agrees."""

import asyncio
import os

import fastmc
import fastmc.aio

BIG1, BIG2 = os.urandom(100_000), os.urandom(40_000)


def quiet_probe(mc):
    """A first batch probes the server for the meta protocol; later batches are quiet."""
    assert mc.set_multi({"probe1": 1, "probe2": 2}) == []


def test_a_large_set_goes_out_as_its_copy_would(relayed):
    _server, relay = relayed
    mc = fastmc.Client([relay.address])
    assert mc.set("c", BIG1)
    assert relay.take() == b"set c 0 0 100000\r\n" + BIG1 + b"\r\n"
    assert mc.get("c") == BIG1


def test_a_quiet_batch_of_large_and_small_values(relayed):
    _server, relay = relayed
    mc = fastmc.Client([relay.address])
    quiet_probe(mc)
    relay.take()
    assert mc.set_multi({"a": BIG1, "s": b"x", "b": BIG2}) == []
    # A large value is a quiet segment of its own, so its error line would be its own.
    assert relay.take() == (
        b"ms a 100000 q\r\n" + BIG1 + b"\r\nmn\r\n"
        b"ms s 1 q\r\nx\r\nmn\r\n"
        b"ms b 40000 q\r\n" + BIG2 + b"\r\nmn\r\n"
    )
    assert mc.get_multi(["a", "s", "b"]) == {"a": BIG1, "s": b"x", "b": BIG2}


def test_after_a_sync_marker_put_in_front(relayed):
    _server, relay = relayed
    mc = fastmc.Client([relay.address])
    mc.set("n", 1, noreply=True)  # not waited for: the next request starts with a marker
    assert mc.set("c", BIG2)
    sent = relay.take()
    assert sent.endswith(b"version\r\nset c 0 0 40000\r\n" + BIG2 + b"\r\n")
    assert mc.get_multi(["n", "c"]) == {"n": 1, "c": BIG2}


def test_large_values_in_the_pieces_of_a_large_write(servers):
    mc = fastmc.Client(servers)
    data = {"bp%d" % i: (BIG2 if i % 500 == 7 else b"v%d" % i) for i in range(5000)}
    assert mc.set_multi(data) == []
    assert mc.set_multi(data) == []  # quiet this time
    assert mc.get_multi(list(data)) == data


def test_the_loops_copy_agrees(relayed):
    _server, relay = relayed
    want = {"a": BIG1, "s": b"x", "b": BIG2}

    async def main():
        async with fastmc.aio.Client([relay.address]) as mc:
            assert await mc.set_multi({"probe1": 1, "probe2": 2}) == []
            await asyncio.sleep(0.05)
            relay.take()
            assert await mc.set_multi(want) == []
            return relay.take()

    on_loop = asyncio.run(main())
    mc = fastmc.Client([relay.address])
    quiet_probe(mc)
    relay.take()
    assert mc.set_multi(want) == []
    assert relay.take() == on_loop
