"""Restarts: connections a restarted server closed are stale in the pool; reads on them are
replayed on a new connection, writes are checked before they are sent, so the caller sees no
error, and a write that may have been applied is never sent twice."""

import os
import threading
import time

import fastmc
import pytest
from checks import AGAIN
from fakes import FakeMemcached
from memcached import Memcached
from threads import run_threads


def test_restart_is_invisible_to_the_next_call():
    """Pooled connections to a restarted server are stale: the first call on each is replayed on a
    new connection (nothing of the reply was received), so the caller sees no error."""
    p = Memcached()
    try:
        mc = fastmc.Client([p.address])
        # several pooled connections, from several threads
        threads = [
            threading.Thread(target=lambda: [mc.set("r", 1) for _ in range(50)]) for _ in range(4)
        ]
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


def test_real_restart_is_invisible_for_threads_reading_and_writing(mcd):
    """A real memcached killed and restarted, twice (other clients fail the first request on each
    pooled connection after a restart): threads that had pooled connections keep reading and writing
    without an error."""
    mc = fastmc.Client([mcd.address])
    assert run_threads(lambda i: [mc.set("t%d" % i, j) for j in range(100)], 6) == []
    for _ in range(2):
        mcd.restart()
        time.sleep(0.05)

        def work(i):
            assert mc.get("t%d" % i) in (None, "x%d" % i)
            assert mc.set("t%d" % i, "x%d" % i)
            assert mc.set("n%d" % i, 1) and mc.incr("n%d" % i) == 2
            assert mc.get("t%d" % i) == "x%d" % i

        assert run_threads(work, 6) == []


def test_restart_over_a_unix_socket_is_invisible(tmp_path):
    """The same restart guarantee over a UNIX socket (the stale-connection probe and the read
    replay do not depend on TCP)."""
    path = str(tmp_path / "mc.sock")
    proc = Memcached(memory_mb=16, unix_path=path)
    try:
        mc = fastmc.Client([path])
        assert run_threads(lambda i: [mc.set("u%d" % i, i) for _ in range(50)], 4) == []
        proc.stop()
        os.unlink(path)
        assert proc.start()
        assert run_threads(lambda i: mc.get("u%d" % i) is None or 1 / 0, 4) == []
        assert run_threads(lambda i: mc.set("u%d" % i, -i) or 1 / 0, 4) == []
        assert mc.get_multi(["u%d" % i for i in range(4)]) == {"u%d" % i: -i for i in range(4)}
    finally:
        proc.stop()


def _pool_of(fake, mc, n):
    """Make the client hold `n` pooled connections: n threads call at once on a slow fake."""
    fake.delay = 0.15
    assert run_threads(lambda i: mc.set("p%d" % i, i), n) == []
    assert fake.accepted == n


def test_restart_is_invisible_on_every_pooled_connection_reads(fake):
    """Other clients fail the first request on each pooled connection after a restart (pymemcache
    #307, Weasyl #1569). Here n pooled connections are all closed by the server; n threads each take
    one of them at once and read: nobody sees an error."""
    mc = fastmc.Client([fake.address], behaviors={"retry_timeout": 2})
    _pool_of(fake, mc, 4)
    fake.drop_connections(forget=False)
    time.sleep(0.05)
    got = {}
    assert run_threads(lambda i: got.__setitem__(i, mc.get("p%d" % i)), 4) == []
    assert got == {i: i for i in range(4)}
    assert fake.accepted == 8  # every stale connection was replaced


@pytest.mark.parametrize("op", ["set", "incr", "add", "append", "delete", "touch"])
def test_restart_is_invisible_on_every_pooled_connection_writes(fake, op):
    """The same for writes: stale pooled connections are detected before anything is sent, so
    each write is sent exactly once, on a new connection."""
    mc = fastmc.Client([fake.address], behaviors={"retry_timeout": 2})
    _pool_of(fake, mc, 4)
    for i in range(4):
        fake.put("w%d" % i, b"10")
    fake.drop_connections(forget=False)
    time.sleep(0.05)
    seen = len(fake.commands)
    calls = {
        "set": lambda i: mc.set("w%d" % i, "new"),
        "incr": lambda i: mc.incr("w%d" % i, 5),
        "add": lambda i: mc.add("a%d" % i, 1),
        "append": lambda i: mc.append("w%d" % i, "1"),
        "delete": lambda i: mc.delete("w%d" % i),
        "touch": lambda i: mc.touch("w%d" % i, 100),
    }
    results = {}
    assert run_threads(lambda i: results.__setitem__(i, calls[op](i)), 4) == []
    assert results == {i: (15 if op == "incr" else True) for i in range(4)}
    wire = {
        "set": b"set",
        "incr": b"incr",
        "add": b"add",
        "append": b"append",
        "delete": b"delete",
        "touch": b"touch",
    }[op]
    assert fake.command_names()[seen:].count(wire) == 4
    assert fake.accepted == 8


@pytest.mark.parametrize("op", ["set", "delete", "set_multi"])
def test_close_after_an_error_line_is_invisible_to_the_next_write(fake, op):
    """A server or proxy that answers an error line and closes the connection at once (twemproxy
    does after a backend failure): the next write, sent right away, still goes out exactly once
    on a new connection, because a connection whose last answer was an error line is always
    checked before a write."""
    mc = fastmc.Client([fake.address])
    assert mc.set("good", "old")
    fake.rule("bad", "line_close:SERVER_ERROR backend down")
    with pytest.raises(fastmc.Error):
        mc.set("bad", "x")
    assert fake.accepted == 1
    if op == "set":
        assert mc.set("good", "new") is True
    elif op == "delete":
        assert mc.delete("good") is True
    else:
        assert mc.set_multi({"good": "new", "more": 1}) == []
    assert fake.accepted == 2
    assert (b"good" in fake.data) == (op != "delete")
    assert fake.command_names().count(b"delete" if op == "delete" else b"set") == (
        1 if op == "delete" else 3 + (op == "set_multi")
    )


def test_write_right_after_an_answer_on_a_connection_closed_since_lands_once_or_raises(fake):
    """Within a millisecond of a successful answer a pooled connection is not peeked at before a
    write (a system call that tight loops of writes save). If the server closed it in that
    moment, the write raises and is not replayed; if the peek did run, it goes out on a new
    connection. Either way it is applied at most once and never reported done when it was not."""
    mc = fastmc.Client([fake.address])
    assert mc.set("w", "old")
    fake.drop_connections(forget=False)
    seen = len(fake.commands)
    try:
        done = mc.set("w", "new")
    except fastmc.Error:
        done = False
    sets = fake.command_names()[seen:].count(b"set")
    assert fake.data[b"w"][1] == (b"new" if done else b"old")
    assert sets == (1 if done else 0)


def test_noreply_writes_after_an_idle_close_go_out_on_a_new_connection(fake):
    """A `noreply` write gets no answer to prove the connection alive, so the peek before it
    is what keeps it from vanishing into a connection the server closed while idle."""
    mc = fastmc.Client([fake.address])
    assert mc.set("a", "1")
    fake.drop_connections(forget=False)
    time.sleep(0.05)
    mc.set("b", "2", noreply=True)
    mc.set("c", "3", noreply=True)
    mc.delete("a", noreply=True)
    assert mc.get_multi(["a", "b", "c"]) == {"b": "2", "c": "3"}
    assert fake.accepted == 2


def test_noreply_loop_loses_at_most_the_writes_of_one_round_trip_after_a_close(fake):
    """A tight loop of `noreply` writes is not peeked at (one system call per write). When the
    server closes the connection in the middle of it, what was sent before the close and not
    yet read is lost (the server never saw it, as with any client), and so is at most the write
    sent before the peer's reset comes back; every later write goes out on a new connection. A
    write whose connection broke under it may also raise instead (every 65,536th noreply write
    waits for the server to catch up, and that wait can meet the close): raised, not lost."""
    mc = fastmc.Client([fake.address], behaviors=AGAIN)
    assert mc.set("start", 1)
    issued = []
    raised = set()
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set() and i < 200_000:
            issued.append((time.monotonic(), i))
            try:
                mc.set("nr%d" % i, "v", noreply=True)
            except fastmc.Error:
                raised.add(i)
            i += 1

    th = threading.Thread(target=writer)
    th.start()
    time.sleep(0.1)
    closed_at = time.monotonic()
    fake.drop_connections(forget=False)
    time.sleep(0.1)
    stop.set()
    th.join()
    assert mc.get("start") == 1  # a read on the new connection: every write before it is done
    assert fake.accepted >= 2
    after = [i for t, i in issued if t > closed_at]
    lost_after = [i for i in after if ("nr%d" % i).encode() not in fake.data and i not in raised]
    assert len(after) > 100
    assert len(raised) <= 1, sorted(raised)
    assert len(lost_after) <= 1, lost_after


def test_restart_of_several_servers_is_invisible_to_batches():
    """Both servers of a batch restart: get_multi and set_multi drive the stale pooled
    connections in the poll loop, replace them, and each write is sent exactly once."""
    fakes = [FakeMemcached(), FakeMemcached()]
    try:
        mc = fastmc.Client([f.address for f in fakes])
        keys = ["rb%d" % i for i in range(40)]
        assert mc.set_multi({k: k for k in keys}) == []
        for f in fakes:
            f.drop_connections(forget=False)
        time.sleep(0.05)
        assert mc.get_multi(keys) == {k: k for k in keys}
        for f in fakes:
            f.drop_connections(forget=False)
        time.sleep(0.05)
        seen = [len(f.commands) for f in fakes]
        assert mc.set_multi({k: k + "2" for k in keys}) == []
        sent = [f.command_names()[n:].count(b"set") for f, n in zip(fakes, seen)]
        assert sum(sent) == len(keys)
        assert mc.get_multi(keys) == {k: k + "2" for k in keys}
        assert [f.accepted for f in fakes] == [3, 3]
    finally:
        for f in fakes:
            f.close()


@pytest.mark.parametrize("op", ["incr", "append", "add", "set", "delete"])
def test_write_that_may_have_been_applied_is_not_replayed(fake, op):
    """The nothing-sent rule: the server takes the command, executes it and closes without
    answering (a crash after applying). The write may have been applied, so it is NOT sent again
    on a new connection: the caller gets an error and the server saw the command once."""
    mc = fastmc.Client([fake.address], behaviors=AGAIN)
    assert mc.set("k", "5")  # now a pooled connection exists
    if op == "add":
        assert mc.delete("k")
    fake.rule("k", "close_after_apply")
    call = {
        "incr": lambda: mc.incr("k"),
        "append": lambda: mc.append("k", "0"),
        "add": lambda: mc.add("k", "1"),
        "set": lambda: mc.set("k", "7"),
        "delete": lambda: mc.delete("k"),
    }[op]
    with pytest.raises(fastmc.Error):
        call()
    assert fake.command_names().count(op.encode()) == (2 if op == "set" else 1)
    fake.rule("k", None)
    expect = {"incr": "6", "append": "50", "add": "1", "set": "7", "delete": None}[op]
    assert mc.get("k") == expect
