"""fastmc.testing's fake server as users meet it: the clock, the failure switches, several
servers, the asyncio client, stampede protection, the pytest plugin and the Django helper.
(That its answers are memcached's is test_fake_diff.py's.)"""

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import fastmc
import pylibmc
import pytest
import tomllib
from fastmc.testing import FakeCluster, FakeServer, django_caches
from threads import run_threads


@pytest.fixture
def fake():
    with FakeServer() as f:
        yield f


def test_expiry_follows_the_fake_clock(fake):
    mc = fake.client()
    mc.set("rel", 1, time=10)
    # beyond 30 days: a Unix time, from the wall clock as clients compute it
    mc.set("abs", 1, time=int(time.time()) + 100)
    mc.set("never", 1)
    fake.advance(9)
    assert mc.get_multi(["rel", "abs", "never"]) == {"rel": 1, "abs": 1, "never": 1}
    fake.advance(1)
    assert mc.get_multi(["rel", "abs", "never"]) == {"abs": 1, "never": 1}
    fake.advance(90)
    assert mc.get_multi(["rel", "abs", "never"]) == {"never": 1}


def test_touch_and_gat_move_the_expiry(fake):
    mc = fake.client()
    mc.set_multi({"t": 1, "g": 2}, time=10)
    assert mc.touch("t", 100) is True
    assert mc.gat("g", 100) == 2
    fake.advance(50)
    assert mc.get_multi(["t", "g"]) == {"t": 1, "g": 2}
    assert fake.items()[b"t"][2] == 50  # seconds left


def test_flush_all_with_a_delay(fake):
    mc = fake.client()
    mc.set("old", 1)
    mc.flush_all(time=10)
    fake.advance(5)
    assert mc.get("old") == 1
    fake.advance(5)
    assert mc.get("old") is None
    mc.set("new", 2)
    assert mc.get("new") == 2


def test_counters_cas_and_item_size():
    with FakeServer(item_size_max=4096) as fake:
        mc = fake.client(behaviors={"cas": True})
        mc.set("n", 2**64 - 1)
        assert mc.incr("n") == 0
        assert mc.decr("n", 5) == 0
        mc.set("s", "abc")
        with pytest.raises(fastmc.ClientError):
            mc.incr("s")
        _, token = mc.gets("s")
        assert mc.cas("s", "new", token) is True
        assert mc.cas("s", "newer", token) is False
        with pytest.raises(fastmc.TooBig):
            mc.set("big", b"x" * 4096)
        assert mc.set("small", b"x" * 3000) is True


def test_fastmc_talks_to_the_fake_in_process_and_others_over_its_socket():
    with FakeServer() as fake:
        mc = fake.client()
        assert mc.set("k", "v", time=10)
        assert fastmc.Client([fake.address]).get("k") == "v"  # any client given its address
        assert (fake.accepted, fake._accepted) == (2, 0)  # two connections, no socket
        other = pylibmc.Client([fake.address])  # not fastmc: the socket, the same items
        assert other.get("k") == "v"
        other.set("p", 7)
        assert mc.get("p") == 7 and fake._accepted == 1
        fake.drop_connections()  # a restart: the pooled connection is replaced, no error
        assert mc.get("k") == "v" and fake.accepted == 4
        fake.advance(10)
        assert mc.get("k") is None and pylibmc.Client([fake.address]).get("k") is None
    with pytest.raises(fastmc.Error):
        mc.get("k")  # a closed fake is gone, in-process too
    with FakeServer(in_process=False) as fake:
        fake.client().set("k", 1)
        assert (fake.accepted, fake._accepted) == (1, 1)


@pytest.mark.parametrize("in_process", [True, False])
def test_failure_switches(in_process):
    fake = FakeServer(in_process=in_process)
    mc = fake.client(behaviors={"receive_timeout": 300_000, "retry_timeout": 1})
    mc.set("k", 1)
    fake.out_of_memory = True
    with pytest.raises(fastmc.ServerError):
        mc.set("k", 2)
    assert mc.get("k") is None  # memcached drops the old value of a refused set
    fake.out_of_memory = False
    mc.set("k", 3)
    fake.slow(float("inf"))
    with pytest.raises(fastmc.Error, match="TIMEOUT"):
        mc.get("k")
    fake.slow(0)
    fake.down()
    with pytest.raises(fastmc.Error):
        fake.client().get("k")
    fake.up()
    assert fake.client().get("k") == 3  # data survives down/up
    fake.close()


def test_a_cluster_places_keys_as_the_client_does():
    with FakeCluster(3) as cluster:
        mc = cluster.client(behaviors={"ketama": True})
        keys = ["key%d" % i for i in range(60)]
        mc.set_multi(dict.fromkeys(keys, 1))
        held = [set(s.items()) for s in cluster.servers]
        assert all(held) and sum(map(len, held)) == 60  # spread, each key on one server
        down = cluster.server_for("key7")
        down.down()
        got = mc.get_multi(keys)  # a failed server's keys are left out, as pylibmc does
        assert set(got) == {k for k in keys if k.encode() not in down.items()}


def test_the_asyncio_client_talks_to_the_fake(fake):
    async def main():
        mc = fake.aio_client()
        await mc.set("a", 41, time=5)
        return await mc.incr("a"), await mc.get("a")

    assert asyncio.run(main()) == (42, 42)
    fake.advance(5)
    assert fake.client().get("a") is None


def test_stampede_protection_on_the_fake(fake):
    mc = fake.client()
    calls = []

    def compute():
        calls.append(1)
        return "v"

    assert run_threads(lambda i: mc.get_or_set("hot", compute, 60, lease=5), 8) == []
    assert len(calls) == 1
    assert mc.invalidate("hot") is True
    # the stale value goes to everyone but the one caller that recomputes
    assert mc.get_or_set("hot", lambda: "new", 60) == "new"
    assert mc.get("hot") == "new"


def test_plugin_fixtures(tmp_path):
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            def test_fake(fastmc_fake):
                fastmc_fake.set("k", "v", time=10)
                fastmc_fake.fake.advance(10)
                assert fastmc_fake.get("k") is None

            def test_fresh(fastmc_fake):
                assert fastmc_fake.get("k") is None

            def test_aio(fastmc_fake_aio):
                import asyncio

                async def main():
                    await fastmc_fake_aio.set("k", 1, time=5)
                    return await fastmc_fake_aio.get("k")

                assert asyncio.run(main()) == 1
                fastmc_fake_aio.fake.advance(5)
                assert fastmc_fake_aio.fake.items() == {}

            def test_server(fastmc_server):
                fastmc_server.set("k", 1)
                assert fastmc_server.get("k") == 1
            """
        )
    )
    # as installed: a distribution whose pytest11 entry points are pyproject.toml's
    site = tmp_path / "site"
    info = site / "fastmc_entry-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fastmc-entry\nVersion: 1.0\n")
    points = "".join("%s = %s\n" % kv for kv in _pytest11().items())
    (info / "entry_points.txt").write_text("[pytest11]\n" + points)
    for installed, load in ((False, True), (True, False), (True, True)):
        args = ["-q", "-p", "no:cacheprovider", str(tmp_path / "test_user.py")]
        args += ["-p", "fastmc.testing.plugin"] if load else []
        env = dict(os.environ, PYTHONPATH=str(site)) if installed else None
        cmd = [sys.executable, "-m", "pytest", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert r.returncode == 0, (installed, load, r.stdout + r.stderr)
        assert "4 passed" in r.stdout


def _pytest11():
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    return project["project"]["entry-points"]["pytest11"]


def test_plugin_is_a_pytest11_entry_point_named_as_its_module():
    assert _pytest11() == {"fastmc.testing.plugin": "fastmc.testing.plugin"}


def test_django_caches_points_at_the_fake(fake):
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(USE_TZ=True)
        django.setup()
    from django.core.cache import caches
    from django.test import override_settings

    with override_settings(CACHES=django_caches(fake, TIMEOUT=60, KEY_PREFIX="t")):
        cache = caches["default"]
        cache.set("k", "v")
        assert cache.get("k") == "v"
        assert fake.items()[b"t:1:k"][2] == 60
        fake.advance(60)
        assert cache.get("k") is None


def test_flask_caching_recipe(fake):
    """docs/testing.md's Flask-Caching recipe."""
    from flask import Flask
    from flask_caching import Cache

    app = Flask(__name__)
    cache = Cache(
        app, config={"CACHE_TYPE": "MemcachedCache", "CACHE_MEMCACHED_SERVERS": fake.client()}
    )
    calls = []

    @cache.memoize(timeout=60)
    def slow(x):
        calls.append(x)
        return x * 2

    with app.app_context():
        assert slow(2) == slow(2) == 4
        assert calls == [2]
        fake.advance(60)
        slow(2)
    assert calls == [2, 2]
