"""memcached's built-in proxy in front of real memcached servers, on free loopback ports, with
the route library built into memcached (``-o proxy_config=routelib``) and a route configuration
in the shape its documentation and examples give. Started, restarted and stopped like
`memcached.Memcached` (it is one, run as a proxy).

The three configurations a user would write:

- `plain_pool`: one pool of backends, keys hashed over them (``route_direct``);
- `failover`: a pool and a gutter pool taking its keys while one of its backends has failed
  (``route_failover``);
- `replicated`: a set of pools of one backend each; every write goes to all of them and waits
  for all (``route_allsync``), reads go to the first and fail over to the next on an error or a
  miss (``route_failover`` with ``miss = true``).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from memcached import Memcached, server_answer
from sid_memcached import proxy_binary

# How the backends are treated: a failed one is retried after a second (the default is three)
# and a stalled one given up after a second; the proxy answers `SERVER_ERROR backend failure`
# for a key it could not serve.
BACKEND_OPTIONS = "backend_options = { connecttimeout = 1, retrytimeout = 1, readtimeout = 1 }"
# The read commands the replicated route serves from one copy (routelib's example lists them)
READS = ("get", "gets", "gat", "gats", "mg")


def _backends(procs: list[Memcached]) -> str:
    return ", ".join(f'"{p.address}"' for p in procs)


def plain_pool(backends: list[Memcached]) -> str:
    return (
        f"pools{{ main = {{ {BACKEND_OPTIONS}, backends = {{ {_backends(backends)} }} }} }}\n"
        'routes{ default = route_direct{ child = "main" } }\n'
    )


def failover(main: list[Memcached], gutter: list[Memcached]) -> str:
    return (
        "pools{\n"
        f"  main = {{ {BACKEND_OPTIONS}, backends = {{ {_backends(main)} }} }},\n"
        f"  gutter = {{ {BACKEND_OPTIONS}, backends = {{ {_backends(gutter)} }} }},\n"
        "}\n"
        'routes{ default = route_failover{ children = { "main", "gutter" } } }\n'
    )


def replicated(replicas: list[Memcached]) -> str:
    pools = ", ".join(f'{{ {BACKEND_OPTIONS}, backends = {{ "{r.address}" }} }}' for r in replicas)
    reads = ", ".join(f'{c} = route_failover{{ children = "set_all", miss = true }}' for c in READS)
    return (
        f"pools{{ set_all = {{ {pools} }} }}\n"
        f'routes{{ cmap = {{ {reads} }}, default = route_allsync{{ children = "set_all" }} }}\n'
    )


class MemcachedProxy(Memcached):
    """memcached's proxy (the binary `sid_memcached.proxy_binary()` finds) over `backends`,
    routed by the routelib configuration `config` (Lua text)."""

    def __init__(self, backends: list[Memcached], config: str) -> None:
        binary = proxy_binary()
        if binary is None:
            raise RuntimeError("no memcached with the proxy: run make memcached-proxy")
        self.backends = backends
        self.dir = tempfile.mkdtemp(prefix="mcproxy-")
        conf = os.path.join(self.dir, "routes.lua")
        with open(conf, "w") as f:
            f.write(config)
        super().__init__("-o", f"proxy_config=routelib,proxy_arg={conf}", binary=binary)

    def version(self) -> str:
        return server_answer(self.address, b"version\r\n").decode().split()[-1]

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
