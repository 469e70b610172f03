"""Requests for one key take effect in the order they were issued (docs/aio.md), whichever path
runs them (the loop's thread, a server's worker, a spanning worker, a merged batch) and whether
their callers awaited them, were cancelled or never awaited them.

A seeded random run issues writes and reads of a few keys from one task, with background tasks
writing other keys so that requests queue up and merge, and cancels some of its requests right
after they were issued. The reads include the repeatable ones, which may change a key but run
side by side with reads and with each other: gat and touch to one expiry, lease reads (a miss
leaves a placeholder, which plain reads see as an empty value) and get_or_set of a key that is
there. Every issued request runs, so a model that applies the writes in issue order knows what
each read must return and what each key holds at the end.

Reads of one hot key never wait for each other: many tasks reading it through a relay that holds
the server's replies until the client has been quiet a moment are served in a few such rounds,
not one round each, while a write of that key still waits for them all."""

import asyncio
import random

import fastmc.aio
import pytest
from fakes import PacedRelay
from memcached import Memcached

KEYS = ["k%d" % i for i in range(4)]
OPS = 250
# What a lease read that found no value leaves: a placeholder, an empty value to a plain read.
# Lease reads are reads: a read issued after one may reach the server before it, so until the
# next write the key is missing or the placeholder (and a second lease read wins or waits).
PLACEHOLDER = b""


class Leases:
    """Where lease reads and writes of each key were issued: a read may meet the placeholder of
    a lease read issued after it, until the next write of the key (reads do not wait for reads)."""

    def __init__(self):
        self.events = {}  # key -> [(step, "lease" or "write")]

    def record(self, op, key, args, step):
        if op == "lease":
            self.events.setdefault(key, []).append((step, "lease"))
        elif op in ("set", "delete", "append"):
            self.events.setdefault(args[0], []).append((step, "write"))
        elif op in ("set_multi", "delete_multi"):
            for k in args[0]:
                self.events.setdefault(k, []).append((step, "write"))

    def after(self, key, step):
        """Whether a lease read of `key` was issued after `step` and before its next write."""
        for s, what in self.events.get(key, []):
            if s > step:
                return what == "lease"
        return False


def _seen(model, key, step, leases):
    """What a read of `key` issued at `step` may return, by the model (asked at the end, once
    every request has been issued)."""
    v = model.get(key)

    def values():
        if v == PLACEHOLDER or (v is None and leases.after(key, step)):
            return [None, PLACEHOLDER]
        return [v]

    return values


def _wants(op, was, seen):
    """What a read may return: checked at the end, when every request has been issued."""

    def want():
        ((_key, vs),) = seen.items() if op != "get_multi" else ((None, None),)
        if op in ("get", "gat", "get_or_set"):
            return vs()
        if op == "touch":
            return [v is not None for v in vs()]
        if op == "lease":
            if isinstance(was, str):
                return [("hit", was)]
            # a placeholder, or a lease read issued later that reached the server first
            return [("win", None)] + [("wait", None)] * (PLACEHOLDER in vs())
        out = [{}]
        for kk, kvs in seen.items():
            out = [{**w, kk: v} if v is not None else w for w in out for v in kvs()]
        return out

    return want


@pytest.fixture(
    scope="module",
    params=[(1, 1), (4, 1), (4, 3)],
    ids=["1-thread", "4-threads", "3-servers"],
)
def pool(request):
    threads, n = request.param
    procs = [Memcached(threads=threads) for _ in range(n)]
    yield [p.address for p in procs]
    for p in procs:
        p.stop()


def _apply(model, op, args):
    """The model's state after a write."""
    if op == "set":
        model[args[0]] = args[1]
    elif op == "delete":
        model.pop(args[0], None)
    elif op == "append":
        if args[0] in model:
            model[args[0]] += args[1]
    elif op == "lease":
        model.setdefault(args[0], PLACEHOLDER)
    elif op == "set_multi":
        model.update(args[0])
    elif op == "delete_multi":
        for k in args[0]:
            model.pop(k, None)


async def _background(mc, stop, n):
    i = 0
    while not stop.is_set():
        i += 1
        await mc.set("bg%d:%d" % (n, i % 50), "x" * (i % 7))
        if i % 5 == 0:
            await mc.delete_multi(["bg%d:%d" % (n, j) for j in range(10)])


async def _lease_read(mc, key):
    """A lease read of `key` (get_or_set's first step), as a coroutine."""
    return await mc._alease_get(key, 30, 0)


async def _run(servers, seed):
    rng = random.Random(seed)
    mc = fastmc.aio.Client(servers)
    stop = asyncio.Event()
    background = []
    issued = []
    try:
        for k in KEYS:
            await mc.delete(k)
        background = [asyncio.ensure_future(_background(mc, stop, n)) for n in range(3)]
        model = {}
        leases = Leases()
        checks = []  # (task, what it must return)
        for step in range(OPS):
            k = rng.choice(KEYS)
            op = rng.choice(
                [
                    "set",
                    "set",
                    "delete",
                    "append",
                    "get",
                    "get",
                    "set_multi",
                    "delete_multi",
                    "get_multi",
                    "gat",
                    "touch",
                    "lease",
                    "lease",
                    "get_or_set",
                ]
            )
            if op == "append" and model.get(k) == PLACEHOLDER:
                op = "set"  # what an append to a placeholder leaves is the server's business
            if op == "get_or_set" and not isinstance(model.get(k), str):
                op = "get"  # a miss computes and stores after awaits of its own: not modelled
            args = ()
            if op == "set":
                args = (k, "v%d" % step)
                coro = mc.set(*args)
            elif op == "delete":
                args = (k,)
                coro = mc.delete(k)
            elif op == "append":
                args = (k, ".%d" % step)
                coro = mc.append(*args)
            elif op == "set_multi":
                args = ({kk: "m%d" % step for kk in rng.sample(KEYS, 2)},)
                coro = mc.set_multi(*args)
            elif op == "delete_multi":
                args = (rng.sample(KEYS, 2),)
                coro = mc.delete_multi(*args)
            elif op == "get":
                coro = mc.get(k)
            elif op == "gat":
                coro = mc.gat(k, rng.choice([100, 200]))
            elif op == "touch":
                coro = mc.touch(k, rng.choice([100, 200]))
            elif op == "lease":
                args = (k,)
                coro = _lease_read(mc, k)
            elif op == "get_or_set":
                coro = mc.get_or_set(k, lambda: pytest.fail("a hit computed"), 100)
            else:
                ks = rng.sample(KEYS, 3)
                coro = mc.get_multi(ks)
            task = asyncio.ensure_future(coro)
            await asyncio.sleep(0)  # the task runs to its first await: the request is issued
            issued.append(task)
            leases.record(op, k, args, step)
            if op in ("get", "gat", "get_or_set", "touch", "lease", "get_multi"):
                seen = {
                    kk: _seen(model, kk, step, leases) for kk in (ks if op == "get_multi" else [k])
                }
                checks.append((task, _wants(op, model.get(k), seen), (op, k, step)))
                if op == "lease":
                    _apply(model, op, args)
            else:
                _apply(model, op, args)
            r = rng.random()
            if r < 0.3:
                task.cancel()
            elif r < 0.4:
                await task
        await asyncio.gather(*issued, return_exceptions=True)
        for task, want, what in checks:
            if not task.cancelled():
                got = task.result()
                if what[0] == "lease":
                    got = got[:2]
                assert got in want(), (seed, what, got, want())
        # wait until every issued request has run (cancelled ones too), then compare
        stop.set()
        await asyncio.gather(*background)
        while mc._in_flight:
            await asyncio.sleep(0.001)
        final = await mc.get_multi(KEYS)
        assert final == model, seed
    finally:
        stop.set()
        await asyncio.gather(*background, *issued, return_exceptions=True)
        await mc.close()


@pytest.mark.parametrize("seed", range(6))
def test_requests_for_one_key_take_effect_in_issue_order(pool, seed):
    asyncio.run(_run(pool, seed))


def _reads(mc, i, key):
    """The i-th of many reads of `key`: every kind of read, the repeatable ones with one expiry
    and one lease."""
    kind = i % 5
    if kind == 0:
        return mc.get(key)
    if kind == 1:
        return mc.get_or_set(key, lambda: pytest.fail("a hit computed"), 100)
    if kind == 2:
        return mc.gat(key, 100)
    if kind == 3:
        return mc._alease_get(key, 10, 0)
    return mc.get_multi([key, "other"])


async def _rounds(mc, relay, keys):
    """How many rounds the relay took to serve reads of `keys` (the i-th read of keys[i]),
    each of which finds "v"."""
    for k in set(keys):
        assert await mc.set(k, "v", 100)
    before = relay.rounds
    results = await asyncio.gather(*(_reads(mc, i, k) for i, k in enumerate(keys)))
    for i, (k, r) in enumerate(zip(keys, results)):
        want = {3: ("hit", "v"), 4: {k: "v"}}.get(i % 5, "v")
        assert (r[:2] if i % 5 == 3 else r) == want, (i, r)
    return relay.rounds - before


def test_reads_of_one_hot_key_run_side_by_side_and_a_write_waits_for_them():
    n = 60
    server = Memcached()
    relay = PacedRelay(server.port, quiet=0.05)

    async def run():
        mc = fastmc.aio.Client([relay.address])
        try:
            assert await mc.get_or_set("warm", lambda: "v", 100) == "v"  # meta support known
            # The reads of one batch run as one call per kind: what n reads of n keys take.
            apart = await _rounds(mc, relay, ["k%d" % i for i in range(n)])
            hot = await _rounds(mc, relay, ["hot"] * n)
            # Reads that each waited for the one before would take a round each.
            assert hot <= apart + 2, (hot, apart)
            # A write waits for the reads issued before it, and a read after it sees it.
            reads = [asyncio.ensure_future(_reads(mc, i, "hot")) for i in range(10)]
            await asyncio.sleep(0)
            write = asyncio.ensure_future(mc.set("hot", "w", 100))
            await asyncio.sleep(0)
            after = asyncio.ensure_future(mc.get("hot"))
            found = await asyncio.gather(*reads)
            assert found[0] == found[1] == found[2] == "v", found
            assert await write and await after == "w"
        finally:
            await mc.close()

    try:
        asyncio.run(run())
    finally:
        relay.close()
        server.stop()
