"""The asyncio clients the aio scenario compares, behind one small interface: ``get``, ``set``,
``get_multi``, ``set_multi``, ``delete_multi`` (coroutines on bytes keys and values) and
``close``. A peer without a multi-key write (all of them) gets the form its users write: one
``asyncio.gather`` of single writes. Peers that cannot spread keys over several servers are
left out of the three-server rows."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any


class AioClient:
    name = ""
    multi_server = True
    # how it does a multi-key write, for the report
    writes = "native"

    async def get(self, k: bytes) -> Any: ...
    async def set(self, k: bytes, v: bytes) -> Any: ...
    async def get_multi(self, keys: list) -> dict: ...
    async def set_multi(self, d: dict) -> Any: ...
    async def delete_multi(self, keys: list) -> Any: ...
    async def close(self) -> None: ...


class FastmcAio(AioClient):
    name = "fastmc.aio"

    def __init__(self, module: str, servers: list) -> None:
        aio = importlib.import_module(module + ".aio")
        self.mc = aio.Client(servers)
        self.get = self.mc.get
        self.set = self.mc.set
        self.get_multi = self.mc.get_multi
        self.set_multi = self.mc.set_multi
        self.delete_multi = self.mc.delete_multi

    async def close(self) -> None:
        await self.mc.close()


class FastmcThread(AioClient):
    """The blocking client through asyncio.to_thread: what an async service does without an
    async client."""

    name = "fastmc to_thread"

    def __init__(self, module: str, servers: list) -> None:
        self.mc = importlib.import_module(module).Client(servers)

    async def get(self, k: bytes) -> Any:
        return await asyncio.to_thread(self.mc.get, k)

    async def set(self, k: bytes, v: bytes) -> Any:
        return await asyncio.to_thread(self.mc.set, k, v)

    async def get_multi(self, keys: list) -> dict:
        return await asyncio.to_thread(self.mc.get_multi, keys)

    async def set_multi(self, d: dict) -> Any:
        return await asyncio.to_thread(self.mc.set_multi, d)

    async def delete_multi(self, keys: list) -> Any:
        return await asyncio.to_thread(self.mc.delete_multi, keys)

    async def close(self) -> None:
        self.mc.disconnect_all()


class FastmcBlocking(AioClient):
    """The blocking client called directly from the coroutine (it blocks the loop: only for the
    multi-key rows, one call at a time, as the reference the asyncio client is held to)."""

    name = "fastmc blocking"

    def __init__(self, module: str, servers: list) -> None:
        self.mc = importlib.import_module(module).Client(servers)

    async def get_multi(self, keys: list) -> dict:
        return self.mc.get_multi(keys)  # type: ignore[no-any-return]

    async def set_multi(self, d: dict) -> Any:
        return self.mc.set_multi(d)

    async def delete_multi(self, keys: list) -> Any:
        return self.mc.delete_multi(keys)


class FastmcBlockingAgain(FastmcBlocking):
    """A second blocking client in the same rounds: the same code twice (an A/A comparison),
    for how far apart two equal clients come out in a run."""

    name = "fastmc blocking, again"


class GatherWrites(AioClient):
    """A peer with no multi-key write: a `gather` of its single writes, as its users write it."""

    mc: Any
    writes = "gather"

    async def set_multi(self, d: dict) -> Any:
        return await asyncio.gather(*(self.mc.set(k, v) for k, v in d.items()))

    async def delete_multi(self, keys: list) -> Any:
        return await asyncio.gather(*(self.mc.delete(k) for k in keys))


def _host_port(addr: str) -> tuple:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


class Aiomcache(GatherWrites):
    name = "aiomcache"
    multi_server = False

    def __init__(self, servers: list) -> None:
        import aiomcache

        self.mc = aiomcache.Client(*_host_port(servers[0]))

    async def get(self, k: bytes) -> Any:
        return await self.mc.get(k)

    async def set(self, k: bytes, v: bytes) -> Any:
        return await self.mc.set(k, v)

    async def get_multi(self, keys: list) -> dict:
        vals = await self.mc.multi_get(*keys)
        return {k: v for k, v in zip(keys, vals) if v is not None}

    async def close(self) -> None:
        await self.mc.close()


class Emcache(GatherWrites):
    name = "emcache"

    def __init__(self, servers: list) -> None:
        self.servers = servers
        self.mc: Any = None

    async def start(self) -> None:
        import emcache

        addrs = [emcache.MemcachedHostAddress(*_host_port(a)) for a in self.servers]
        # timeout=None: with its default 1 s timeout it fails under 100 concurrent tasks.
        self.mc = await emcache.create_client(addrs, timeout=None)

    async def get(self, k: bytes) -> Any:
        item = await self.mc.get(k)
        return None if item is None else item.value

    async def set(self, k: bytes, v: bytes) -> Any:
        await self.mc.set(k, v)
        return True

    async def get_multi(self, keys: list) -> dict:
        return {k: it.value for k, it in (await self.mc.get_many(keys)).items()}

    async def close(self) -> None:
        await self.mc.close()


class Memcachio(GatherWrites):
    name = "memcachio"
    multi_server = False

    def __init__(self, servers: list) -> None:
        import memcachio

        self.mc = memcachio.Client(_host_port(servers[0]))

    async def get(self, k: bytes) -> Any:
        got = await self.mc.get(k)
        item = got.get(k)
        return None if item is None else item.value

    async def set(self, k: bytes, v: bytes) -> Any:
        return await self.mc.set(k, v)

    async def get_multi(self, keys: list) -> dict:
        return {k: it.value for k, it in (await self.mc.get(*keys)).items()}

    async def close(self) -> None:
        pass


PEERS = (Aiomcache, Emcache, Memcachio)


async def make_all(module: str, servers: list, failures: Any) -> list:
    """fastmc.aio, fastmc through to_thread, then every peer that can serve `servers`."""
    out: list = []
    makers: list = [lambda: FastmcAio(module, servers), lambda: FastmcThread(module, servers)]
    makers += [lambda p=p: p(servers) for p in PEERS if len(servers) == 1 or p.multi_server]
    for make in makers:
        try:
            c = make()
            if hasattr(c, "start"):
                await c.start()
            out.append(c)
        except Exception as e:
            failures.add("aio setup", getattr(make, "__name__", "?"), f"raised {e!r}")
    return out
