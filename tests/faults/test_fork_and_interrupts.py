"""Forks and interruptions: a forked child (through os.fork, multiprocessing or a plain C fork)
never uses its parent's connections, a child killed mid-call leaves the parent in sync, and an
exception raised by a signal handler during a blocking call leaves no reply behind."""

import os
import signal
import time

import fastmc
import pytest
from fakes import FakeMemcached
from threads import in_forked_child

# These tests fork on purpose while the fake servers' threads run in this process (the children
# only use the client, then leave with os._exit). Python 3.12+ warns about any fork of a
# multi-threaded process; the warning is about that choice of the test, not about fastmc.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"
    ":DeprecationWarning"
)


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Interrupted])
@pytest.mark.parametrize("multi", [False, True])
def test_exception_raised_during_a_blocking_call_leaves_no_reply_behind(exc, multi):
    """An exception between a request's write and its read leaves the reply for the next caller
    (python-memcached PR #130: Celery's SoftTimeLimitExceeded left it for the next task; aiomcache
    #91: a cancelled request went back to the pool with its reply pending; php-memcached #531). Here
    a signal handler raises while a call is blocked on a slow server; the next call on the same
    client gets its own value."""
    fakes = [FakeMemcached(), FakeMemcached()]

    def handler(signum, frame):
        raise exc()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        mc = fastmc.Client([f.address for f in fakes] if multi else [fakes[0].address])
        keys = ["s%d" % i for i in range(10)]
        assert mc.set_multi({k: "v-" + k for k in keys}) == []
        for f in fakes:
            f.delay = 0.3
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(exc):
            if multi:
                mc.get_multi(keys[:5])
            else:
                mc.get("s0")
            time.sleep(1)  # the handler runs no later than this
        for f in fakes:
            f.delay = 0
        assert mc.get("s1") == "v-s1"
        assert mc.get_multi(keys) == {k: "v-" + k for k in keys}
        assert all(mc.get(k) == "v-" + k for k in keys)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        for f in fakes:
            f.close()


_MP_CLIENT = None


def _mp_worker(n):
    """Runs in a multiprocessing worker forked after the parent used ``_MP_CLIENT``."""
    mc = _MP_CLIENT
    for i in range(50):
        k = "mp-%d-%d" % (n, i)
        if not (
            mc.set(k, k)
            and mc.get(k) == k
            and mc.get_multi([k, "mp-parent"]) == {k: k, "mp-parent": "parent"}
        ):
            return False
    return True


def test_multiprocessing_fork_workers_never_share_the_parents_socket(mcd):
    """Servers that preload the app make the client before they fork their workers. Multiprocessing
    workers forked from a parent with a pooled connection each open their own and read only their
    own replies, and the parent's connection stays in sync."""
    import multiprocessing

    global _MP_CLIENT
    _MP_CLIENT = mc = fastmc.Client([mcd.address])
    assert mc.set("mp-parent", "parent")
    try:
        with multiprocessing.get_context("fork").Pool(3) as pool:
            assert pool.map(_mp_worker, range(12)) == [True] * 12
    finally:
        _MP_CLIENT = None
    assert mc.get("mp-parent") == "parent"
    assert mc.get_multi(["mp-3-7", "mp-11-49"]) == {"mp-3-7": "mp-3-7", "mp-11-49": "mp-11-49"}


def test_fork_child_never_reuses_parent_socket(mcd):
    mc = fastmc.Client([mcd.address])
    assert mc.set("f", "parent")
    stats = lambda: int(mc.get_stats()[0][1]["total_connections"])  # noqa: E731
    before = stats()
    assert in_forked_child(lambda: mc.get("f") == "parent" and mc.set("f", "child")) == 0
    # the child opened its own connection(s); the parent's pooled one still works and is in sync
    assert stats() > before
    assert mc.get("f") == "child"
    assert mc.get("nope") is None


def test_fork_child_never_shares_a_socket_with_the_parent(fake):
    """One socket shared by forked workers gives garbled replies (django-cms #5896 with a preloaded
    app; python-memcached #166). The child opens its own connection even after disconnect_all (which
    must not send `quit` on the parent's socket), and the parent keeps using its own connection, in
    sync."""
    mc = fastmc.Client([fake.address])
    assert mc.set("f", "parent")
    assert fake.accepted == 1

    def child():
        mc.disconnect_all()
        return mc.get("f") == "parent" and mc.set("f", "child")

    assert in_forked_child(child) == 0
    assert fake.accepted == 2
    parent_conn = fake.commands[0][0]
    assert all(cid != parent_conn for cid, _ in fake.commands[1:])
    assert b"quit" not in fake.command_names()
    assert mc.get("f") == "child"
    assert fake.commands[-1][0] == parent_conn  # still the parent's own connection
    assert fake.accepted == 2


def test_fork_without_python_hooks_never_shares_a_socket(fake):
    """uWSGI forks its workers with a plain C fork() that runs none of Python's at-fork hooks
    (unless py-call-osafterfork is set): with an app preloaded in the master, the worker still
    opens its own connection."""
    import ctypes

    mc = fastmc.Client([fake.address])
    assert mc.set("f", "parent")

    def child():
        return mc.get("f") == "parent" and mc.set("f", "child")

    # PyDLL: the GIL stays held across the fork, as in uWSGI
    if not hasattr(ctypes, "PyDLL"):
        pytest.skip("PyPy's ctypes has no PyDLL; through CDLL the GIL is let go across the fork")
    assert in_forked_child(child, fork=ctypes.PyDLL(None).fork) == 0
    assert fake.accepted == 2
    parent_conn = fake.commands[0][0]
    assert all(cid != parent_conn for cid, _ in fake.commands[1:])
    assert mc.get("f") == "child"
    assert fake.commands[-1][0] == parent_conn


def test_grandchild_never_uses_its_parents_socket(fake):
    """The same one generation further: a child that opened its own connection forks again, and the
    grandchild opens a third one instead of using the child's."""
    mc = fastmc.Client([fake.address])
    assert mc.set("f", "parent")

    def child():
        return mc.get("f") == "parent" and in_forked_child(lambda: mc.get("f") == "parent") == 0

    assert in_forked_child(child) == 0
    assert fake.accepted == 3
    conns = [cid for cid, _ in fake.commands]
    assert len(set(conns)) == 3  # parent, child and grandchild each used their own
    assert mc.get("f") == "parent"
    assert fake.commands[-1][0] == conns[0]


def test_child_killed_mid_operation_does_not_affect_the_parent(fake):
    """A forked child killed in the middle of a call leaves the parent's connection in sync
    (python-memcached #166 gave wrong values after that)."""
    mc = fastmc.Client([fake.address])
    assert mc.set("a", "A") and mc.set("b", "B")
    fake.rule("a", "delay:2")
    pid = os.fork()
    if pid == 0:
        try:
            mc.get("a")
        finally:
            os._exit(0)
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    fake.rule("a", None)
    assert mc.get("b") == "B"
    assert mc.get("a") == "A"
    assert mc.get_multi(["a", "b"]) == {"a": "A", "b": "B"}
