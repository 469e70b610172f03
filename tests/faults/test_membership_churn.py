"""The server list changing under load: an in-process configuration endpoint
(``config_endpoint.ConfigEndpoint``) adds and removes real memcached servers every few tens of
milliseconds while 8 threads share a blocking client and 100 tasks an asyncio client, both kept
in step by ``fastmc.autodiscovery``. Every value written encodes its key, and every read is
checked: no value ever comes back for another key, no call hangs, and while the removed servers
stay up no call fails at all (a request keeps the list it was routed on and completes there).

A server that is removed and stopped at once fails the requests still in flight to it with the
classes any dead server gives (``DEAD_SERVER_CLASSES``: ``ConnectionError``, ``ReadError``,
``WriteError``, ``ServerDown``, ``ServerDead``); those are the only exceptions allowed there."""

import asyncio
import itertools
import random
import threading
import time

import fastmc
import pytest
from config_endpoint import ConfigEndpoint
from fastmc.autodiscovery import discover, discover_aio
from memcached import Memcached
from threads import run_threads

RUN_SECONDS = 2.5
# What a request in flight to a server that was removed and stopped may raise.
DEAD_SERVER_CLASSES = (
    fastmc.ConnectionError,
    fastmc.ReadError,
    fastmc.WriteError,
    fastmc.ServerDown,
    fastmc.ServerDead,
)
KEYS = ["churn:%d" % i for i in range(400)]


@pytest.fixture
def four():
    procs = [Memcached() for _ in range(4)]
    yield procs
    for p in procs:
        p.stop()


def lists(addresses):
    """Server lists of 2 to 4 of the servers, in a fixed pseudo-random order."""
    rng = random.Random(17)
    out = []
    for _ in range(50):
        n = rng.randint(2, 4)
        out.append(rng.sample(addresses, n))
    return out


def encode(key, n):
    return "%s|%d" % (key, n)


def check(key, value):
    """A read is right when it misses or holds a value written for this key."""
    if value is not None and not (isinstance(value, str) and value.startswith(key + "|")):
        raise AssertionError("key %r read %r" % (key, value))


def churn(ep, addresses, stop, period=0.03):
    for servers in itertools.cycle(lists(addresses)):
        if stop.wait(period):
            return
        ep.set_nodes(servers)


def sync_work(mc, stop, counts, allowed=()):
    def work(i):
        rng = random.Random(i)
        n = 0
        while not stop.is_set():
            n += 1
            key = rng.choice(KEYS)
            op = rng.random()
            try:
                if op < 0.3:
                    mc.set(key, encode(key, n))
                elif op < 0.6:
                    check(key, mc.get(key))
                elif op < 0.75:
                    batch = rng.sample(KEYS, 20)
                    mc.set_multi({k: encode(k, n) for k in batch})
                elif op < 0.95:
                    batch = rng.sample(KEYS, 20)
                    for k, v in mc.get_multi(batch).items():
                        check(k, v)
                else:
                    mc.delete(key)
            except allowed as e:
                if type(e) not in allowed:  # exactly these classes, not their subclasses
                    raise
                counts["allowed"] += 1
            counts["ops"] += 1

    return work


def test_eight_threads_while_servers_come_and_go(four):
    addresses = [p.address for p in four]
    stop = threading.Event()
    counts = {"ops": 0, "allowed": 0}
    with ConfigEndpoint(addresses[:3]) as ep:
        mc = discover(ep.address, interval=0.01, behaviors={"ketama": True})
        changer = threading.Thread(target=churn, args=(ep, addresses, stop))
        changer.start()
        threading.Timer(RUN_SECONDS, stop.set).start()
        try:
            errors = run_threads(sync_work(mc, stop, counts), 8)
        finally:
            stop.set()
            changer.join()
            mc.close()
        versions = ep.version
    assert errors == []
    assert counts["ops"] > 1000
    assert versions > 20  # the list really changed, many times
    assert mc.discovery.config.version > 10


def test_a_removed_server_stopped_at_once_fails_only_with_dead_server_classes(four):
    addresses = [p.address for p in four]
    mc = fastmc.Client(addresses, behaviors={"ketama": True, "retry_timeout": 1})
    stop = threading.Event()
    counts = {"ops": 0, "allowed": 0}
    allowed = DEAD_SERVER_CLASSES
    work = sync_work(mc, stop, counts, allowed)

    def remover():
        for p in four[:2]:
            time.sleep(0.3)
            mc.set_servers([a for a in mc.addresses if a != p.address])
            p.stop()
        time.sleep(0.3)
        stop.set()

    t = threading.Thread(target=remover)
    t.start()
    errors = run_threads(work, 8)
    t.join()
    # Wrong values raise AssertionError, which is not allowed; nothing hung (we got here).
    assert errors == []
    assert mc.addresses == addresses[2:]
    # After the removals only live servers are asked: every call succeeds.
    for k in KEYS[:100]:
        assert mc.set(k, encode(k, 0)) and mc.get(k) == encode(k, 0)


def test_a_hundred_tasks_while_servers_come_and_go(four):
    addresses = [p.address for p in four]
    stop = threading.Event()
    counts = {"ops": 0, "reads": 0}

    async def task(mc, i):
        rng = random.Random(i)
        n = 0
        while not stop.is_set():
            n += 1
            key = rng.choice(KEYS)
            op = rng.random()
            if op < 0.3:
                await mc.set(key, encode(key, n))
            elif op < 0.6:
                check(key, await mc.get(key))
                counts["reads"] += 1
            elif op < 0.75:
                batch = rng.sample(KEYS, 10)
                await mc.set_multi({k: encode(k, n) for k in batch})
            elif op < 0.95:
                batch = rng.sample(KEYS, 10)
                for k, v in (await mc.get_multi(batch)).items():
                    check(k, v)
                counts["reads"] += 1
            else:
                await mc.delete(key)
            counts["ops"] += 1

    async def main(ep):
        mc = await discover_aio(ep.address, interval=0.01, behaviors={"ketama": True})
        try:
            loop = asyncio.get_running_loop()
            loop.call_later(RUN_SECONDS, stop.set)
            tasks = [asyncio.create_task(task(mc, i)) for i in range(100)]
            # Every task finishes: a request queued to a retired worker is not lost.
            done, pending = await asyncio.wait(tasks, timeout=RUN_SECONDS + 10)
            assert not pending
            for t in done:
                t.result()  # any exception (a wrong value included) fails the test
            return mc.discovery.config.version
        finally:
            await mc.close()

    with ConfigEndpoint(addresses[:3]) as ep:
        changer = threading.Thread(target=churn, args=(ep, addresses, stop))
        changer.start()
        try:
            version = asyncio.run(main(ep))
        finally:
            stop.set()
            changer.join()
    assert counts["ops"] > 1000 and counts["reads"] > 300
    assert version > 10
