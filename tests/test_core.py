"""Core properties of fastmc's client against real memcached servers (and an in-process fake
server for faults a real one cannot produce): thread safety, timeouts that drop the connection,
key validation before anything is sent, fork safety, placement vectors."""

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import fastmc
from memcached_proc import Memcached, free_port, sigstop
from testkit import in_forked_child, listener, run_threads

HERE = Path(__file__).parent


_free_port = free_port
_Proc = Memcached


@pytest.fixture
def core_server():
    p = _Proc()
    yield p
    p.stop()


class FakeServer:
    """Accepts connections; answers per a script: 'hang' (read, never answer), 'half'
    (answer half a VALUE, then nothing). Records every byte received."""

    def __init__(self, mode):
        self.mode = mode
        self.received = bytearray()
        self.sock, self.address = listener(16)
        self.conns = []
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        while not self.stopping:
            try:
                data = c.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.received += data
            if self.mode == "half":
                c.sendall(b"VALUE k 0 10\r\nhalf")

    def close(self):
        self.stopping = True
        self.sock.close()
        for c in self.conns:
            c.close()


def test_sixteen_threads_share_one_client(core_server):
    mc = fastmc.Client([core_server.address])

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


def test_stopped_server_times_out_and_next_call_gets_its_own_value(core_server):
    mc = fastmc.Client(
        [core_server.address],
        behaviors={"_poll_timeout": 300, "retry_timeout": 1},
    )
    assert mc.set("a", "value-a")
    assert mc.set("b", "value-b")
    sigstop(core_server.proc.pid)
    try:
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error) as ei:
            mc.get("a")
        elapsed = time.monotonic() - t0
        assert "TIMEOUT" in str(ei.value)
        assert 0.25 <= elapsed < 1.5
        # within the retry window the server is skipped, never reported as a miss
        with pytest.raises(fastmc.ServerDown):
            mc.get("b")
    finally:
        os.kill(core_server.proc.pid, signal.SIGCONT)
    time.sleep(1.1)
    # The late reply to get("a") went to a dropped connection: b gets b.
    assert mc.get("b") == "value-b"
    assert mc.get("a") == "value-a"
    assert mc.get_multi(["b", "a"]) == {"a": "value-a", "b": "value-b"}


def test_half_reply_is_a_timeout_and_never_a_value():
    fake = FakeServer("half")
    try:
        mc = fastmc.Client([fake.address], behaviors={"_poll_timeout": 200})
        with pytest.raises(fastmc.Error):
            mc.get("k")
        with pytest.raises(fastmc.Error):
            mc.get_multi(["k", "j"], key_prefix="p")
    finally:
        fake.close()


def test_garbage_reply_is_a_protocol_error():
    class Garbage(FakeServer):
        def _serve(self, c):
            c.recv(65536)
            c.sendall(b"HELLO THERE\r\n")

    fake = Garbage("x")
    try:
        mc = fastmc.Client([fake.address])
        with pytest.raises(fastmc.ProtocolError):
            mc.get("k")
    finally:
        fake.close()


@pytest.mark.parametrize(
    "key",
    ["with space", "crlf\r\nset x 0 0 1\r\n1", "nl\n", "nul\x00", "tab\t", "ctl\x01", "del\x7f"],
)
def test_bad_keys_are_rejected_before_anything_is_sent(key):
    fake = FakeServer("hang")
    try:
        mc = fastmc.Client([fake.address], behaviors={"_poll_timeout": 200})
        for call in (
            lambda: mc.get(key),
            lambda: mc.set(key, "v"),
            lambda: mc.delete(key),
            lambda: mc.incr(key),
            lambda: mc.touch(key, 1),
            lambda: mc.get_multi([key]),
            lambda: mc.set_multi({key: 1}),
        ):
            with pytest.raises(fastmc.BadKeyProvided):
                call()
        time.sleep(0.05)
        assert bytes(fake.received) == b""
    finally:
        fake.close()


def test_overlong_keys(core_server):
    mc = fastmc.Client([core_server.address])
    assert mc.set("k" * 250, 1)
    with pytest.raises(ValueError, match="key length 251 too long, max is 250"):
        mc.get("k" * 251)
    with pytest.raises(ValueError, match="key length 252 too long"):
        mc.set("é" * 126, 1)
    # the prefix makes it too long
    with pytest.raises(ValueError):
        mc.set_multi({"k" * 250: 1}, key_prefix="p")
    assert mc.get("k" * 250) == 1


_MP_CLIENT = None


def _mp_worker(n):
    """Runs in a multiprocessing worker forked after the parent used ``_MP_CLIENT``."""
    mc = _MP_CLIENT
    for i in range(50):
        k = "mp-%d-%d" % (n, i)
        if not (mc.set(k, k) and mc.get(k) == k and mc.get_multi([k, "mp-parent"]) ==
                {k: k, "mp-parent": "parent"}):
            return False
    return True


def test_multiprocessing_fork_workers_never_share_the_parents_socket(core_server):
    """Landscape 6.6 (preloading apps: a client made before the workers fork): multiprocessing
    workers forked from a parent with a pooled connection each open their own and read only
    their own replies, and the parent's connection stays in sync."""
    import multiprocessing

    global _MP_CLIENT
    _MP_CLIENT = mc = fastmc.Client([core_server.address])
    assert mc.set("mp-parent", "parent")
    try:
        with multiprocessing.get_context("fork").Pool(3) as pool:
            assert pool.map(_mp_worker, range(12)) == [True] * 12
    finally:
        _MP_CLIENT = None
    assert mc.get("mp-parent") == "parent"
    assert mc.get_multi(["mp-3-7", "mp-11-49"]) == {"mp-3-7": "mp-3-7", "mp-11-49": "mp-11-49"}


def test_fork_child_never_reuses_parent_socket(core_server):
    mc = fastmc.Client([core_server.address])
    assert mc.set("f", "parent")
    stats = lambda: int(mc.get_stats()[0][1]["total_connections"])  # noqa: E731
    before = stats()
    assert in_forked_child(lambda: mc.get("f") == "parent" and mc.set("f", "child")) == 0
    # the child opened its own connection(s); the parent's pooled one still works and is in sync
    assert stats() > before
    assert mc.get("f") == "child"
    assert mc.get("nope") is None


def test_unix_socket(tmp_path):
    path = str(tmp_path / "mc.sock")
    proc = subprocess.Popen(["memcached", "-u", "root", "-s", path, "-m", "16"])
    try:
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.02)
        mc = fastmc.Client([path])
        assert mc.set("u", b"x")
        assert mc.get("u") == b"x"
        name = mc.get_stats()[0][0]
        assert name == (path + ":0 (0)").encode()
    finally:
        proc.kill()
        proc.wait()


def test_dead_server_fails_fast_then_retries():
    port = _free_port()
    mc = fastmc.Client(["127.0.0.1:%d" % port], behaviors={"retry_timeout": 1})
    with pytest.raises(fastmc.ConnectionError):
        mc.get("a")
    with pytest.raises(fastmc.ServerDown):
        mc.set("a", 1)
    time.sleep(1.05)
    with pytest.raises(fastmc.ConnectionError):
        mc.delete("a")


def _vectors():
    return json.loads((HERE / "data" / "distribution_vectors.json").read_text())


def test_all_distribution_vectors_match_pylibmc():
    """Every configuration of the shared vectors (generated from real pylibmc), through the
    public API: Client(servers, behaviors).hash(key), clone() for the pool cases."""
    data = _vectors()
    keys = [bytes.fromhex(k["hex"]) for k in data["keys"]]
    mismatches = {}
    for cfg in data["configs"]:
        if cfg["ejected_index"] is not None:
            continue  # needs a dead server: covered by the failure suite
        behaviors = dict(cfg["pylibmc_behaviors"])
        if "namespace" in behaviors:
            behaviors["namespace"] = behaviors["namespace"].encode()
        mc = fastmc.Client(cfg["servers"], behaviors=behaviors)
        if "clone" in cfg["via"] or "Pool" in cfg["via"]:
            mc = mc.clone()
        bad = 0
        for key, want in zip(keys, cfg["expected"]):
            if want is None:
                continue
            if mc.hash(key) != want:
                bad += 1
        if bad:
            mismatches[cfg["name"]] = bad
    assert mismatches == {}


def test_huge_batches_never_deadlock():
    """Requests and replies both far larger than the socket buffers, on three servers at once:
    the poll loop interleaves writes and reads."""
    procs = [_Proc("-m", "512") for _ in range(3)]
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


def test_multi_failures_are_attributed_to_their_keys(core_server):
    """A too-large value fails only its key; the batch goes on and the connection stays usable."""
    mc = fastmc.Client([core_server.address])
    batch = {"ok1": 1, "big": b"x" * (2 * 1024 * 1024), "ok2": 2}
    with pytest.raises(fastmc.TooBig) as ei:
        mc.set_multi(batch)
    assert ei.value.failed_keys == ["big"]
    assert mc.get_multi(["ok1", "ok2", "big"]) == {"ok1": 1, "ok2": 2}


def test_dead_server_fails_exactly_its_keys(core_server):
    dead = "127.0.0.1:%d" % _free_port()
    mc = fastmc.Client([core_server.address, dead])
    keys = ["k%d" % i for i in range(200)]
    on_dead = {k for k in keys if mc.hash(k) == 1}
    assert on_dead and len(on_dead) < len(keys)
    with pytest.raises(fastmc.ConnectionError) as ei:
        mc.set_multi({k: k for k in keys})
    assert set(ei.value.failed_keys) == on_dead
    # pylibmc's default: a failed server's keys are missing from get_multi
    assert mc.get_multi(keys) == {k: k for k in keys if k not in on_dead}
    strict = fastmc.Client([core_server.address, dead], behaviors={"get_multi_raise_on_error": 1})
    with pytest.raises(fastmc.Error):
        strict.get_multi(keys)


def test_noreply_writes_then_reads_stay_in_sync(core_server):
    mc = fastmc.Client([core_server.address])
    assert mc.set_multi({"n%d" % i: i for i in range(5000)}, noreply=True) == []
    assert mc.set("one", 1, noreply=True)
    assert mc.get("one") == 1
    assert mc.get_multi(["n1", "n4999"]) == {"n1": 1, "n4999": 4999}
    assert mc.delete("one", noreply=True)
    assert mc.get("one") is None


@pytest.mark.parametrize(
    "behaviors, expect",
    [({"receive_timeout": 200_000}, 0.2), ({"_poll_timeout": 300}, 0.3), ({"_poll_timeout": 300, "receive_timeout": 100_000}, 0.1)],
)
def test_read_timeouts_are_honoured(behaviors, expect):
    fake = FakeServer("hang")
    try:
        mc = fastmc.Client([fake.address], behaviors=behaviors)
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error, match="TIMEOUT"):
            mc.get("k")
        elapsed = time.monotonic() - t0
        assert expect * 0.9 <= elapsed <= expect * 1.5 + 0.05
        # on three "servers" at once (same hanging fake): a batch times out as a whole, once
        mc3 = fastmc.Client([fake.address, fake.address + ":1"], behaviors=behaviors)
        t0 = time.monotonic()
        with pytest.raises(fastmc.Error):
            mc3.get_multi(["a", "b", "c", "d"], key_prefix="x")
        assert time.monotonic() - t0 <= expect * 1.5 + 0.1
    finally:
        fake.close()


def test_ipv6_server_spec():
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6 loopback")
    proc = Memcached("-m", "16", host="::1")
    port = proc.port
    try:
        mc = fastmc.Client(["[::1]:%d" % port])
        assert mc.set("v6", "yes")
        assert mc.get("v6") == "yes"
        assert mc.get_stats()[0][0] == ("::1:%d (0)" % port).encode()
    finally:
        proc.stop()


def test_restart_is_invisible_to_the_next_call():
    """Pooled connections to a restarted server are stale: the first call on each is replayed on a
    new connection (nothing of the reply was received), so the caller sees no error."""
    p = _Proc()
    try:
        mc = fastmc.Client([p.address])
        # several pooled connections, from several threads
        threads = [threading.Thread(target=lambda: [mc.set("r", 1) for _ in range(50)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p.restart()
        for i in range(8):
            assert mc.get("r") is None  # the restarted server is empty; no error
            assert mc.set("r%d" % i, i)
        assert mc.get_multi(["r%d" % i for i in range(8)]) == {"r%d" % i: i for i in range(8)}
    finally:
        p.stop()


def test_auto_eject_moves_only_the_dead_servers_keys():
    procs = [_Proc() for _ in range(3)]
    try:
        behaviors = {"ketama": True, "remove_failed": 1, "retry_timeout": 1, "dead_timeout": 30}
        mc = fastmc.Client([p.address for p in procs], behaviors=behaviors)
        keys = ["e%d" % i for i in range(300)]
        before = {k: mc.hash(k) for k in keys}
        victims = {k for k, s in before.items() if s == 1}
        assert victims and len(victims) < len(keys)
        procs[1].stop()
        # the first operation that reaches the dead server fails and ejects it
        with pytest.raises(fastmc.Error):
            mc.set_multi({k: k for k in keys})
        after = {k: mc.hash(k) for k in keys}
        assert {k for k in keys if after[k] != before[k]} == victims
        assert all(after[k] != 1 for k in keys)
        assert mc.set_multi({k: k for k in keys}) == []
        assert mc.get_multi(keys) == {k: k for k in keys}
        # modula never remaps: the dead server's keys just fail
        mm = fastmc.Client([p.address for p in procs], behaviors={"remove_failed": 1, "retry_timeout": 1})
        with pytest.raises(fastmc.Error):
            mm.set_multi({k: k for k in keys})
        assert any(mm.hash(k) == 1 for k in keys)
    finally:
        for p in procs:
            p.stop()
