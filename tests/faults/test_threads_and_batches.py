"""Threads and big batches: threads sharing one client never see another key's value, and batches
far larger than the socket buffers, on one server or several at once, neither deadlock nor
lose a key."""

import gc

import fastmc
from fakes import FakeMemcached
from memcached import Memcached
from threads import run_threads


def test_sixteen_threads_share_one_client(mcd):
    mc = fastmc.Client([mcd.address])

    def work(t):
        for i in range(300):
            k = "t%d-%d" % (t, i)
            v = {"t": t, "i": i, "s": "x" * (i % 50)}
            assert mc.set(k, v)
            assert mc.get(k) == v
            assert mc.add(k, 0) is False
            if i % 3 == 0:
                assert mc.delete(k)
                assert mc.get(k) is None
            if i % 10 == 0:
                got = mc.get_multi(["t%d-%d" % (t, j) for j in range(i + 1)])
                for kk, vv in got.items():
                    assert vv["t"] == t and kk == "t%d-%d" % (t, vv["i"])
        assert mc.set("ctr%d" % t, 0)
        for _ in range(50):
            mc.incr("ctr%d" % t)
        assert mc.get("ctr%d" % t) == 50

    assert run_threads(work, 16) == []


def test_threads_sharing_one_client_never_get_another_keys_value(mcd):
    """Clients shared between threads without a lock returned one key's value for another
    (django-pylibmc-thread-unsafe-example served a cached response for another page; flask-caching
    #113; pymemcache #34/#195). Here 8 threads share one client and every value read carries its own
    key."""
    mc = fastmc.Client([mcd.address])

    def work(t):
        for i in range(200):
            k = "own-%d-%d" % (t, i % 20)
            assert mc.set(k, k)
            assert mc.get(k) == k
            if i % 20 == 0:
                ks = ["own-%d-%d" % (t, j) for j in range(20)]
                assert all(kk == vv for kk, vv in mc.get_multi(ks).items())

    assert run_threads(work, 8) == []


def test_huge_batches_never_deadlock():
    """Requests and replies both far larger than the socket buffers, on three servers at once:
    the poll loop interleaves writes and reads."""
    procs = [Memcached(memory_mb=512) for _ in range(3)]
    try:
        mc = fastmc.Client([p.address for p in procs])
        n = 300_000
        data = {"bulk%d" % i: "v%d" % i for i in range(n)}
        assert mc.set_multi(data) == []
        got = mc.get_multi(list(data))
        assert got == data
        # a million keys in one get_multi (misses: nothing to store, 10+ MB of request)
        keys = ["miss%d" % i for i in range(1_000_000)]
        assert mc.get_multi(keys) == {}
        assert mc.delete_multi(list(data)[:100_000]) is True
        assert mc.get("bulk5") is None and mc.get("bulk200000") == "v200000"
    finally:
        for p in procs:
            p.stop()


def test_big_pipelines_do_not_deadlock_and_get_lines_stay_short(fake):
    """Writing a huge batch without reading the replies deadlocks once both socket buffers are full
    (python-memcached #24), and memcached holds a response object per key of a get line until it
    has read the whole line (memcached #1046). Here a 12 MB set_multi goes through one connection,
    and every get line carries at most 1,000 keys."""
    mc = fastmc.Client([fake.address])
    data = {"big%d" % i: b"v" * 1000 for i in range(12000)}
    assert mc.set_multi(data) == []
    got = mc.get_multi(list(data))
    assert len(got) == len(data) and all(v == b"v" * 1000 for v in got.values())
    gets = [line for _, line in fake.commands if line.startswith(b"get ")]
    assert gets and max(len(line.split()) - 1 for line in gets) == 1000
    del got, data
    gc.collect()


def test_multi_ops_fan_out_to_every_server_at_once():
    """pymemcache's HashClient asks the servers of a get_many one after another (#478), and its
    set_many sent single sets (#319). Here a batch goes out to every server, on one connection each,
    before any server has answered."""
    fakes = [FakeMemcached() for _ in range(3)]
    try:
        mc = fastmc.Client([f.address for f in fakes])
        keys = ["fan%d" % i for i in range(60)]
        assert mc.set_multi({k: k for k in keys}) == []
        assert [f.accepted for f in fakes] == [1, 1, 1]
        for f in fakes:
            f.delay = 0.3
            f.times.clear()
        assert mc.get_multi(keys) == {k: k for k in keys}
        # every server had its request before the first one could answer (0.3 s)
        firsts = [f.times[0] for f in fakes]
        assert max(firsts) < min(firsts) + 0.3
        assert [f.accepted for f in fakes] == [1, 1, 1]
    finally:
        for f in fakes:
            f.close()
