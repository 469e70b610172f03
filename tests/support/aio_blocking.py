"""``Blocking``: a fastmc.aio.Client driven from synchronous code, each coroutine run to
completion on a private event loop, so that the differential cases written for blocking
clients (``cases.py``) run unchanged against the asyncio client."""

import asyncio
import inspect

import fastmc.aio

MISS = object()


class Blocking:
    def __init__(self, *args, **kwargs):
        self.loop = asyncio.new_event_loop()
        self.aio = self.run(self._make(*args, **kwargs))

    @staticmethod
    async def _make(*args, **kwargs):
        return fastmc.aio.Client(*args, **kwargs)

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def __setattr__(self, name, value):
        if name == "behaviors":
            self.aio.behaviors = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        attr = getattr(self.aio, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *a, **k: self.run(attr(*a, **k))
        return attr

    # The mapping protocol as fastmc.Client implements it, over the coroutines.
    def __getitem__(self, key):
        v = self.get(key, MISS)
        if v is MISS:
            raise KeyError(key)
        return v

    def __setitem__(self, key, value):
        if not self.set(key, value):
            raise KeyError("failed setting %r" % (key,))

    def __delitem__(self, key):
        if not self.delete(key):
            raise KeyError(key)

    def __contains__(self, key):
        return self.get(key, MISS) is not MISS

    def close(self):
        self.run(self.aio.close())
        self.loop.close()
