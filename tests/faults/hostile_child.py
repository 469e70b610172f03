"""The client side of test_hostile_servers.py, in a process of its own so that its peak RSS is
the client's alone: one JSON argument (``op``, ``server``, ``size``), one JSON line out with the
exception class the call raised (``raised``), the one it should raise (``expected``), its
message, how much the peak RSS grew during the call (``grew``, bytes) and whether the client
then worked (``after``). For a large read (``get_large``, ``get_multi_large``) the message is
the type of the value read and ``grew`` counts from the RSS just before the read. Also run by
hand to measure a large value's peak:
``python hostile_child.py '{"op": "get_large", "server": "127.0.0.1:11211", "size": ...}'``."""

import asyncio
import json
import sys

import fastmc
import fastmc.aio


def status(field="VmHWM"):
    """A line of /proc/self/status in bytes: by default the process's peak RSS so far."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no " + field)


def peak():
    return status()


def reset_peak():
    """The peak RSS starts over from the current RSS; the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status("VmRSS")


KEYS = ["k%d" % i for i in range(100)]

# What each flood raises: a protocol error ends the reply (get_multi raises when its only
# server failed; get_stats reports the server's failure as pylibmc does).
EXPECTED = {
    "get_multi": "ProtocolError",
    "aio_get_multi": "ProtocolError",
    "set_multi": "ProtocolError",
    "get_stats": "SomeErrors",
    "get_big": "AllocationError",
    "get_large": None,
    "get_multi_large": None,
}

# A large value read whole: what the server sent (bytes, or str with flags 16), by get or in a
# get_multi with a key that misses.
LARGE_READS = {
    "get_large": lambda mc: mc.get("big"),
    "get_multi_large": lambda mc: mc.get_multi(["big", "other"])["big"],
}


def large(op, mc, size):
    """One large read; the growth of the peak RSS over the RSS just before it."""
    before = reset_peak()
    value = LARGE_READS[op](mc)
    grew = peak() - before
    assert len(value) == size, len(value)
    return None, type(value).__name__, grew, "ok"


def blocking(op, mc, size):
    if op in LARGE_READS:  # (that server answers every read with the value)
        return large(op, mc, size)
    mc.set("warm", "up")  # a pooled connection, and the meta probe for set_multi
    mc.set_multi({"w1": 1, "w2": 2})
    before = peak()
    raised, message = None, ""
    try:
        if op == "get_multi":
            mc.get_multi(KEYS)
        elif op == "set_multi":
            mc.set_multi({k: 1 for k in KEYS})
        elif op == "get_stats":
            mc.get_stats()
        elif op == "get_big":
            mc.get("big")
    except fastmc.Error as e:
        raised, message = type(e).__name__, str(e)
    grew = peak() - before
    mc.set("after", "fine")
    after = "ok" if mc.get("after") == "fine" else "broken"
    return raised, message, grew, after


async def asynchronous(server, behaviors):
    mc = fastmc.aio.Client([server], behaviors=behaviors)
    await mc.set("warm", "up")
    before = peak()
    raised, message = None, ""
    try:
        await mc.get_multi(KEYS)
    except fastmc.Error as e:
        raised, message = type(e).__name__, str(e)
    grew = peak() - before
    await mc.set("after", "fine")
    after = "ok" if await mc.get("after") == "fine" else "broken"
    return raised, message, grew, after


def main():
    args = json.loads(sys.argv[1])
    op = args["op"]
    behaviors = {"retry_timeout": -1, **args.get("behaviors", {})}
    if op.startswith("aio_"):
        raised, message, grew, after = asyncio.run(asynchronous(args["server"], behaviors))
    else:
        mc = fastmc.Client([args["server"]], behaviors=behaviors)
        raised, message, grew, after = blocking(op, mc, args.get("size", 0))
    report = {
        "raised": raised,
        "expected": EXPECTED[op],
        "message": message[:300],
        "grew": grew,
        "after": after,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
