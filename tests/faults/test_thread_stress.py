"""Threads racing on the same keys through one client: counters and compare-and-swap loops come
out exact, and no thread ever reads a value of another key. On a free-threaded CPython (3.14t,
3.15t: the release workflow's free-threaded job runs this module there) the threads run truly in
parallel, and importing fastmc must leave the GIL off."""

import subprocess
import sys
import sysconfig

import fastmc
from memcached import Memcached
from threads import run_threads

THREADS = 8


def test_importing_fastmc_leaves_the_gil_as_the_build_has_it():
    """A free-threaded build keeps the GIL off only for modules declared safe without it
    (`gil_used = false`); otherwise the import turns it back on, with a warning."""
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    probe = (
        "import sys, warnings; warnings.simplefilter('error'); import fastmc, fastmc.aio; "
        "print(getattr(sys, '_is_gil_enabled', lambda: True)())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == str(not free_threaded), out.stderr


def test_shared_counter_and_cas_loops_come_out_exact(mcd):
    mc = fastmc.Client([mcd.address], behaviors={"cas": True})
    assert mc.set("stress:ctr", 0) and mc.set("stress:cas", 0)
    rounds = 200

    def work(t):
        for i in range(rounds):
            mc.incr("stress:ctr")
            # a compare-and-swap loop: retried until no other thread wrote in between
            while True:
                value, token = mc.gets("stress:cas")
                if mc.cas("stress:cas", value + 1, token):
                    break
            key = "stress:%d:%d" % (t, i % 16)
            assert mc.set(key, (t, i))
            assert mc.get(key) == (t, i)

    assert run_threads(work, THREADS) == []
    assert mc.get("stress:ctr") == THREADS * rounds
    assert mc.get("stress:cas") == THREADS * rounds


def test_multi_reads_racing_writes_never_cross_keys(mcd):
    other = Memcached()
    mc = fastmc.Client([mcd.address, other.address])
    keys = ["stress:m%d" % i for i in range(64)]
    assert mc.set_multi({k: (k, 0) for k in keys}) == []

    def work(t):
        for n in range(60):
            if t % 2:
                mine = keys[t::THREADS]
                assert mc.set_multi({k: (k, n) for k in mine}) == []
                assert mc.delete_multi(mine[:1])
            else:
                got = mc.get_multi(keys)
                assert all(v[0] == k for k, v in got.items()), got

    try:
        assert run_threads(work, THREADS) == []
    finally:
        other.stop()
