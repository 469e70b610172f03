"""num_replicas when servers fail, side by side with real pylibmc on the same servers: reads of a
key whose server is dead (killed, port closed) come from its replicas, in order, and a key no
server can answer is a miss; a server killed under a pooled connection, or stopped (SIGSTOP:
timeouts), fails over in pylibmc only from the call after the one that failed, in fastmc at
once; what set, delete and the commands libmemcached does not replicate do while the key's server
is down; the text protocol, which ignores num_replicas; and the asyncio client
(docs/failures.md#replicas-num_replicas-binary-protocol)."""

import os
import signal

import fastmc
import pylibmc
import pytest
from aio_blocking import Blocking
from cases import outcome
from holdings import contents, put
from memcached import Memcached, sigstop

KEYS = ["f%d" % i for i in range(12)]
FAST = {"_poll_timeout": 300, "retry_timeout": 30}


@pytest.fixture
def cluster():
    """Five real memcached processes of the test's own (it may kill or stop them)."""
    procs = [Memcached() for _ in range(5)]
    yield procs
    for p in procs:
        p.stop()


def mark(addrs, keys):
    """Every server holds every key, its value naming the server ("s0", "s1", ...)."""
    for i, a in enumerate(addrs):
        put([a], keys, b"s%d" % i)


def reads(mc, keys):
    return (
        [outcome(lambda k=k: mc.get(k)) for k in keys],
        outcome(lambda: mc.get_multi(keys)),
        [outcome(lambda k=k: mc.gets(k)[0]) for k in keys],
    )


def answered_by(count, replicas, dead, own):
    """The server a key whose own server is `own` is read from: the first of it and its
    replicas (the servers after it, wrapping) that is alive; None if all are dead."""
    for step in range(min(replicas, count - 1) + 1):
        s = (own + step) % count
        if s not in dead:
            return s
    return None


@pytest.mark.parametrize(
    "count,replicas,dead",
    [
        (3, 1, {2}),
        (3, 2, {0, 1}),
        (5, 1, {0, 1}),
        (5, 2, {0, 1}),
        (5, 7, {1, 2, 3}),
        (3, 2, {0, 1, 2}),
    ],
    ids=str,
)
def test_a_dead_servers_keys_are_read_from_their_replicas(cluster, count, replicas, dead):
    procs = cluster[:count]
    addrs = [p.address for p in procs]
    mark(addrs, KEYS)
    for i in dead:
        procs[i].stop()
    behaviors = dict(FAST, num_replicas=replicas, cas=True)
    theirs = reads(pylibmc.Client(addrs, binary=True, behaviors=behaviors), KEYS)
    ours = reads(fastmc.Client(addrs, binary=True, behaviors=behaviors), KEYS)
    owners = pylibmc.Client(addrs, binary=True)
    want = []
    for k in KEYS:
        s = answered_by(count, replicas, dead, owners.hash(k))
        want.append(None if s is None else b"s%d" % s)
    # get and gets: the same as pylibmc's, each from the first live server of the key's
    assert (ours[0], ours[2]) == (theirs[0], theirs[2])
    assert ours[0] == [("ok", v) for v in want]
    # get_multi: each key from the same server as get. libmemcached's get_multi skips a key
    # whose next replica failed for another key of the call and ends the round without it,
    # so with two dead servers in a row it misses keys that its get finds
    assert ours[1] == ("ok", {k: v for k, v in zip(KEYS, want) if v is not None})
    assert theirs[1][1].items() <= ours[1][1].items()
    if (count, replicas, dead) == (5, 2, {0, 1}):
        assert theirs[1][1] != ours[1][1]


def test_a_server_killed_under_a_pooled_connection(cluster):
    """pylibmc sends the read on the connection the server closed, fails it (a miss or
    ConnectionError), and reads the replica from the next call on; fastmc's read finds the
    connection closed, cannot connect again, and asks the replica in the same call."""
    addrs = [p.address for p in cluster[:3]]
    mark(addrs, KEYS)
    behaviors = dict(FAST, num_replicas=1)
    clients = [mod.Client(addrs, binary=True, behaviors=behaviors) for mod in (pylibmc, fastmc)]
    for mc in clients:
        assert mc.get_multi(KEYS) == {k: b"s%d" % mc.hash(k) for k in KEYS}
    key = KEYS[0]
    own = clients[0].hash(key)
    cluster[own].stop()
    replica = b"s%d" % ((own + 1) % 3)
    theirs, ours = ([outcome(lambda mc=mc: mc.get(key)) for _ in range(3)] for mc in clients)
    assert theirs[0] in (("ok", None), ("raise", "ConnectionError"))
    assert theirs[1:] == [("ok", replica), ("ok", replica)]
    assert ours == [("ok", replica)] * 3


def test_a_stopped_server_times_out_then_its_replica_answers(cluster):
    """SIGSTOP: connections are accepted and nothing is answered. pylibmc's read times out (it
    fails over only when sending fails: a miss or an error) and its next read goes to the
    replica; fastmc's read times out on the key's own server and asks the replica in the same
    call."""
    addrs = [p.address for p in cluster[:3]]
    mark(addrs, KEYS)
    behaviors = dict(FAST, num_replicas=1)
    clients = [mod.Client(addrs, binary=True, behaviors=behaviors) for mod in (pylibmc, fastmc)]
    for mc in clients:
        mc.get_multi(KEYS)
    key = KEYS[0]
    own = clients[0].hash(key)
    sigstop(cluster[own].proc.pid)
    try:
        replica = b"s%d" % ((own + 1) % 3)
        theirs, ours = ([outcome(lambda mc=mc: mc.get(key)) for _ in range(2)] for mc in clients)
        assert theirs[0] in (("ok", None), ("raise", "Error"))
        assert theirs[1] == ("ok", replica)
        assert ours == [("ok", replica)] * 2
        # and a get_multi, once both have the server in their retry window
        owners = {k: clients[0].hash(k) for k in KEYS}
        want = {k: b"s%d" % (s if s != own else (own + 1) % 3) for k, s in owners.items()}
        assert [mc.get_multi(KEYS) for mc in clients] == [want, want]
    finally:
        os.kill(cluster[own].proc.pid, signal.SIGCONT)


WRITES = {
    "set": lambda mc, k: mc.set(k, "new"),
    "set_multi": lambda mc, k: mc.set_multi({k: "new"}),
    "delete": lambda mc, k: mc.delete(k),
    "delete_multi": lambda mc, k: mc.delete_multi([k]),
    "add": lambda mc, k: mc.add(k, "new"),
    "replace": lambda mc, k: mc.replace(k, "new"),
    "append": lambda mc, k: mc.append(k, "new"),
    "cas": lambda mc, k: mc.cas(k, "new", 1),
    "incr": lambda mc, k: mc.incr(k),
    "touch": lambda mc, k: mc.touch(k, 100),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_writes_while_the_keys_server_is_down(cluster, name):
    """The key's own server is dead and in its retry window. Every write raises as pylibmc's
    does; only set and delete reach the replicas. libmemcached writes a set's replicas only after
    the key's own write was sent, so its replica keeps the old value; fastmc writes them with it,
    so that the reads that fail over find the value last set
    (docs/failures.md#replicas-num_replicas-binary-protocol)."""
    procs = cluster[:3]
    addrs = [p.address for p in procs]
    key = "w"
    own = pylibmc.Client(addrs, binary=True).hash(key)
    procs[own].stop()
    alive = [a for i, a in enumerate(addrs) if i != own]
    behaviors = dict(FAST, num_replicas=1, _poll_timeout=300)
    traces = []
    for mod in (pylibmc, fastmc):
        put(alive, [key], b"5")
        mc = mod.Client(addrs, binary=True, behaviors=behaviors)
        mc.get(key)  # the read fails over and leaves the server in its retry window
        r = outcome(lambda mc=mc: WRITES[name](mc, key))
        mc.disconnect_all()
        traces.append((r, [c.get(key) for c in contents(alive, [key])]))
    theirs, ours = traces
    if name == "touch":
        # pylibmc's touch does not look at the retry window (WriteError), with or without
        # replicas; fastmc's skips the server (ServerDown)
        assert theirs[0] == ("raise", "WriteError") and ours[0] == ("raise", "ServerDown")
    else:
        assert ours[0] == theirs[0]
    replica = alive.index(addrs[(own + 1) % 3])
    if name in ("set", "set_multi"):
        assert theirs[1][replica] == b"5"
        assert ours[1][replica] == b"new"
        ours[1][replica] = b"5"
    elif name in ("delete", "delete_multi"):
        assert theirs[1][replica] is None
    assert ours[1] == theirs[1]


def test_the_text_protocol_does_not_fail_over(cluster):
    addrs = [p.address for p in cluster[:3]]
    mark(addrs, KEYS)
    cluster[0].stop()
    results = []
    for mod in (pylibmc, fastmc):
        mc = mod.Client(addrs, behaviors=dict(FAST, num_replicas=2))
        key = next(k for k in KEYS if mc.hash(k) == 0)
        results.append(
            (
                outcome(lambda mc=mc, key=key: mc.get(key)),
                outcome(lambda mc=mc, key=key: mc.get(key)),
                outcome(lambda mc=mc: mc.get_multi(KEYS)),
            )
        )
    theirs, ours = results
    assert ours == theirs
    assert ours[0] == ("raise", "ConnectionError") and ours[1] == ("raise", "ServerDown")
    assert ours[2][1] == {k: b"s%d" % h for k in KEYS if (h := pylibmc.Client(addrs).hash(k))}


@pytest.mark.parametrize("fault", ["killed", "stopped"])
def test_the_asyncio_client_fails_over_as_the_blocking_one(cluster, fault):
    addrs = [p.address for p in cluster[:3]]
    mark(addrs, KEYS)
    behaviors = dict(FAST, num_replicas=1)
    aio = Blocking(addrs, binary=True, behaviors=behaviors)
    mc = fastmc.Client(addrs, binary=True, behaviors=behaviors)
    assert aio.get_multi(KEYS) == mc.get_multi(KEYS)
    key = KEYS[0]
    own = mc.hash(key)
    if fault == "killed":
        cluster[own].stop()
    else:
        sigstop(cluster[own].proc.pid)
    try:
        replica = b"s%d" % ((own + 1) % 3)
        # a lone read on the loop's thread, then a get_multi
        assert aio.get(key) == replica
        assert aio.get_multi(KEYS) == mc.get_multi(KEYS)
        assert aio.get_multi(KEYS)[key] == replica
        # a set raises for the key's own server and still writes the replica
        with pytest.raises(fastmc.Error):
            aio.set(key, "new")
        assert aio.get(key) == "new"
    finally:
        if fault == "stopped":
            os.kill(cluster[own].proc.pid, signal.SIGCONT)


def test_get_multi_raise_on_error_keeps_the_error_of_a_key_no_server_answers(cluster):
    """fastmc's get_multi_raise_on_error: a key whose server and replicas all failed raises
    instead of being a miss; a key a replica answered is a hit."""
    addrs = [p.address for p in cluster[:3]]
    mark(addrs, KEYS)
    cluster[0].stop()
    cluster[1].stop()
    behaviors = dict(FAST, num_replicas=1, get_multi_raise_on_error=True)
    mc = fastmc.Client(addrs, binary=True, behaviors=behaviors)
    names = ["g%d" % i for i in range(100)]
    put(addrs[2:], names, b"s2")
    lost = next(k for k in names if mc.hash(k) == 0)
    saved = next(k for k in names if mc.hash(k) == 1)
    with pytest.raises(fastmc.Error):
        mc.get_multi([lost, saved])
    with pytest.raises(fastmc.Error):
        mc.get(lost)
    assert mc.get_multi([saved]) == {saved: b"s2"}
