"""The frameworks pylibmc users run, unchanged, on fastmc against a real memcached: Django (through
its own PyLibMCCache after ``fastmc.install_as_pylibmc()``, and through
``fastmc.django.FastMCCache``), Flask-Caching's pylibmc-based backends and dogpile.cache's
``dogpile.cache.pylibmc``.

``install_as_pylibmc()`` rewrites ``sys.modules``; the ``as_pylibmc`` fixture undoes it after each
test so that the other test modules keep the real pylibmc as their oracle."""

import asyncio
import contextlib
import sys
import time

import fastmc
import fastmc.aio
import pytest
from memcached import Memcached, sasl_memcached
from planted import Raw
from threads import run_threads

PYLIBMC_MODULES = (
    "pylibmc",
    "_pylibmc",
    "pylibmc.client",
    "pylibmc.consts",
    "pylibmc.pools",
    "pylibmc.test",
    "pylibmc.autoconf",
)


@pytest.fixture
def raw(server):
    """A plain fastmc client on the test server, flushed: to look behind a framework's back."""
    mc = fastmc.Client([server.address])
    mc.flush_all()
    return mc


@pytest.fixture
def as_pylibmc(monkeypatch):
    """``fastmc.install_as_pylibmc()`` for one test; ``sys.modules`` restored afterwards."""
    saved = {name: sys.modules.get(name) for name in PYLIBMC_MODULES}
    import dogpile.cache.backends.memcached as dogpile_memcached

    # dogpile keeps the pylibmc it imported in a module global: restore that too
    monkeypatch.setattr(dogpile_memcached, "pylibmc", dogpile_memcached.pylibmc)
    fastmc.install_as_pylibmc()
    import pylibmc

    assert pylibmc.Client is fastmc.Client and pylibmc.__name__ == "pylibmc"
    yield
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
    assert getattr(sys.modules.get("pylibmc"), "Client", None) is not fastmc.Client


def test_as_pylibmc_fixture_restores_the_real_pylibmc(as_pylibmc):
    # runs the fixture once more; its teardown asserts the real module is back
    import pylibmc.pools

    assert pylibmc.pools.ClientPool is fastmc.ClientPool


# ---------------------------------------------------------------------------------------------
# Django


def _django_caches(backend, server, **extra):
    config = {"BACKEND": backend, "LOCATION": server.address, "TIMEOUT": 60}
    other = dict(config, KEY_PREFIX="other-site")
    config.update(extra)
    return {"default": config, "other": other}


@pytest.fixture(params=["FastMCCache", "PyLibMCCache+install_as_pylibmc"])
def django_cache(request, server, raw, django_settings):
    """Django's ``caches`` configured for one of the two ways, with KEY_PREFIX and VERSION set."""
    from django.core.cache import caches
    from django.test import override_settings

    if request.param == "FastMCCache":
        backend = "fastmc.django.FastMCCache"
    else:
        request.getfixturevalue("as_pylibmc")
        backend = "django.core.cache.backends.memcached.PyLibMCCache"
    with override_settings(
        CACHES=_django_caches(
            backend,
            server,
            KEY_PREFIX="site1",
            VERSION=3,
            OPTIONS={"behaviors": {"tcp_nodelay": True}},
        )
    ):
        cache = caches["default"]
        assert isinstance(cache._cache, fastmc.Client)  # fastmc underneath, not pylibmc
        assert cache._lib.Client is fastmc.Client
        yield cache


def test_django_basic_operations(django_cache, raw):
    c = django_cache
    assert c.get("missing") is None
    assert c.get("missing", "dflt") == "dflt"
    c.set("k", {"a": [1, 2]})
    assert c.get("k") == {"a": [1, 2]}
    # key made by Django: KEY_PREFIX:VERSION:key, stored as pylibmc encodes values
    assert raw.get("site1:3:k") == {"a": [1, 2]}
    assert c.add("k", "other") is False
    assert c.add("new", "v") is True
    assert c.get("new") == "v"
    assert c.delete("new") is True
    assert c.delete("new") is False
    assert c.has_key("k") and not c.has_key("new")
    assert c.get_or_set("gos", lambda: 7) == 7
    assert c.get_or_set("gos", lambda: 8) == 7
    c.set("bytes", b"\x00\xff")
    c.set("text", "åäö")
    assert (c.get("bytes"), c.get("text")) == (b"\x00\xff", "åäö")


def test_django_incr_decr(django_cache, raw):
    c = django_cache
    c.set("n", 10)
    assert c.incr("n") == 11
    assert c.incr("n", 5) == 16
    assert c.decr("n", 6) == 10
    assert c.incr("n", -3) == 7  # negative delta goes to decr
    assert c.decr("n", 100) == 0  # memcached floors at zero
    assert c.get("n") == 0
    assert raw.get("site1:3:n") == 0
    with pytest.raises(ValueError):
        c.incr("absent")
    with pytest.raises(ValueError):
        c.decr("absent")


def test_django_incr_creates_a_missing_counter_with_initial(server, raw, django_settings):
    """FastMCCache's incr/decr (and aincr/adecr) take fastmc's initial= and timeout=: a missing
    counter is created at initial (returned), holding its digits (as memcached creates
    counters); without initial a missing key is still Django's ValueError."""
    from django.core.cache import caches
    from django.test import override_settings

    config = _django_caches("fastmc.django.FastMCCache", server, KEY_PREFIX="ctr", VERSION=1)
    with override_settings(CACHES=config):
        c = caches["default"]
        c.delete_many(["hits", "left", "ahits"])
        assert c.incr("hits", initial=5, timeout=60) == 5
        assert c.incr("hits", 2, initial=5) == 7
        assert c.decr("left", initial=3) == 3
        assert c.decr("left", 1, initial=3) == 2
        assert c.incr("left", -2, initial=9) == 0  # a negative delta goes to decr
        assert raw.get("ctr:1:hits") == b"7"
        with pytest.raises(ValueError):
            c.incr("absent")

        async def main():
            assert await c.aincr("ahits", initial=1) == 1
            assert await c.adecr("ahits", 1, initial=1) == 0
            with pytest.raises(ValueError):
                await c.adecr("absent")
            await c.aclose()

        asyncio.run(main())
        assert raw.get("ctr:1:ahits") == b"0"


def test_django_suite_expectations(django_cache, raw):
    """What Django's own memcached tests expect of the library: incr of a non-number raises
    the library's ClientError; a value over memcached's item size limit is not stored and the
    old value is gone (the backend deletes after a failed set)."""
    c = django_cache
    c.set("none", None)
    with pytest.raises(c._lib.ClientError):
        c.incr("none")
    c.set("big", "small")
    with contextlib.suppress(fastmc.TooBig):
        c.set("big", "x" * (2 * 1024 * 1024))
    assert c.get("big") is None
    c.set("flag", True)
    assert c.get("flag") == 1  # pylibmc reads a bool back as an int; Django compares with ==


def test_django_many(django_cache, raw):
    c = django_cache
    assert c.set_many({"a": 1, "b": "two", "c": [3]}) == []
    assert c.get_many(["a", "b", "c", "zz"]) == {"a": 1, "b": "two", "c": [3]}
    assert sorted(raw.get_multi(["a", "b", "c"], key_prefix="site1:3:")) == ["a", "b", "c"]
    c.delete_many(["a", "c", "zz"])
    assert c.get_many(["a", "b", "c"]) == {"b": "two"}
    c.clear()
    assert c.get("b") is None


def test_django_timeouts(django_cache, raw):
    c = django_cache
    c.set("forever", 1, timeout=None)  # None: never expires (memcached time 0)
    c.set("zero", 1, timeout=0)  # 0: expire at once
    c.set("negative", 1, timeout=-5)
    c.set("month", 1, timeout=31 * 86400)  # > 30 days: Django sends an absolute timestamp
    c.set("short", 1, timeout=1)
    assert c.add("zero_add", 1, timeout=0) is True
    assert c.set_many({"m0": 1}, timeout=0) == []
    assert c.get_many(["forever", "zero", "negative", "month", "short", "zero_add", "m0"]) == {
        "forever": 1,
        "month": 1,
        "short": 1,
    }
    # touch: a new timeout for an existing key; 0 expires it
    c.set("t", 1, timeout=1)
    assert c.touch("t", None) is True
    assert c.touch("absent", 10) is False
    c.set("t0", 1)
    assert c.touch("t0", 0)
    assert c.get("t0") is None
    time.sleep(2.1)  # memcached's clock ticks in whole seconds
    assert c.get("short") is None
    assert c.get("t") == 1 and c.get("forever") == 1 and c.get("month") == 1


def test_django_key_prefix_and_versions(django_cache, raw):
    from django.core.cache import caches

    c = django_cache
    other = caches["other"]  # same server, another KEY_PREFIX, default VERSION 1
    c.set("shared", "site1")
    other.set("shared", "other")
    assert c.get("shared") == "site1" and other.get("shared") == "other"
    assert raw.get("other-site:1:shared") == "other"
    c.set("v", "three")
    c.set("v", "one", version=1)
    assert c.get("v") == "three" and c.get("v", version=1) == "one"
    assert c.get_many(["v"], version=1) == {"v": "one"}
    assert c.incr_version("v") == 4
    assert c.get("v") is None and c.get("v", version=4) == "three"
    assert c.decr_version("v", version=4) == 3
    assert c.get("v") == "three"
    c.delete("v", version=1)
    assert raw.get("site1:1:v") is None and raw.get("site1:3:v") == "three"


def test_django_rejects_keys_memcached_cannot_take(django_cache):
    from django.core.cache.backends.base import InvalidCacheKey

    with pytest.raises(InvalidCacheKey):
        django_cache.set("has space", 1)
    with pytest.raises(InvalidCacheKey):
        django_cache.get("k" * 300)


def test_django_async_api(django_cache):
    c = django_cache

    async def main():
        await c.aset("ak", "av")
        assert await c.aget("ak") == "av"
        assert await c.aincr("ak_n", 1) if await c.aadd("ak_n", 1) else False
        return await c.aget_many(["ak", "ak_n"])

    assert asyncio.run(main()) == {"ak": "av", "ak_n": 2}


def test_django_async_api_runs_on_the_asyncio_client(server, raw, django_settings):
    """FastMCCache's async methods use fastmc.aio, never the blocking client in a thread:
    with the blocking client made unusable, every async method still works, and what they
    store is what the blocking methods (and pylibmc) read."""
    from django.core.cache import caches
    from django.test import override_settings

    class NoBlocking:
        def __getattr__(self, name):
            raise AssertionError("the blocking client was used for " + name)

    config = _django_caches("fastmc.django.FastMCCache", server, KEY_PREFIX="as", VERSION=2)
    with override_settings(CACHES=config):
        cache = caches["default"]
        blocking = cache._cache
        cache.__dict__["_cache"] = NoBlocking()

        async def main():
            assert isinstance(cache._acache, fastmc.aio.Client)
            await cache.aset("k", {"v": 1})
            assert await cache.aget("k") == {"v": 1}
            assert await cache.aget("missing", "D") == "D"
            assert await cache.aadd("k", 2) is False
            assert await cache.aadd("n", 10) is True
            assert await cache.aincr("n", 5) == 15
            assert await cache.adecr("n", 20) == 0
            with pytest.raises(ValueError):
                await cache.aincr("nope")
            assert await cache.ahas_key("k") and not await cache.ahas_key("nope")
            assert await cache.aset_many({"a": 1, "b": 2}) == []
            assert await cache.aget_many(["a", "b", "c"]) == {"a": 1, "b": 2}
            await cache.adelete_many(["a"])
            assert await cache.aget_many(["a", "b"]) == {"b": 2}
            assert await cache.atouch("b", 100) is True
            assert await cache.adelete("b") is True and await cache.adelete("b") is False
            assert await cache.aget_or_set("g", lambda: "computed") == "computed"
            assert await cache.aget_or_set("g", lambda: "again") == "computed"
            assert await cache.aincr_version("k") == 3
            assert await cache.aget("k", version=3) == {"v": 1}
            await cache.aset("z", "x", timeout=0)  # expires at once, as in Django
            assert await cache.aget("z") is None
            await cache.aclose()

        asyncio.run(main())
        cache.__dict__["_cache"] = blocking
        assert cache.get("n") == 0
        assert cache.get("k", version=3) == {"v": 1}
        assert raw.get("as:3:k") == {"v": 1}  # the key Django makes, the value pylibmc reads
        asyncio.run(_aclear(cache))
        assert cache.get("n") is None


async def _aclear(cache):
    await cache.aclear()


def _total_connections(raw):
    return int(raw.get_stats()[0][1]["total_connections"])


def test_django_requests_need_no_disconnect(django_cache, raw):
    """Django calls close() on every cache after each request: the client must keep working and
    keep its connections (no reconnect per request)."""
    from django.core.signals import request_finished, request_started

    c = django_cache
    c.set("req", 0)
    before = _total_connections(raw)
    for i in range(20):
        request_started.send(sender=None)
        assert c.get("req") == i
        c.set("req", i + 1)
        request_finished.send(sender=None)  # runs caches.close_all()
    assert c.get("req") == 20
    assert _total_connections(raw) - before <= 1


def test_fastmc_backend_shares_one_client_across_threads(server, raw, django_settings):
    from django.core.cache import caches
    from django.test import override_settings

    conf = _django_caches("fastmc.django.FastMCCache", server)
    conf["tuned"] = dict(conf["default"], OPTIONS={"behaviors": {"no_block": True}})
    with override_settings(CACHES=conf):
        backends, clients = [], []

        def worker(i):
            cache = caches["default"]  # Django builds one backend object per thread
            for j in range(50):
                cache.set("th%d" % i, j)
                assert cache.get("th%d" % i) == j
            backends.append(cache)
            clients.append(cache._cache)

        assert run_threads(worker, 8) == []
        assert len({id(b) for b in backends}) == 8
        assert all(cl is clients[0] for cl in clients)
        # the key prefix is Django's business: same servers and options, same client
        assert caches["other"]._cache is clients[0]
        # other options get their own client
        assert caches["tuned"]._cache is not clients[0]
        assert raw.get_multi(["th%d" % i for i in range(8)], key_prefix=":1:") == {
            "th%d" % i: 49 for i in range(8)
        }


def test_fastmc_backend_shares_one_client_across_async_requests(server, raw, django_settings):
    """Under ASGI Django builds a backend object per request context (asyncio task): they all
    get the same client, so concurrent requests do not each open connections."""
    from django.core.cache import caches
    from django.test import override_settings

    async def request(i):
        cache = caches["default"]
        await cache.aset("r%d" % i, i)
        assert await cache.aget("r%d" % i) == i
        return cache

    async def main():
        return await asyncio.gather(*[request(i) for i in range(10)])

    with override_settings(CACHES=_django_caches("fastmc.django.FastMCCache", server)):
        backends = asyncio.run(main())
        assert len({id(b) for b in backends}) == 10
        assert len({id(b._cache) for b in backends}) == 1


def test_fastmc_backend_accepts_pylibmc_options_and_unix_prefix(django_settings, tmp_path):
    from django.core.cache import caches
    from django.test import override_settings

    sock = str(tmp_path / "mc.sock")
    proc = Memcached(memory_mb=16, unix_path=sock)
    try:
        caches_conf = {
            "default": {
                "BACKEND": "fastmc.django.FastMCCache",
                "LOCATION": "unix:" + sock,
                "OPTIONS": {"behaviors": {"ketama": True, "hash": "md5"}},
            }
        }
        with override_settings(CACHES=caches_conf):
            c = caches["default"]
            c.set("u", "over a unix socket")
            assert c.get("u") == "over a unix socket"
            assert c._cache.behaviors["ketama"] == 1
            assert c._cache.addresses == [sock]
    finally:
        proc.stop()


# ---------------------------------------------------------------------------------------------
# Flask-Caching


@pytest.fixture
def flask_app(server, raw, as_pylibmc):
    from flask import Flask
    from flask_caching import Cache

    app = Flask("fastmc_test")
    cache = Cache(
        app,
        config={
            "CACHE_TYPE": "MemcachedCache",
            "CACHE_DEFAULT_TIMEOUT": 60,
            "CACHE_MEMCACHED_SERVERS": [server.address],
            "CACHE_KEY_PREFIX": "flask:",
        },
    )
    return app, cache


def test_flask_caching_backend_is_fastmc(flask_app):
    _, cache = flask_app
    # Flask-Caching >= 2.5 (cachelib) wraps the client in pylibmc.ClientPool; older ones use it bare
    client = cache.cache._client
    assert isinstance(client, (fastmc.ClientPool, fastmc.Client))
    if isinstance(client, fastmc.ClientPool):
        with cache.cache._client_context() as mc:
            assert isinstance(mc, fastmc.Client)


def test_flask_caching_operations(flask_app, raw):
    _, cache = flask_app
    assert cache.get("nope") is None
    assert cache.set("k", {"x": 1}) is True
    assert cache.get("k") == {"x": 1}
    assert raw.get("flask:k") == {"x": 1}
    assert cache.add("k", 2) is False
    assert cache.add("a", 2) is True
    assert cache.has("a") and not cache.has("nope")
    assert cache.set_many({"m1": 1, "m2": "two"}) == ["m1", "m2"]
    assert cache.get_many("m1", "m2", "zz") == [1, "two", None]
    assert cache.get_dict("m1", "zz") == {"m1": 1, "zz": None}
    cache.set("counter", 0)
    assert cache.cache.inc("counter") == 1
    assert cache.cache.inc("counter", 5) == 6
    assert cache.cache.dec("counter", 2) == 4
    assert cache.delete("a") is True
    assert cache.delete("a") is False
    assert cache.delete_many("m1", "m2")  # the deleted keys (a bool before Flask-Caching 2.5)
    assert cache.get_many("m1", "m2") == [None, None]
    # keys memcached cannot take are skipped silently on reads, as with pylibmc
    assert cache.get("has space") is None
    assert cache.clear() is True
    assert cache.get("k") is None


def test_flask_caching_timeouts(flask_app):
    _, cache = flask_app
    cache.set("short", 1, timeout=1)
    cache.set("forever", 1, timeout=0)  # 0: never expires in Flask-Caching
    assert cache.get("short") == 1
    time.sleep(2.1)
    assert cache.get("short") is None and cache.get("forever") == 1


def test_flask_caching_views_and_memoize(flask_app):
    app, cache = flask_app
    calls = []

    @app.route("/page")
    @cache.cached()
    def page():
        calls.append("page")
        return "rendered %d" % len(calls)

    @cache.memoize()
    def square(x):
        calls.append(x)
        return x * x

    client = app.test_client()
    assert client.get("/page").data == b"rendered 1"
    assert client.get("/page").data == b"rendered 1"
    with app.app_context():
        assert square(4) == 16 and square(4) == 16 and square(5) == 25
        cache.delete_memoized(square, 4)
        assert square(4) == 16
    assert calls == ["page", 4, 5, 4]


def test_flask_caching_with_a_shared_fastmc_client(server, raw):
    """Without install_as_pylibmc: a thread-safe fastmc client passed as the servers setting is
    used as is (cachelib takes any ready client), with no pool around it."""
    from flask import Flask
    from flask_caching import Cache

    client = fastmc.Client([server.address])
    cache = Cache(
        Flask("fastmc_direct"),
        config={
            "CACHE_TYPE": "MemcachedCache",
            "CACHE_MEMCACHED_SERVERS": client,
            "CACHE_KEY_PREFIX": "direct:",
        },
    )
    assert cache.cache._client is client
    assert cache.set("k", [1, 2]) and cache.get("k") == [1, 2]
    assert raw.get("direct:k") == [1, 2]
    assert cache.get_many("k", "zz") == [[1, 2], None]

    def worker(i):
        for j in range(30):
            cache.set("t%d" % i, j)
            assert cache.get("t%d" % i) == j

    assert run_threads(worker, 6) == []


def test_flask_caching_sasl_backend(tmp_path, as_pylibmc):
    """SASLMemcachedCache builds a ``binary=True`` client with username/password: against a real
    memcached that requires SASL it works, and a wrong password fails loudly."""
    from flask_caching.backends.memcache import SASLMemcachedCache

    proc = sasl_memcached(tmp_path, "flask", "pw 1")
    try:
        cache = SASLMemcachedCache(
            servers=[proc.address], key_prefix="sasl:", username="flask", password="pw 1"
        )
        with cache._client_context() as client:
            assert isinstance(client, fastmc.Client) and client.binary
        assert cache.set("k", [1]) and cache.get("k") == [1]
        assert cache.add("k", 2) is False and cache.delete("k") and cache.get("k") is None
        bad = SASLMemcachedCache(servers=[proc.address], username="flask", password="nope")
        with pytest.raises(fastmc.Error, match="AUTHENTICATION"):
            bad.set("k", 1)
    finally:
        proc.stop()


# ---------------------------------------------------------------------------------------------
# dogpile.cache


@pytest.fixture
def region(server, raw, as_pylibmc):
    from dogpile.cache import make_region
    from dogpile.cache.util import sha1_mangle_key

    # dogpile's function keys contain spaces ("module:fn|1 2"): memcached needs a mangler
    return make_region(key_mangler=lambda k: "dp:" + sha1_mangle_key(k)).configure(
        "dogpile.cache.pylibmc",
        expiration_time=60,
        arguments={
            "url": [server.address],
            "behaviors": {"tcp_nodelay": True, "ketama": True},
            "memcached_expire_time": 120,
            "distributed_lock": True,
            "lock_timeout": 5,
        },
    )


def test_dogpile_backend_is_fastmc(region):
    assert isinstance(region.backend.client, fastmc.Client)
    assert region.backend.client.behaviors["ketama"] == 1


def test_dogpile_operations(region, raw):
    from dogpile.cache.api import NO_VALUE
    from dogpile.cache.util import sha1_mangle_key

    assert region.get("nope") is NO_VALUE
    region.set("k", {"v": 1})
    assert region.get("k") == {"v": 1}
    # stored under the mangled key (as a CachedValue)
    assert raw.get("dp:" + sha1_mangle_key("k")) is not None
    region.set_multi({"a": 1, "b": 2})
    assert region.get_multi(["a", "b", "zz"]) == [1, 2, NO_VALUE]
    region.delete("a")
    assert region.get("a") is NO_VALUE
    region.delete_multi(["b", "k"])
    assert region.get_multi(["b", "k"]) == [NO_VALUE, NO_VALUE]


def test_dogpile_get_or_create_and_decorator(region):
    calls = []

    def create():
        calls.append(1)
        return len(calls)

    assert region.get_or_create("goc", create) == 1
    assert region.get_or_create("goc", create) == 1

    @region.cache_on_arguments()
    def add(x, y):
        calls.append((x, y))
        return x + y

    assert add(1, 2) == 3 and add(1, 2) == 3
    add.invalidate(1, 2)
    assert add(1, 2) == 3
    assert calls == [1, (1, 2), (1, 2)]


def test_dogpile_expiration(region):
    from dogpile.cache.api import NO_VALUE

    region.set("e", "v")
    assert region.get("e", expiration_time=1) == "v"
    time.sleep(1.1)
    assert region.get("e", expiration_time=1) is NO_VALUE  # dogpile's own expiry on stored time
    assert region.get("e") == "v"


def test_dogpile_distributed_lock_creates_once_across_threads(region, raw):
    calls, results = [], []

    def create():
        calls.append(1)
        time.sleep(0.3)  # hold the memcached lock while the other threads arrive
        return "made"

    def worker(_i):
        results.append(region.get_or_create("locked", create))

    assert run_threads(worker, 6) == []
    assert results == ["made"] * 6
    assert len(calls) == 1
    from dogpile.cache.util import sha1_mangle_key

    assert raw.get("_lockdp:" + sha1_mangle_key("locked")) is None  # the lock was released


def test_dogpile_unmangled_key_with_space_raises(server, as_pylibmc):
    """Without a key mangler dogpile's function keys contain spaces. pylibmc sends them as they
    are (the server then reads a different command); fastmc raises BadKeyProvided."""
    from dogpile.cache import make_region

    region = make_region().configure("dogpile.cache.pylibmc", arguments={"url": [server.address]})

    @region.cache_on_arguments()
    def add(x, y):
        return x + y

    with pytest.raises(fastmc.BadKeyProvided):
        add(1, 2)


def test_django_get_or_set_computes_once_across_threads_and_tasks(server, django_settings):
    """FastMCCache.get_or_set and aget_or_set run on memcached leases: 16 threads (then 50
    asyncio tasks) asking for one missing key compute it once."""
    from django.core.cache import caches
    from django.test import override_settings

    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return "computed"

    config = _django_caches("fastmc.django.FastMCCache", server, KEY_PREFIX="gos")
    with override_settings(CACHES=config):
        cache = caches["default"]
        cache.delete("hot")
        out = []
        errors = run_threads(lambda i: out.append(cache.get_or_set("hot", slow, 60)), 16)
        assert errors == [] and out == ["computed"] * 16 and len(calls) == 1

        async def aslow():
            calls.append(1)
            await asyncio.sleep(0.2)
            return "again"

        async def main():
            await cache.adelete("warm")
            return await asyncio.gather(*(cache.aget_or_set("warm", aslow, 60) for _ in range(50)))

        assert asyncio.run(main()) == ["again"] * 50 and len(calls) == 2


def test_django_discovery_follows_the_configuration_endpoint(servers, django_settings):
    """``OPTIONS["discovery"]``: the LOCATION is a configuration endpoint; the blocking and the
    asyncio clients start on its node list and follow it when it changes."""
    from config_endpoint import ConfigEndpoint
    from django.core.cache import caches
    from django.test import override_settings

    with ConfigEndpoint(servers[:1]) as ep:
        config = {
            "default": {
                "BACKEND": "fastmc.django.FastMCCache",
                "LOCATION": ep.address,
                "OPTIONS": {"discovery": {"interval": 0.05}, "behaviors": {"ketama": True}},
            }
        }
        with override_settings(CACHES=config):
            cache = caches["default"]
            assert cache._cache.addresses == servers[:1]
            cache.set_many({"d%d" % i: i for i in range(30)})
            by_server = [fastmc.Client([s]) for s in servers]
            assert len(by_server[0].get_multi([":1:d%d" % i for i in range(30)])) == 30

            async def main():
                mc = cache._acache
                assert mc.addresses == servers[:1]
                assert await cache.aget("d7") == 7
                ep.set_nodes(servers)
                deadline = time.monotonic() + 5
                while mc.addresses != servers and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                assert mc.addresses == servers
                await cache.aset_many({"e%d" % i: i for i in range(30)})
                await mc.close()

            asyncio.run(main())
            deadline = time.monotonic() + 5
            while cache._cache.addresses != servers and time.monotonic() < deadline:
                time.sleep(0.02)
            assert cache._cache.addresses == servers
            cache.set_many({"f%d" % i: i for i in range(30)})
            for prefix in "ef":  # both clients spread their keys over the three servers now
                keys = [":1:%s%d" % (prefix, i) for i in range(30)]
                spread = [len(c.get_multi(keys)) for c in by_server]
                assert sum(spread) == 30 and all(n > 0 for n in spread)
            cache._cache.close()

    with (
        override_settings(
            CACHES={"default": dict(config["default"], LOCATION=[servers[0], servers[1]])}
        ),
        pytest.raises(ValueError, match="one configuration endpoint"),
    ):
        caches["default"].get("x")


# ---------------------------------------------------------------------------------------------
# The value policy through each framework (docs/security.md)

SIGNING_KEY = "s" * 32


@pytest.mark.parametrize("backend", ["FastMCCache", "PyLibMCCache+install_as_pylibmc"])
def test_django_options_carry_the_value_policy(backend, server, raw, django_settings, request):
    """OPTIONS reach both clients (blocking and asyncio): objects are written signed, and a
    pickle planted in the cache is refused instead of run."""
    import asyncio

    from django.core.cache import caches
    from django.test import override_settings

    if backend == "FastMCCache":
        path = "fastmc.django.FastMCCache"
    else:
        request.getfixturevalue("as_pylibmc")
        path = "django.core.cache.backends.memcached.PyLibMCCache"
    options = {"pickle": "signed", "signing_keys": [SIGNING_KEY]}
    with override_settings(CACHES=_django_caches(path, server, KEY_PREFIX="pol", OPTIONS=options)):
        cache = caches["default"]
        cache.set("obj", {"a": 1})
        assert cache.get("obj") == {"a": 1}
        key = cache.make_and_validate_key("obj")
        assert Raw([server.address]).get(key)[1] == 257  # signed pickle
        raw.set(cache.make_and_validate_key("planted"), {"b": 2})  # an unsigned pickle
        with pytest.raises(fastmc.RefusedValueError):
            cache.get("planted")
        if backend == "FastMCCache":

            async def main():
                await cache.aset("aobj", [1])
                assert await cache.aget("aobj") == [1]
                with pytest.raises(fastmc.RefusedValueError):
                    await cache.aget("planted")

            asyncio.run(main())
            assert Raw([server.address]).get(cache.make_and_validate_key("aobj"))[1] == 257


@pytest.mark.parametrize("backend", ["FastMCCache", "PyLibMCCache+install_as_pylibmc"])
def test_django_options_carry_zstd_compression(backend, server, django_settings, request):
    """compression, zstd_min_len and zstd_dict in OPTIONS reach both clients (blocking and
    asyncio): large values are stored zstd-compressed (flags 512 + 8)."""
    import asyncio

    from django.core.cache import caches
    from django.test import override_settings

    if backend == "FastMCCache":
        path = "fastmc.django.FastMCCache"
    else:
        request.getfixturevalue("as_pylibmc")
        path = "django.core.cache.backends.memcached.PyLibMCCache"
    samples = [b'{"id": %d, "name": "user %d", "ok": true}' % (i, i) for i in range(300)]
    dictionary = fastmc.values.train_zstd_dict(samples, 2048)
    options = {"compression": "zstd", "zstd_min_len": 100, "zstd_dict": dictionary}
    value = "page " * 1000
    with override_settings(CACHES=_django_caches(path, server, KEY_PREFIX="zs", OPTIONS=options)):
        cache = caches["default"]
        cache.set("page", value)
        assert cache.get("page") == value
        raw = Raw([server.address], zstd_dict=dictionary)  # compressed with the dictionary
        assert raw.get(cache.make_and_validate_key("page"))[1] == 16 | 512 | 8
        if backend == "FastMCCache":

            async def main():
                await cache.aset("apage", value)
                assert await cache.aget("apage") == value

            asyncio.run(main())
            assert raw.get(cache.make_and_validate_key("apage"))[1] == 16 | 512 | 8


def test_flask_caching_takes_the_policy_from_the_environment(server, raw, as_pylibmc, monkeypatch):
    """cachelib builds its client without options: the FASTMC_* variables reach it."""
    from flask import Flask
    from flask_caching import Cache

    monkeypatch.setenv("FASTMC_PICKLE", "signed")
    monkeypatch.setenv("FASTMC_SIGNING_KEYS", SIGNING_KEY)
    app = Flask("fastmc_policy")
    cache = Cache(
        app,
        config={
            "CACHE_TYPE": "MemcachedCache",
            "CACHE_MEMCACHED_SERVERS": [server.address],
            "CACHE_KEY_PREFIX": "fp:",
        },
    )
    with app.app_context():
        assert cache.set("obj", {"a": 1}) and cache.get("obj") == {"a": 1}
        assert Raw([server.address]).get("fp:obj")[1] == 257
        raw.set("fp:planted", {"b": 2})
        with pytest.raises(fastmc.RefusedValueError):
            cache.get("planted")


def test_dogpile_arguments_carry_the_value_policy(server, raw):
    import fastmc.dogpile  # registers "fastmc"
    from dogpile.cache import make_region

    region = make_region().configure(
        "fastmc",
        arguments={"url": [server.address], "pickle": "signed", "signing_keys": [SIGNING_KEY]},
    )
    region.set("obj", {"a": 1})
    assert region.get("obj") == {"a": 1}
    assert Raw([server.address]).get("obj")[1] == 257
    raw.set("planted", {"b": 2})
    with pytest.raises(fastmc.RefusedValueError):
        region.get("planted")


def test_dogpile_arguments_carry_zstd_compression(server, raw):
    import fastmc.dogpile  # noqa: F401 (registers "fastmc")
    from dogpile.cache import make_region

    region = make_region().configure(
        "fastmc",
        arguments={"url": [server.address], "compression": "zstd", "zstd_min_len": 100},
    )
    region.set("big", "b" * 1000)
    assert region.get("big") == "b" * 1000
    assert Raw([server.address]).get("big")[1] & (512 | 8) == 512 | 8


# ---------------------------------------------------------------------------------------------
# Values without pickle through each framework (docs/security.md#values-without-pickle)

JSON_FLAGS = 1024 | 6


@pytest.mark.parametrize("backend", ["FastMCCache", "PyLibMCCache+install_as_pylibmc"])
def test_django_options_carry_the_serializer(backend, server, django_settings, request):
    """With serializer json and pickles refused, a dict round-trips as JSON on both clients
    (blocking and asyncio), and what JSON would change is refused."""
    import asyncio

    from django.core.cache import caches
    from django.test import override_settings

    if backend == "FastMCCache":
        path = "fastmc.django.FastMCCache"
    else:
        request.getfixturevalue("as_pylibmc")
        path = "django.core.cache.backends.memcached.PyLibMCCache"
    options = {"serializer": "json", "pickle": "refuse"}
    doc = {"user": 7, "roles": ["a", "b"], "quota": 2.5}
    with override_settings(CACHES=_django_caches(path, server, KEY_PREFIX="js", OPTIONS=options)):
        cache = caches["default"]
        cache.set("doc", doc)
        assert cache.get("doc") == doc and cache.get_many(["doc"]) == {"doc": doc}
        assert Raw([server.address]).get(cache.make_and_validate_key("doc"))[1] == JSON_FLAGS
        with pytest.raises(TypeError, match="tuple"):
            cache.set("pair", (1, 2))
        assert cache.get_or_set("made", lambda: {"n": [1]}) == {"n": [1]}
        if backend == "FastMCCache":

            async def main():
                await cache.aset("adoc", doc)
                assert await cache.aget("adoc") == doc

            asyncio.run(main())
            key = cache.make_and_validate_key("adoc")
            assert Raw([server.address]).get(key)[1] == JSON_FLAGS


def test_flask_caching_takes_the_serializer_from_the_environment(server, as_pylibmc, monkeypatch):
    from flask import Flask
    from flask_caching import Cache

    monkeypatch.setenv("FASTMC_SERIALIZER", "json")
    monkeypatch.setenv("FASTMC_PICKLE", "refuse")
    app = Flask("fastmc_json")
    cache = Cache(
        app,
        config={
            "CACHE_TYPE": "MemcachedCache",
            "CACHE_MEMCACHED_SERVERS": [server.address],
            "CACHE_KEY_PREFIX": "fj:",
        },
    )
    with app.app_context():
        assert cache.set("obj", {"a": [1, 2]}) and cache.get("obj") == {"a": [1, 2]}
        assert Raw([server.address]).get("fj:obj")[1] == JSON_FLAGS


def test_dogpile_arguments_carry_the_serializer(server):
    """dogpile's (payload, metadata) pair is stored as a JSON list of two; a region whose client
    still pickles reads it (readers move first), and expiry and versions still apply."""
    import fastmc.dogpile  # noqa: F401 (registers "fastmc")
    from dogpile.cache import make_region
    from dogpile.cache.api import NO_VALUE

    region = make_region().configure(
        "fastmc",
        arguments={"url": [server.address], "serializer": "json", "pickle": "refuse"},
    )
    region.set("obj", {"a": 1})
    assert region.get("obj") == {"a": 1}
    data, flags = Raw([server.address]).get("obj")
    assert flags == JSON_FLAGS and data.startswith(b'[{"a":1},{"ct":')
    assert region.get_or_create("made", lambda: [1, 2]) == [1, 2]
    region.set_multi({"m1": "x", "m2": {"y": None}})
    assert region.get_multi(["m1", "m2", "missing"])[:2] == ["x", {"y": None}]
    reader = make_region().configure("fastmc", arguments={"url": [server.address]})
    assert reader.get("obj") == {"a": 1}
    with pytest.raises(TypeError, match="tuple"):
        region.set("pair", (1, 2))
    expiring = make_region().configure(
        "fastmc",
        expiration_time=1,
        arguments={"url": [server.address], "serializer": "json"},
    )
    expiring.set("old", "v")
    time.sleep(1.1)
    assert expiring.get("old") is NO_VALUE


def test_aiocache_takes_a_serializer_name_for_fastmcs_codec(server):
    import asyncio

    from fastmc.aiocache import FastMCCache

    host, port = server.address.rsplit(":", 1)

    async def main():
        cache = FastMCCache(endpoint=host, port=int(port), serializer="json", namespace="ac")
        await cache.set("doc", {"a": [1, 2.5]})
        assert await cache.get("doc") == {"a": [1, 2.5]}
        await cache.multi_set([("m1", {"x": 1}), ("m2", "text")])
        assert await cache.multi_get(["m1", "m2", "none"]) == [{"x": 1}, "text", None]
        assert await cache.increment("n", 2) == 2 and await cache.increment("n", 3) == 5
        with pytest.raises(TypeError, match="tuple"):
            await cache.set("pair", (1, 2))
        await cache.close()
        with pytest.raises(ValueError, match="'json' or 'msgpack'"):
            FastMCCache(serializer="yaml")

    asyncio.run(main())
    # the entries are fastmc's own: any fastmc client reads them
    assert Raw([server.address]).get(b"acdoc")[1] == JSON_FLAGS
    assert fastmc.Client([server.address]).get(b"acdoc") == {"a": [1, 2.5]}


# ---------------------------------------------------------------------------------------------
# DNS names in each framework's server list (docs/operations.md, DNS discovery)


def _on_pods(pods, dns, n=2):
    """Two pods behind `mc.test`; the addresses they serve on."""
    hosts = [("mc.test", "127.0.0.%d" % (i + 1)) for i in range(n)]
    dns.set_hosts(hosts, wait=("mc.test", {ip for _, ip in hosts}))
    return ["127.0.0.%d:%d" % (i + 1, pods) for i in range(n)]


def _held_by_pods(addresses, key):
    return [a for a in addresses if fastmc.Client([a]).get(key) is not None]


@pytest.mark.parametrize("backend", ["FastMCCache", "PyLibMCCache+install_as_pylibmc"])
def test_django_location_takes_a_dns_name(backend, pods, dns, django_settings, request):
    from django.core.cache import caches
    from django.test import override_settings

    if backend == "FastMCCache":
        path = "fastmc.django.FastMCCache"
    else:
        request.getfixturevalue("as_pylibmc")
        path = "django.core.cache.backends.memcached.PyLibMCCache"
    pod_addresses = _on_pods(pods, dns)
    caches_setting = {
        "default": {
            "BACKEND": path,
            "LOCATION": "dns+mc.test:%d" % pods,
            "KEY_PREFIX": "dj",
            "OPTIONS": {"dns_nameservers": [dns.nameserver]},
        }
    }
    with override_settings(CACHES=caches_setting):
        cache = caches["default"]
        cache.set("k", "v")
        assert cache.get("k") == "v"
        assert len(_held_by_pods(pod_addresses, cache.make_and_validate_key("k"))) == 1


def test_flask_dogpile_and_aiocache_take_dns_names(pods, dns, as_pylibmc, monkeypatch):
    """Flask-Caching and aiocache build their clients without fastmc's options: the
    environment names the nameservers; dogpile passes its arguments."""
    import fastmc.dogpile  # noqa: F401 (registers "fastmc")
    from dogpile.cache import make_region
    from fastmc.aiocache import FastMCCache
    from flask import Flask
    from flask_caching import Cache

    pod_addresses = _on_pods(pods, dns)
    name = "dns+mc.test:%d" % pods
    region = make_region().configure(
        "fastmc", arguments={"url": [name], "dns_nameservers": [dns.nameserver]}
    )
    region.set("dogpile", "v")
    assert region.get("dogpile") == "v" and len(_held_by_pods(pod_addresses, "dogpile")) == 1
    monkeypatch.setenv("FASTMC_DNS_NAMESERVERS", dns.nameserver)
    app = Flask("fastmc_dns")
    config = {
        "CACHE_TYPE": "MemcachedCache",
        "CACHE_MEMCACHED_SERVERS": [name],
        "CACHE_KEY_PREFIX": "fl:",
    }
    cache = Cache(app, config=config)
    with app.app_context():
        assert cache.set("flask", "v") and cache.get("flask") == "v"
    assert len(_held_by_pods(pod_addresses, "fl:flask")) == 1

    async def main():
        ac = FastMCCache(servers=[name])
        await ac.set("aio", "v")
        assert await ac.get("aio") == "v"
        await ac.close()

    asyncio.run(main())
    assert len(_held_by_pods(pod_addresses, b"aio")) == 1
