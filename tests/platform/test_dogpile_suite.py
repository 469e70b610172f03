"""dogpile.cache's own memcached backend tests pass on ``fastmc.dogpile`` (its generic backend
suite without and with ``distributed_lock``, with and without a lock timeout, and its mutex
suite: 82 tests of dogpile.cache 1.5.0's tests/cache/test_memcached_backend.py fixtures, from
its sdist), and a region's distributed lock is the key's own lease: one creator per expiry, no
``_lock`` key."""

import os
import pathlib
import threading
import time

import dogpile.cache
from sdists import run_pytest, unpacked

HERE = pathlib.Path(__file__).resolve().parent.parent / "support" / "dogpile_suite"


def test_dogpile_memcached_backend_suite(server, tmp_path):
    tree = unpacked("dogpile.cache", dogpile.cache.__version__, dist="dogpile_cache")
    (tmp_path / "tests").symlink_to(tree / "tests")
    # Named test_*.py only where the child pytest looks (this suite must not collect it).
    (tmp_path / "test_fastmc_dogpile.py").symlink_to(HERE / "fastmc_dogpile_cases.py")
    env = dict(os.environ, DOGPILE_MEMCACHED_PORT=str(server.port))
    rc, out, summary = run_pytest(
        tmp_path, ["-o", "python_classes=*Test", "test_fastmc_dogpile.py"], env
    )
    assert rc == 0, out[-5000:]
    assert summary.startswith("82 passed") and "skipped" not in summary, summary


def test_region_recomputes_once_on_the_keys_lease(server):
    import fastmc.dogpile
    from dogpile.cache import make_region

    region = make_region().configure(
        "fastmc",
        expiration_time=1,
        arguments={"url": [server.address], "distributed_lock": True, "lock_timeout": 10},
    )
    raw = fastmc.Client([server.address])
    calls = []
    lock_keys_seen = []

    def create():
        calls.append(1)
        lock_keys_seen.append(raw.get("_lockhot"))
        time.sleep(0.2)
        return len(calls)

    def reader():
        for _ in range(3):
            region.get_or_create("hot", create)
            time.sleep(0.4)

    threads = [threading.Thread(target=reader) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 16 threads over about 1.8 s with a 1 s expiry: one creation for the miss and one per
    # expiry, never one per thread; dogpile's separate lock key is never used.
    assert 1 <= len(calls) <= 3, calls
    assert lock_keys_seen == [None] * len(calls)
