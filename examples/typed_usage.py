"""fastmc with static types: `mypy --strict examples/typed_usage.py` passes (run by `make lint`).

Run it against a memcached: `python examples/typed_usage.py [host:port]`.

The lines marked `# type: ignore[...]` are mistakes the stubs must catch: mypy's strict mode
reports an unused ignore, so if a stub ever stops catching one of them, `make lint` fails.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import fastmc
import fastmc.aio
from fastmc.autodiscovery import ClusterConfig, DiscoveredClient, discover, parse_cluster_config


def counters(mc: fastmc.Client, names: list[str]) -> dict[str, int]:
    mc.set_multi({name: 0 for name in names}, time=60, key_prefix="count:")
    for name in names:
        mc.incr("count:" + name, 2)
    found: dict[str, Any] = mc.get_multi(names, key_prefix="count:")
    return {k: int(v) for k, v in found.items()}


def main(server: str) -> None:
    mc = fastmc.Client([server], behaviors={"ketama": True, "hash": "md5", "cas": True})
    assert mc.set("greeting", "hello", time=10)
    value: Any = mc.get("greeting", "default")
    stored: bool = mc.add(b"bytes-key", b"\x00\x01", noreply=False)
    failed: list[str] = mc.set_multi({"a": 1, "b": 2})
    missing: list[bytes] = mc.touch_multi([b"a", b"zz"], time=30)
    with_cas: dict[str, tuple[Any, int]] = mc.gets_multi(["a", "b"])
    val, token = mc.gets("a")
    if token is not None:
        assert mc.cas("a", val, token)
    n: int = mc.incr("a", 5)
    deleted: bool = mc.delete("b")
    all_deleted: bool = mc.delete_multi(["a", "b"])
    stats: list[tuple[bytes, dict[str, bytes]]] = mc.get_stats()
    behaviors: fastmc.consts.BehaviorDict = mc.get_behaviors()
    ketama: Any = behaviors["ketama"]
    copy: fastmc.Client = mc.clone()
    where: int = copy.hash("greeting")
    payload, flags = mc.serialize({"a": 1})
    assert mc.deserialize(payload, flags) == {"a": 1}
    added, removed = mc.set_servers([server, (fastmc.server_type_tcp, "127.0.0.1", 11211)])
    mc.on("server_added", lambda addr, event, detail: print(addr, event, detail))
    mc.set_servers([server])
    assert len(added) == 1 and not removed and mc.addresses == [server]

    pool = fastmc.ClientPool(mc, 2)
    with pool.reserve() as pooled:
        pooled.set("pooled", True)
    per_thread = fastmc.ThreadMappedPool(mc)
    with per_thread.reserve() as mine:
        mine.get("pooled")

    try:
        mc.incr("missing-counter")
    except fastmc.NotFound:
        pass
    except fastmc.Error as e:
        print("memcached error", e)

    print(
        value,
        stored,
        failed,
        missing,
        with_cas,
        n,
        deleted,
        all_deleted,
        len(stats),
        ketama,
        where,
        counters(mc, ["x", "y"]),
    )


async def main_async(server: str) -> None:
    async with fastmc.aio.Client([server], behaviors={"cas": True}) as mc:
        assert await mc.set("greeting", "hello", time=10, noreply=False)
        value: Any = await mc.get("greeting", "default")
        failed: list[str] = await mc.set_multi({"a": 1, "b": 2}, key_prefix="aio:")
        found: dict[str, Any] = await mc.get_multi(["a", "b"], key_prefix="aio:")
        val, token = await mc.gets("aio:a")
        if token is not None:
            assert await mc.cas("aio:a", val, token)
        n: int = await mc.incr("aio:a", 5)
        gone: bool = await mc.delete_multi(["a", "b"], key_prefix="aio:")
        stats: list[tuple[bytes, dict[str, bytes]]] = await mc.get_stats()
        behaviors: fastmc.consts.BehaviorDict = mc.get_behaviors()
        change: tuple[list[str], list[str]] = mc.set_servers([server])  # no I/O: not awaited
        print(value, failed, found, n, gone, len(stats), behaviors["cas"], change)


def discovered(endpoint: str) -> None:
    config: ClusterConfig = parse_cluster_config(b"12\nnode1|10.0.0.1|11211\n")
    print(config.version, config.servers)
    with discover(endpoint, interval=30.0, behaviors={"ketama": True}) as mc:
        assert isinstance(mc, DiscoveredClient) and mc.discovery is not None
        mc.discovery.refresh()
        mc.get("k")


async def async_mistakes(mc: fastmc.aio.Client) -> None:
    await mc.get(42)  # type: ignore[arg-type]
    total: str = await mc.incr("n")  # type: ignore[assignment]
    not_awaited: bool = mc.set("k", "v")  # type: ignore[assignment]
    print(total, not_awaited)


def mistakes(mc: fastmc.Client) -> None:
    mc.get(42)  # type: ignore[arg-type]
    mc.set("k", "v", time="soon")  # type: ignore[arg-type]
    mc.get_multi([1, 2])  # type: ignore[type-var]
    mc.set_multi(["a", "b"])  # type: ignore[arg-type]
    fastmc.Client(["127.0.0.1"], binary="yes")  # type: ignore[arg-type]
    total: str = mc.incr("n")  # type: ignore[assignment]
    mc.set_servers("127.0.0.1:11211", 2)  # type: ignore[call-arg]
    mc.set_servers([42])  # type: ignore[list-item]
    print(total)


if __name__ == "__main__":
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:11211"
    main(address)
    asyncio.run(main_async(address))
