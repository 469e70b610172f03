"""Requests for one key take effect in the order they were issued (docs/aio.md), whichever path
runs them (the loop's thread, a server's worker, a spanning worker, a merged batch) and whether
their callers awaited them, were cancelled or never awaited them.

A seeded random run issues writes and reads of a few keys from one task, with background tasks
writing other keys so that requests queue up and merge, and cancels some of its requests right
after they were issued. Every issued request runs, so a model that applies the writes in issue
order knows what each read must return and what each key holds at the end."""

import asyncio
import random

import fastmc.aio
import pytest
from memcached import Memcached

KEYS = ["k%d" % i for i in range(4)]
OPS = 250


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
                ]
            )
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
            else:
                ks = rng.sample(KEYS, 3)
                coro = mc.get_multi(ks)
            task = asyncio.ensure_future(coro)
            await asyncio.sleep(0)  # the task runs to its first await: the request is issued
            issued.append(task)
            if op == "get":
                checks.append((task, model.get(k), (op, k, step)))
            elif op == "get_multi":
                want = {kk: model[kk] for kk in ks if kk in model}
                checks.append((task, want, (op, ks, step)))
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
                assert task.result() == want, (seed, what)
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
