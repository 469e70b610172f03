"""Settings for Django's own test runner (its tests/runtests.py): Django's test settings, with
Django's PyLibMCCache configured on fastmc installed as pylibmc, so that Django's
PyLibMCCacheTests run; ``fastmc_cache_tests`` runs the same tests on FastMCCache."""

import os

import fastmc

fastmc.install_as_pylibmc()

from test_sqlite import *  # noqa: E402,F403

_location = os.environ["FASTMC_MEMCACHED"]
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "pylibmc": {
        "BACKEND": "django.core.cache.backends.memcached.PyLibMCCache",
        "LOCATION": _location,
    },
}
