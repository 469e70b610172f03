"""The binding runs no Python code while it holds a core lock, and takes no core lock while it
holds the interpreter (src/py/io.rs states the rule).

A behaviors dict can run Python code while it is read: an int subclass too big for 64 bits is
masked with its own ``__and__``. When that code ran under the core's behaviors lock, a thread that
took the same lock while attached (gets reading the cas flag) blocked while holding the GIL, and
the sleeping ``__and__`` could never get the GIL back: the process hung. A callback into the same
client from ``__and__`` hung at once, on the lock its own thread held.

Each scenario runs in a child process, because a hang there also holds the GIL and so stops any
thread of the test process that would report it; the test fails when the child does not finish
in time.
"""

import subprocess
import sys
import textwrap

import pytest

CHILD_TIMEOUT = 60

PRELUDE = textwrap.dedent(
    """
    import sys
    import threading
    import time

    from fastmc import _fastmc

    ADDRESS = sys.argv[1]
    calls = []


    class SlowInt(int):
        # Too big for 64 bits: the binding masks it with __and__, which sleeps (the GIL is free).
        def __and__(self, other):
            calls.append("and")
            time.sleep(0.05)
            return int(self) & other


    def new_client():
        mc = _fastmc.client([ADDRESS], behaviors={"cas": 1})
        mc.set("k", "v")
        return mc
    """
)

CONCURRENT = PRELUDE + textwrap.dedent(
    """
    mc = new_client()
    stop = threading.Event()
    done = {}


    def reader():
        n = 0
        while not stop.is_set():
            assert mc.get("k") == "v"
            value, cas = mc.gets("k")
            assert value == "v" and cas
            n += 1
        done["reader"] = n


    def writer():
        try:
            for _ in range(5):
                mc.set_behaviors({"tcp_nodelay": SlowInt(2**64 + 1)})
            done["writer"] = True
        finally:
            stop.set()


    threads = [threading.Thread(target=reader, daemon=True), threading.Thread(target=writer, daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    assert done.get("writer") and done.get("reader"), done
    assert calls.count("and") == 5, calls
    assert mc.get_behaviors()["tcp_nodelay"] == 1
    print("ok")
    """
)

REENTRANT = PRELUDE + textwrap.dedent(
    """
    mc = new_client()


    class CallsBack(int):
        # Reads the same client while its behaviors dict is being read.
        def __and__(self, other):
            calls.append(mc.get_behaviors()["cas"])
            calls.append(mc.get("k"))
            calls.append(mc.gets("k")[0])
            return int(self) & other


    mc.set_behaviors({"tcp_nodelay": CallsBack(2**64 + 1)})
    assert calls == [1, "v", "v"], calls
    assert mc.get_behaviors()["tcp_nodelay"] == 1
    print("ok")
    """
)


def run_child(script, address):
    try:
        out = subprocess.run(
            [sys.executable, "-c", script, address],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child did not finish in {CHILD_TIMEOUT} s: deadlock")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok", out.stdout


def test_set_behaviors_runs_python_code_outside_the_core_lock(server):
    """set_behaviors with an int whose __and__ sleeps, while another thread calls get and gets on
    the same client: both finish."""
    run_child(CONCURRENT, server.address)


def test_python_code_in_a_behaviors_dict_may_use_the_same_client(server):
    """An __and__ that calls back into the client whose behaviors it is setting."""
    run_child(REENTRANT, server.address)
