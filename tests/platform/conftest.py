"""Fixtures the platform tests share."""

import pytest


@pytest.fixture(scope="module")
def django_settings():
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
            USE_TZ=True,
        )
        django.setup()
    return settings
