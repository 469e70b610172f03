"""get_or_set, invalidate and gat against real memcached (and, for the fallback without the meta
protocol, an in-process fake): exactly one recompute per miss, expiry or invalidation across
threads and processes, stale values served while one caller recomputes, a failed or dead winner
that does not hold the others up, and values that are ordinary values for get and for pylibmc.
See docs/stampede.md."""

import os
import signal
import socket
import threading
import time

import fastmc
import pylibmc
import pytest
from fakes import MiniMemcached
from memcached import sigstop
from threads import in_forked_child, run_threads

N_THREADS = 32
SLOW = 0.3


class Counter:
    """A recompute function that counts its calls (thread-safe) and takes ``SLOW`` seconds."""

    def __init__(self, value="fresh", slow=SLOW, fail_first=False):
        self.calls = 0
        self.lock = threading.Lock()
        self.value = value
        self.slow = slow
        self.fail_first = fail_first

    def __call__(self):
        with self.lock:
            self.calls += 1
            n = self.calls
        time.sleep(self.slow)
        if self.fail_first and n == 1:
            raise ValueError("the database is down")
        return self.value


def hammer(mc, key, fn, n=N_THREADS, **kw):
    """``n`` threads call get_or_set on one key at once; returns (results, errors)."""
    results = [None] * n

    def work(i):
        results[i] = mc.get_or_set(key, fn, **kw)

    return results, run_threads(work, n)


def meta_ttl(address, key):
    """The remaining TTL memcached reports for ``key`` (``mg <key> t``), or None on a miss."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"mg %s t\r\n" % key.encode())
        line = s.makefile("rb").readline()
    if line.startswith(b"EN"):
        return None
    return int(line.split(b" t", 1)[1].split()[0])


@pytest.fixture
def mc(server):
    c = fastmc.Client([server.address])
    c.flush_all()
    return c


def test_threads_on_a_miss_recompute_once(mc):
    fn = Counter()
    results, errors = hammer(mc, "hot", fn, time=60)
    assert errors == []
    assert fn.calls == 1
    assert results == ["fresh"] * N_THREADS
    assert mc.get("hot") == "fresh"


def test_processes_on_a_miss_recompute_once(server, mc):
    # Each of 4 forked children runs 8 threads on its own client; every recompute bumps a
    # counter in memcached, which all processes share.
    mc.set("calls", 0)

    def child():
        c = fastmc.Client([server.address])

        def fn():
            c.incr("calls")
            time.sleep(SLOW)
            return {"answer": 42}

        results, errors = hammer(c, "shared", fn, n=8, time=60)
        return errors == [] and results == [{"answer": 42}] * 8

    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                code = 0 if child() else 2
            finally:
                os._exit(code)
        pids.append(pid)
    codes = [os.WEXITSTATUS(os.waitpid(p, 0)[1]) for p in pids]
    assert codes == [0, 0, 0, 0]
    assert mc.get("calls") == 1


def test_one_recompute_per_expiry(mc):
    fn = Counter(slow=0.05)
    for round_ in range(1, 4):
        deadline = time.monotonic() + 10
        while mc.get("exp") is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mc.get("exp") is None
        results, errors = hammer(mc, "exp", fn, n=16, time=2)
        assert errors == [] and results == ["fresh"] * 16
        assert fn.calls == round_


def test_invalidate_serves_stale_to_all_but_the_winner(mc):
    mc.set("inv", "old", 300)
    assert mc.invalidate("inv", stale_time=30) is True
    assert mc.get("inv") == "old"  # plain get still sees the value
    fn = Counter(value="new")
    results, errors = hammer(mc, "inv", fn, n=16, time=300)
    assert errors == []
    assert fn.calls == 1
    assert set(results) <= {"old", "new"} and "new" in results and "old" in results
    assert mc.get_or_set("inv", Counter(value="newer")) == "new"
    assert 0 < meta_ttl_of(mc, "inv") <= 300


def meta_ttl_of(mc, key):
    return meta_ttl(mc.addresses[0], key)


def test_invalidate_multi_and_missing_keys(mc):
    mc.set_multi({"a": 1, "b": 2})
    assert mc.invalidate_multi(["a", "b"], stale_time=20) is True
    assert mc.invalidate_multi(["a", "nope"]) is False
    # the one request alone (the asyncio client's row, made for both): nothing left to delete
    assert mc._invalidate_multi(["a", "nope"]) == (False, [])
    assert mc.invalidate("nope") is False
    assert 0 < meta_ttl_of(mc, "b") <= 20
    assert mc.invalidate_multi(["x", "y"], key_prefix="p:") is False
    mc.set("p:x", 1)
    assert mc.invalidate_multi(["x"], key_prefix="p:") is True
    assert mc.get_or_set("p:x", 2) == 2  # the winner of a stale value recomputes


def test_winner_that_raises_releases_the_lease(mc):
    # With a 30 s lease and a 20 s wait that raises, a waiter that had to wait out the lease
    # would raise TimeoutError: every other caller must be served by the next winner instead.
    fn = Counter(fail_first=True)
    results, errors = hammer(
        mc, "fails", fn, n=16, time=60, lease=30, wait=20, on_wait_timeout="raise"
    )
    assert [e for _, e in errors] == ["ValueError('the database is down')"]
    assert fn.calls == 2
    assert results.count("fresh") == 15


def test_stale_winner_that_raises_hands_the_win_on(mc):
    mc.set("sw", "old", 300)
    mc.invalidate("sw")
    with pytest.raises(ValueError):
        mc.get_or_set("sw", Counter(slow=0, fail_first=True))
    # the stale value was invalidated again: the next caller wins and recomputes
    assert mc.get_or_set("sw", Counter(value="new", slow=0)) == "new"


def test_winner_whose_set_times_out_raises_the_timeout(mcd):
    """The winner's set times out (the server stopped) and the lease cannot be given back (the
    server is marked down by then): get_or_set raises the timeout, what happened first, not the
    release's ServerDown. The set had reached the server: once it runs again, the value is
    there."""
    mc = fastmc.Client([mcd.address], behaviors={"_poll_timeout": 300})

    def default():
        sigstop(mcd.proc.pid)
        return "computed"

    try:
        with pytest.raises(fastmc.Error) as e:
            mc.get_or_set("k", default)
    finally:
        os.kill(mcd.proc.pid, signal.SIGCONT)
    assert type(e.value) is fastmc.Error and "TIMEOUT" in str(e.value)
    assert e.value.__context__ is None
    other = fastmc.Client([mcd.address])
    deadline = time.monotonic() + 5
    while other.get("k") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert other.get("k") == "computed"


def test_dead_winner_blocks_only_for_the_lease(server, mc):
    def child():
        c = fastmc.Client([server.address])
        c.get_or_set("dead", lambda: os._exit(0), lease=2)
        return False

    assert in_forked_child(child) == 0
    fn = Counter(slow=0)
    assert mc.get_or_set("dead", fn, 60, wait=10, on_wait_timeout="raise") == "fresh"
    assert fn.calls == 1


def test_wait_timeout_computes_or_raises(mc):
    state, _, _ = mc._lease_get("held", 30, 0)
    assert state == "win"  # this test holds the lease and never stores
    fn = Counter(value="mine", slow=0)
    assert mc.get_or_set("held", fn, wait=0.1) == "mine"
    assert fn.calls == 1 and mc.get_or_set("held", fn, wait=0.05) == "mine"
    with pytest.raises(TimeoutError):
        mc.get_or_set("held", fn, wait=0.1, on_wait_timeout="raise")
    with pytest.raises(ValueError):
        mc.get_or_set("held", fn, on_wait_timeout="never")
    assert mc.get("held") in (None, b"")


def test_recompute_early_keeps_serving_the_value(mc):
    mc.set("early", "old", 5)
    fn = Counter(value="new")
    results, errors = hammer(mc, "early", fn, n=16, time=300, recompute_early=30)
    assert errors == []
    assert fn.calls == 1
    assert set(results) <= {"old", "new"} and "old" in results
    assert mc.get("early") == "new"
    assert mc.get_or_set("early", fn, recompute_early=30) == "new" and fn.calls == 1


@pytest.mark.parametrize(
    "value",
    ["text", b"bytes", 7, 2**70, True, 1.5, {"a": [1, 2]}, "x" * 200_000, b"", None],
)
def test_values_read_back_through_get_and_pylibmc(server, mc, value):
    key = "rt-%s" % type(value).__name__
    mc.delete(key)
    assert mc.get_or_set(key, lambda: value, 60) == value
    assert mc.get(key) == value
    p = pylibmc.Client([server.address])
    assert p.get(key) == value
    # and the other way: pylibmc's value is a hit for get_or_set
    p.set("from-pylibmc", value)
    assert mc.get_or_set("from-pylibmc", "unused", wait=5, on_wait_timeout="raise") == value


def test_a_plain_value_default_is_stored(mc):
    assert mc.get_or_set("plain", 5, 60) == 5
    assert mc.get_or_set("plain", 6, 60) == 5


@pytest.mark.parametrize("binary", [False, True])
def test_gat_and_gat_multi_touch(server, binary):
    mc = fastmc.Client([server.address], binary=binary)
    mc.set_multi({"g1": "one", "g2": 2, "p:g3": b"three"}, time=3)
    assert mc.gat("g1", 300) == "one"
    assert mc.gat("missing", 300) is None and mc.gat("missing", 300, default=0) == 0
    assert mc.gat_multi(["g2", "missing"], 400) == {"g2": 2}
    assert mc.gat_multi(["g3"], 500, key_prefix="p:") == {"g3": b"three"}
    assert 250 < meta_ttl(server.address, "g1") <= 300
    assert 350 < meta_ttl(server.address, "g2") <= 400
    assert 450 < meta_ttl(server.address, "p:g3") <= 500


class LockedMini(MiniMemcached):
    """MiniMemcached without the meta protocol, its commands atomic across connections."""

    def __init__(self):
        super().__init__(meta=False)
        self.op_lock = threading.Lock()

    def _handle(self, cmd, parts, data):
        with self.op_lock:
            return super()._handle(cmd, parts, data)


def test_fallback_lock_without_meta():
    with LockedMini() as fake:
        mc = fastmc.Client([fake.address])
        fn = Counter()
        results, errors = hammer(mc, "hot", fn, time=60)
        assert errors == [] and results == ["fresh"] * N_THREADS
        assert fn.calls == 1
        cmds = fake.commands()
        assert b"add" in cmds and b"mg" not in cmds  # one `mn` probe, then classic only
        assert mc.get("hot:fastmc-lease") is None  # the lock is gone
        # the meta request alone names the keys its server cannot mark stale
        assert mc._invalidate_multi(["hot", "cold"], 5, "") == (True, ["hot", "cold"])
        # invalidate deletes there: the next get_or_set recomputes once
        assert mc.invalidate("hot") is True and mc.get("hot") is None
        assert mc.get_or_set("hot", fn) == "fresh" and fn.calls == 2
        # a recompute that raises frees the lock
        with pytest.raises(ValueError):
            mc.get_or_set("k2", Counter(slow=0, fail_first=True))
        assert mc.get_or_set("k2", 3, wait=1, on_wait_timeout="raise") == 3
        with pytest.raises(fastmc.NotSupportedError):
            mc.gat("hot", 10)
        with pytest.raises(fastmc.NotSupportedError):
            mc.gat_multi(["hot"], 10)


def test_binary_client_uses_the_lock(server):
    mc = fastmc.Client([server.address], binary=True)
    mc.delete("bin-hot")
    fn = Counter()
    results, errors = hammer(mc, "bin-hot", fn, n=16, time=60)
    assert errors == [] and results == ["fresh"] * 16 and fn.calls == 1
