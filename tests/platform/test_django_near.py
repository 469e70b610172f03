"""Django's cache with a near cache in OPTIONS (``fastmc.django.FastMCCache``): the option is
a dict of NearCache's arguments; the blocking and the asyncio clients behind one backend share
one near cache, so a write through either is read back at once by both."""

import asyncio

import fastmc
import fastmc.aio


def test_near_cache_in_options(server, django_settings):
    from django.core.cache import caches
    from django.test import override_settings

    config = {
        "default": {
            "BACKEND": "fastmc.django.FastMCCache",
            "LOCATION": server.address,
            "KEY_PREFIX": "near",
            "OPTIONS": {"near_cache": {"ttl": 30, "hot_after": 2}},
        }
    }
    with override_settings(CACHES=config):
        cache = caches["default"]
        cache.set("session", {"user": 1})
        for _ in range(5):
            assert cache.get("session") == {"user": 1}
        near = cache._cache.near_cache
        assert isinstance(near, fastmc.NearCache) and near.ttl == 30
        assert near.metrics()["hits"] == 3
        cache.set("session", {"user": 2})  # read-your-writes
        assert cache.get("session") == {"user": 2}

        async def main():
            assert cache._acache.near_cache is near
            await cache.aset("session", {"user": 3})
            assert cache.get("session") == {"user": 3}
            cache.set("session", {"user": 4})
            assert await cache.aget("session") == {"user": 4}

        asyncio.run(main())
