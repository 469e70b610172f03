"""num_replicas against real pylibmc on healthy servers (the faults are in
tests/faults/test_replica_failover.py): which servers each write reaches, read each server
directly, for every storage command, delete, incr/decr and touch, single and multi-key, on three
and five servers with one, two and at least as many replicas as servers; which server a read is
answered by; that the text protocol ignores the behavior; that replica writes ride in the same
pipelined batch; and the asyncio client doing the same
(docs/failures.md#replicas-num_replicas-binary-protocol)."""

import fastmc
import pylibmc
import pytest
from aio_blocking import Blocking
from cases import outcome
from holdings import contents, flush, put
from memcached import Memcached

KEYS = ["r%d" % i for i in range(6)]


@pytest.fixture(scope="module")
def five():
    procs = [Memcached() for _ in range(5)]
    yield [p.address for p in procs]
    for p in procs:
        p.stop()


def keys_for(mc, keys):
    """The server each key's own write goes to (pylibmc's hash(): libmemcached's index)."""
    return {k: mc.hash(k) for k in keys}


# Each write: (what the servers hold first, the call). The key names are KEYS.
WRITES = {
    "set": (None, lambda mc, k: mc.set(k, "v")),
    "add": (None, lambda mc, k: mc.add(k, "v")),
    "replace": (b"old", lambda mc, k: mc.replace(k, "v")),
    "append": (b"old", lambda mc, k: mc.append(k, "v")),
    "prepend": (b"old", lambda mc, k: mc.prepend(k, "v")),
    "cas": (b"old", lambda mc, k: mc.cas(k, "v", mc.gets(k)[1])),
    "incr": (b"5", lambda mc, k: mc.incr(k, 2)),
    "decr": (b"5", lambda mc, k: mc.decr(k, 2)),
    "touch": (b"old", lambda mc, k: mc.touch(k, 100)),
    "delete": (b"old", lambda mc, k: mc.delete(k)),
    "set_multi": (None, lambda mc, k: mc.set_multi({k: "v", k + "x": "w"})),
    "add_multi": (None, lambda mc, k: mc.add_multi({k: "v"})),
    "delete_multi": (b"old", lambda mc, k: mc.delete_multi([k, k + "x"])),
}


def write_trace(make, addrs, name):
    """Each key of KEYS written by a client of its own (`make`): the call's outcome and what
    every server holds right after it and after disconnect_all (pylibmc sends a replica's write
    only when that connection is next flushed)."""
    before, call = WRITES[name]
    trace = []
    for k in KEYS:
        flush(addrs)
        if before is not None:
            put(addrs, [k, k + "x"], before)
        mc = make()
        r = outcome(lambda mc=mc, k=k: call(mc, k))
        at_once = contents(addrs, [k, k + "x"])
        mc.disconnect_all()
        trace.append((r, at_once, contents(addrs, [k, k + "x"])))
    return trace


def expected_holders(n, own, replicas):
    return sorted({(own + r) % n for r in range(min(replicas, n - 1) + 1)})


@pytest.mark.parametrize(
    "count,replicas", [(3, 1), (3, 2), (3, 3), (5, 1), (5, 2), (5, 7)], ids=str
)
@pytest.mark.parametrize("name", sorted(WRITES))
def test_writes_reach_the_servers_pylibmc_writes(servers, five, count, replicas, name):
    addrs = (servers if count == 3 else five)[:count]
    behaviors = {"num_replicas": replicas, "cas": True}
    if name == "touch":
        # pylibmc's binary touch waits out its poll timeout (5 s) before it reads the answer
        behaviors["_poll_timeout"] = 300
    theirs = write_trace(
        lambda: pylibmc.Client(addrs, binary=True, behaviors=behaviors), addrs, name
    )
    ours = write_trace(lambda: fastmc.Client(addrs, binary=True, behaviors=behaviors), addrs, name)
    # what the servers hold once pylibmc flushed its connections: the same
    assert [after for _, _, after in ours] == [after for _, _, after in theirs]
    if name.startswith("delete") and replicas >= count:
        # libmemcached wraps onto the key's own server, whose answer to that second, quiet
        # delete (NOT_FOUND) is left unread and taken by the next request (see the stray
        # answer test below): pylibmc's outcomes are off; fastmc deletes each server once
        assert [r for r, _, _ in ours] == [("ok", True)] * len(KEYS)
    else:
        assert [r for r, _, _ in ours] == [r for r, _, _ in theirs]
    # fastmc's replica writes are sent with the key's own write, not left for later
    assert [at_once for _, at_once, _ in ours] == [after for _, _, after in ours]
    owners = keys_for(pylibmc.Client(addrs, binary=True), KEYS)
    for k, (_, _, after) in zip(KEYS, ours):
        holders = [i for i, held in enumerate(after) if k in held]
        if name in ("set", "set_multi"):
            # libmemcached replicates set only, to the servers after the key's own (wrapping)
            assert holders == expected_holders(count, owners[k], replicas)
        elif name in ("delete", "delete_multi"):
            assert holders == sorted(
                set(range(count)) - set(expected_holders(count, owners[k], replicas))
            )
        elif WRITES[name][0] is None:
            assert holders == [owners[k]]


@pytest.mark.parametrize(
    "placement", [{"ketama": True}, {"_sort_hosts": True}, {"hash": "crc"}], ids=str
)
@pytest.mark.parametrize("name", ["set", "delete_multi"])
def test_replicas_follow_libmemcacheds_server_list_under_every_placement(five, placement, name):
    """The replicas are the next servers in libmemcached's own list (sorted with _sort_hosts,
    here given in descending order), whichever server the ring picks for the key."""
    addrs = sorted(five, key=lambda a: -int(a.rsplit(":", 1)[1]))
    behaviors = {"num_replicas": 2, **placement}
    theirs = write_trace(
        lambda: pylibmc.Client(addrs, binary=True, behaviors=behaviors), addrs, name
    )
    ours = write_trace(lambda: fastmc.Client(addrs, binary=True, behaviors=behaviors), addrs, name)
    assert [(r, after) for r, _, after in ours] == [(r, after) for r, _, after in theirs]


def test_pylibmc_sends_a_replica_write_only_when_that_connection_is_next_used(servers):
    """libmemcached queues the quiet replica write without flushing it: right after a set only
    the key's own server has the value (fastmc's is sent in the same round trip, above)."""
    flush(servers)
    mc = pylibmc.Client(servers, binary=True, behaviors={"num_replicas": 2})
    assert mc.set("lazy", "v")
    own = mc.hash("lazy")
    assert [i for i, held in enumerate(contents(servers, ["lazy"])) if held] == [own]
    mc.disconnect_all()
    assert all(held for held in contents(servers, ["lazy"]))


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_reads_go_to_the_keys_own_server(servers, replicas):
    """With every server up a read asks the key's own server only: each server holds its own
    value for every key, and the value read names the server."""
    for i, a in enumerate(servers):
        put([a], KEYS, b"s%d" % i)
    results = []
    for mod in (pylibmc, fastmc):
        mc = mod.Client(servers, binary=True, behaviors={"num_replicas": replicas, "cas": True})
        results.append(
            (
                [mc.get(k) for k in KEYS],
                mc.get_multi(KEYS),
                [mc.gets(k)[0] for k in KEYS],
            )
        )
    assert results[0] == results[1]
    owners = keys_for(pylibmc.Client(servers, binary=True), KEYS)
    assert results[1][0] == [b"s%d" % owners[k] for k in KEYS]


def test_a_miss_on_the_keys_own_server_is_a_miss(servers):
    """A replica is read only when the key's server fails, never when it misses."""
    flush(servers)
    mc = pylibmc.Client(servers, binary=True)
    own = mc.hash("gone")
    put([a for i, a in enumerate(servers) if i != own], ["gone"], b"replica")
    for mod in (pylibmc, fastmc):
        mc = mod.Client(servers, binary=True, behaviors={"num_replicas": 2})
        assert mc.get("gone") is None
        assert mc.get_multi(["gone"]) == {}


@pytest.mark.parametrize("name", ["set", "delete", "set_multi", "delete_multi"])
def test_the_text_protocol_ignores_num_replicas(servers, name):
    behaviors = {"num_replicas": 2}
    theirs = write_trace(lambda: pylibmc.Client(servers, behaviors=behaviors), servers, name)
    ours = write_trace(lambda: fastmc.Client(servers, behaviors=behaviors), servers, name)
    assert ours == theirs
    owners = keys_for(pylibmc.Client(servers), KEYS)
    for k, (_, _, after) in zip(KEYS, ours):
        holders = [i for i, held in enumerate(after) if k in held]
        want = [owners[k]] if name.startswith("set") else sorted(set(range(3)) - {owners[k]})
        assert holders == want


def test_a_delete_whose_replica_lacks_the_key_leaves_no_stray_answer(servers):
    """libmemcached drops the answer count of the quiet replica delete, but a quiet delete of a
    missing key is answered (NOT_FOUND): the next request to that server takes it as its own
    answer (pylibmc's set raises NotFound, the get after it returns the set's empty answer).
    fastmc reads and drops it with the batch."""
    addrs = servers
    outcomes = []
    for mod in (pylibmc, fastmc):
        flush(addrs)
        mc = mod.Client(addrs, binary=True, behaviors={"num_replicas": 1})
        own = mc.hash("lonely")
        put([addrs[own]], ["lonely"], b"x")
        nxt = next(k for k in ("n%d" % i for i in range(100)) if mc.hash(k) == (own + 1) % 3)
        outcomes.append(
            [
                outcome(lambda mc=mc: mc.delete("lonely")),
                outcome(lambda mc=mc, k=nxt: mc.set(k, "v")),
                outcome(lambda mc=mc, k=nxt: mc.get(k)),
            ]
        )
    theirs, ours = outcomes
    assert theirs == [("ok", True), ("raise", "NotFound"), ("ok", b"")]
    assert ours == [("ok", True), ("ok", True), ("ok", "v")]


def test_replica_writes_ride_in_the_same_batch(servers):
    """A set_multi or delete_multi is one pipelined batch per server, replica writes included."""
    keys = ["p%d" % i for i in range(200)]
    mc = fastmc.Client(servers, binary=True, behaviors={"num_replicas": 1})
    mc.flush_all()
    before = mc.metrics()
    assert mc.set_multi({k: k for k in keys}) == []
    assert mc.delete_multi(keys) is True
    after = mc.metrics()
    for addr in after:
        for family in ("store", "delete"):
            assert after[addr]["requests"][family] - before[addr]["requests"][family] == 1
    # each key counted twice: its own write and its replica's
    sent = sum(after[a]["keys"]["store"] - before[a]["keys"]["store"] for a in after)
    assert sent == 2 * len(keys)
    assert all(not held for held in contents(servers, keys[:20]))


@pytest.mark.parametrize("name", ["set", "delete", "set_multi", "delete_multi", "add"])
def test_the_asyncio_client_writes_the_same_servers(servers, name):
    behaviors = {"num_replicas": 2}
    blocking = write_trace(
        lambda: fastmc.Client(servers, binary=True, behaviors=behaviors), servers, name
    )
    aio = write_trace(lambda: Blocking(servers, binary=True, behaviors=behaviors), servers, name)
    assert aio == blocking


def test_the_asyncio_client_reads_the_same(servers):
    for i, a in enumerate(servers):
        put([a], KEYS, b"s%d" % i)
    mc = fastmc.Client(servers, binary=True, behaviors={"num_replicas": 2})
    aio = Blocking(servers, binary=True, behaviors={"num_replicas": 2})
    assert [aio.get(k) for k in KEYS] == [mc.get(k) for k in KEYS]
    assert aio.get_multi(KEYS) == mc.get_multi(KEYS)
