"""Django's own memcached backend tests (``cache.tests.PyLibMCCacheTests``, from Django's
sdist) on ``fastmc.django.FastMCCache``."""

import os

from cache.tests import PyLibMCCacheTests, caches_setting_for_tests, memcached_excluded_caches
from django.test import override_settings

FastMCCache_params = {
    "BACKEND": "fastmc.django.FastMCCache",
    "LOCATION": os.environ["FASTMC_MEMCACHED"],
}


@override_settings(
    CACHES=caches_setting_for_tests(base=FastMCCache_params, exclude=memcached_excluded_caches)
)
class FastMCCacheTests(PyLibMCCacheTests):
    base_params = FastMCCache_params
