"""dogpile.cache's own memcached backend test suites (from its sdist: the generic backend
tests, with and without the distributed lock, and the mutex tests) on the ``fastmc`` backend.
Run by tests/platform/test_dogpile_suite.py in a child process."""

import fastmc.dogpile  # noqa: F401  (registers the "fastmc" backend)
from tests.cache.test_memcached_backend import (
    _DistributedMemcachedMutexTestSuite,
    _DistributedMemcachedMutexWithTimeoutTestSuite,
    _DistributedMemcachedTestSuite,
    _DistributedMemcachedWithTimeoutTestSuite,
    _NonDistributedMemcachedTestSuite,
)


class FastMCTest(_NonDistributedMemcachedTestSuite):
    backend = "fastmc"


class FastMCDistributedTest(_DistributedMemcachedTestSuite):
    backend = "fastmc"


class FastMCDistributedWithTimeoutTest(_DistributedMemcachedWithTimeoutTestSuite):
    backend = "fastmc"


class FastMCDistributedMutexTest(_DistributedMemcachedMutexTestSuite):
    backend = "fastmc"


class FastMCDistributedMutexWithTimeoutTest(_DistributedMemcachedMutexWithTimeoutTestSuite):
    backend = "fastmc"
