"""fastmc and the peers as columns: how each library is configured, for acknowledged writes, for
noreply and for eight threads."""

from __future__ import annotations

import functools
import importlib
import os
import threading
from typing import Any, Callable

from ..servers import split_addr
from ..settings import FASTMC_MODULE_ENV
from .base import Column

PEERS = ("pylibmc", "pylibmc binary", "pymemcache", "libmc", "python-memcached")

# Column attribute -> the client method that takes noreply=True (for the clients with a keyword).
_NOREPLY_KEYWORD = (
    ("set_nr", "set"),
    ("delete_nr", "delete"),
    ("set_multi_nr", "set_multi"),
    ("delete_multi_nr", "delete_multi"),
)


def load_fastmc() -> tuple:
    """(module or None, module name, error or None): fastmc, or the stand-in FASTMC_BENCH_MODULE
    names."""
    name = os.environ.get(FASTMC_MODULE_ENV, "fastmc")
    try:
        return importlib.import_module(name), name, None
    except Exception as e:  # any import failure means the column is missing
        return None, name, f"{type(e).__name__}: {e}"


def _accepts_noreply(fn: Callable, *args: Any) -> bool:
    try:
        fn(*args, noreply=True)
        return True
    except TypeError:
        return False


def _noreply_keyword(c: Column, mc: Any, probe_first: bool) -> None:
    """The noreply operations as the client's own methods with noreply=True; with `probe_first`
    only those that accept the keyword (tried once on a probe key)."""
    probe = f"{c.tag}:probe"
    probe_args = {
        "set": (probe, b"x"),
        "delete": (probe,),
        "set_multi": ({probe: b"x"},),
        "delete_multi": ([probe],),
    }
    for attr, op in _NOREPLY_KEYWORD:
        fn = getattr(mc, op)
        if not probe_first or _accepts_noreply(fn, *probe_args[op]):
            setattr(c, attr, functools.partial(fn, noreply=True))
    c.sync_nr = functools.partial(mc.get, probe)


def make_fastmc(mod: Any, modname: str, servers: list, tag: str, binary: bool = False) -> Column:
    label = "fastmc" if modname == "fastmc" else f"fastmc [stand-in: {modname}]"
    c = Column(label + (" binary" if binary else ""), tag)
    c.kind = "fastmc binary" if binary else "fastmc"
    mc = mod.Client(servers, binary=binary)
    c.use(mc)
    # noreply as pylibmc's column has it: a client with the `_noreply` behavior, its plain
    # methods (`noreply=True` per call is fastmc's own form, and a partial's keyword adds the
    # cost of a keyword call to every write).
    c.use_noreply(mod.Client(servers, binary=binary, behaviors={"_noreply": True}))

    def threads() -> tuple:
        if modname == "fastmc":
            return (lambda: (mc.get, mc.set)), "one Client shared by all threads"
        # A stand-in such as pylibmc is not thread-safe: give each thread its own clone.
        lock = threading.Lock()

        def per_thread() -> tuple:
            with lock:
                cl = mc.clone() if hasattr(mc, "clone") else mod.Client(servers)
            return cl.get, cl.set

        return per_thread, "stand-in: one clone per thread (not thread-safe)"

    c.threads_factory = threads
    return c


def make_pylibmc(servers: list, tag: str, binary: bool) -> Column:
    import pylibmc

    c = Column("pylibmc binary" if binary else "pylibmc", tag)
    mc = pylibmc.Client(servers, binary=binary)
    c.use(mc)
    c.use_noreply(pylibmc.Client(servers, binary=binary, behaviors={"_noreply": True}))
    if binary:
        # With libmemcached's defaults (no TCP_NODELAY) a binary get_multi in which every key
        # misses waits ~40 ms for a delayed ACK: Nagle holds back the closing NOOP. Timed calls
        # keep that cost, it is pylibmc's. The read-back after a delete (untimed, every key
        # missing) would leave the CPU idle for 40 ms per round, and whichever client is timed
        # next would pay for it (a VM's CPU and a sleeping server come back slowly: 100 keys
        # set in 135 µs instead of 41 µs after 20 ms idle). The check reads the same servers
        # through a text client instead.
        checker = pylibmc.Client(servers)
        c.clients.append(checker)
        c.read_back = lambda keys: c.decode_get(checker.get_multi(keys), keys)

    def threads() -> tuple:
        pool = pylibmc.ClientPool(mc, 8)

        def per_thread() -> tuple:
            def get(k: str) -> Any:
                with pool.reserve(block=True) as cl:
                    return cl.get(k)

            def set_(k: str, v: bytes) -> Any:
                with pool.reserve(block=True) as cl:
                    return cl.set(k, v)

            return get, set_

        return per_thread, "ClientPool(mc, 8), reserve(block=True) per operation"

    c.threads_factory = threads
    return c


def make_pymemcache(servers: list, tag: str) -> Column:
    from pymemcache.client.base import Client as PmClient
    from pymemcache.client.base import PooledClient
    from pymemcache.client.hash import HashClient

    addrs = [split_addr(a) for a in servers]
    if len(addrs) == 1:
        mc = PmClient(addrs[0], default_noreply=False)
        nr = PmClient(addrs[0])  # the library's default: noreply for set/delete
    else:
        mc = HashClient(addrs, default_noreply=False)
        nr = HashClient(addrs)
    c = Column("pymemcache", tag)
    if len(addrs) > 1:
        c.note = "HashClient"
    c.use(mc, ("get_many", "set_many", "delete_many"))
    c.use_noreply(nr, ("set_many", "delete_many"))

    def threads() -> tuple:
        pc = PooledClient(addrs[0], max_pool_size=8, default_noreply=False)
        return (lambda: (pc.get, pc.set)), "PooledClient(max_pool_size=8) shared"

    c.threads_factory = threads
    return c


def make_libmc(servers: list, tag: str) -> Column:
    import libmc

    c = Column("libmc", tag)
    c.use(libmc.Client(servers))
    c.use_noreply(libmc.Client(servers, noreply=True))

    def threads() -> tuple:
        tc = libmc.ThreadedClient(servers)
        return (lambda: (tc.get, tc.set)), "ThreadedClient shared"

    c.threads_factory = threads
    return c


def make_python_memcached(servers: list, tag: str) -> Column:
    import memcache

    c = Column("python-memcached", tag)
    # Its own limit on a value's size (1 MB by default, checked before sending) would refuse
    # the large scenario's 1 MiB values, which the servers take.
    mc = memcache.Client(servers, server_max_value_length=64 << 20)
    c.use(mc)
    _noreply_keyword(c, mc, probe_first=False)

    def threads() -> tuple:
        shared = memcache.Client(servers)  # a threading.local: one connection per thread
        return (lambda: (shared.get, shared.set)), "Client shared (threading.local)"

    c.threads_factory = threads
    return c


PEER_MAKERS = {
    "pylibmc": lambda s, t: make_pylibmc(s, t, False),
    "pylibmc binary": lambda s, t: make_pylibmc(s, t, True),
    "pymemcache": make_pymemcache,
    "libmc": make_libmc,
    "python-memcached": make_python_memcached,
}
