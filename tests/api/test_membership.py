"""Live membership: ``set_servers`` on the blocking and the asyncio client. The new list is
applied at once and whole; servers in both lists keep their connections, health and metrics;
placement is a fresh client's on the new list, so with ketama only the keys of added or removed
servers move; ``addresses`` and ``metrics()`` follow; ``server_added``/``server_removed`` reach
the callbacks and the ``fastmc`` logger."""

import asyncio
import contextlib
import gc
import logging

import fastmc
import fastmc.aio
import pytest

KEYS = ["member:%d" % i for i in range(3000)]

# Addresses nobody connects to: placement needs no I/O.
A, B, C, D = ("10.0.0.%d:11211" % i for i in range(1, 5))

PLACEMENTS = [
    ({"ketama": True}, [A, B, C], [A, C, D]),
    ({"ketama": True}, [A, B], [A, B, C, D]),
    ({"distribution": "consistent"}, [A, B, C, D], [B, D]),
    ({}, [A, B, C], [C, A]),  # modula
    ({"ketama": True, "hash": "md5"}, [A, B, C], [B, "10.0.0.2:11212", C]),
    ({"ketama_weighted": True}, [A + ":2", B, C], [A + ":2", C + ":3"]),
    ({"ketama": True, "_sort_hosts": True}, [C, A], [D, B, A]),
    ({"ketama": True}, [(1, "10.0.0.1", 11211), (1, "10.0.0.2", 11211)], [(1, "h", 1), C]),
    ({"ketama": True}, ["/tmp/fastmc-a.sock", "/tmp/fastmc-b.sock"], ["/tmp/fastmc-c.sock"]),
    # The weighted ring: turned on by a weight above 1 (and off again without one), or set.
    ({"ketama": True}, [A + ":2", B], [A, B, C]),
    ({"ketama": True}, [A, B], [A + ":3", B]),
    ({"distribution": "consistent"}, [A + ":2", B], [B, C]),
    ({"ketama_weighted": True}, [A, B], [A + ":2", C]),
]


def placement(mc):
    return [mc.hash(k) for k in KEYS]


@pytest.mark.parametrize("behaviors,old,new", PLACEMENTS)
def test_placement_after_set_servers_is_a_fresh_clients(behaviors, old, new):
    mc = fastmc.Client(old, behaviors=behaviors)
    mc.set_servers(new)
    assert placement(mc) == placement(fastmc.Client(new, behaviors=behaviors))
    assert mc.addresses == new
    mc.set_servers(old)
    assert placement(mc) == placement(fastmc.Client(old, behaviors=behaviors))


def moved(before, after, old, new):
    """Keys whose server changed, as (old address, new address) pairs."""
    return [(old[b], new[a]) for b, a in zip(before, after) if old[b] != new[a]]


def test_a_weighted_ring_set_by_behavior_stays_on():
    mc = fastmc.Client([A + ":2", B], behaviors={"ketama": True})
    mc.set_behaviors({"ketama_weighted": True})
    mc.set_servers([A, B])
    assert mc.get_behaviors()["ketama_weighted"]
    fresh = fastmc.Client([A, B], behaviors={"ketama": True, "ketama_weighted": True})
    assert placement(mc) == placement(fresh)


def test_with_ketama_only_the_keys_of_added_and_removed_servers_move():
    old, grown, shrunk = [A, B, C], [A, B, C, D], [A, C, D]
    mc = fastmc.Client(old, behaviors={"ketama": True})
    before = placement(mc)
    mc.set_servers(grown)
    after = placement(mc)
    m = moved(before, after, old, grown)
    assert all(to == D for _, to in m)  # only onto the added server
    assert 0.15 < len(m) / len(KEYS) < 0.35  # about a quarter
    mc.set_servers(shrunk)
    last = placement(mc)
    m = moved(after, last, grown, shrunk)
    assert all(frm == B for frm, _ in m)  # only off the removed server
    assert len(m) == sum(1 for i in after if grown[i] == B)


def test_with_modula_most_keys_move_which_is_why_ketama_is_advised():
    mc = fastmc.Client([A, B, C])
    before = placement(mc)
    mc.set_servers([A, B, C, D])
    assert len(moved(before, placement(mc), [A, B, C], [A, B, C, D])) > len(KEYS) / 2


def test_kept_servers_keep_connections_values_and_metrics(servers, caplog):
    a, b, c = servers
    mc = fastmc.Client([a, b], behaviors={"ketama": True})
    seen = []
    for event in ("server_added", "server_removed"):
        mc.on(event, lambda s, e, d: seen.append((s, e, d)))
    data = {"kept:%d" % i: "v%d" % i for i in range(300)}
    assert mc.set_multi(data) == []
    was = {k: mc.addresses[mc.hash(k)] for k in data}
    before = mc.metrics()
    with caplog.at_level(logging.INFO, logger="fastmc"):
        assert mc.set_servers([a, c]) == ([c], [b])
    assert seen == [(c, "server_added", None), (b, "server_removed", None)]
    messages = [r.getMessage() for r in caplog.records if r.name == "fastmc"]
    assert "server %s added to the server list" % c in messages
    assert "server %s removed from the server list" % b in messages
    assert mc.addresses == [a, c]
    after = mc.metrics()
    assert list(after) == [a, c]
    assert after[a]["requests"] == before[a]["requests"]  # carried over, not reset
    assert after[a]["connections_idle"] == before[a]["connections_idle"] >= 1
    assert after[c]["requests"]["store"] == 0
    now = {k: mc.addresses[mc.hash(k)] for k in data}
    # A key moves only off the removed server or onto the added one.
    assert all(was[k] == now[k] or was[k] == b or now[k] == c for k in data)
    # Keys still on `a` read back, on the pooled connection.
    stayed = [k for k in data if was[k] == now[k] == a]
    assert stayed
    assert mc.get_multi(stayed) == {k: data[k] for k in stayed}
    assert mc.metrics()[a]["connections_opened"] == before[a]["connections_opened"]
    # Keys that were on `b` moved (to `a` or `c`): misses now, never values from elsewhere.
    gone = [k for k in data if was[k] == b]
    assert gone and mc.get_multi(gone) == {}
    # The same list again changes nothing and says so.
    seen.clear()
    assert mc.set_servers([a, c]) == ([], [])
    assert seen == []


def test_a_removed_server_comes_back_as_new(servers):
    a, b, _ = servers
    mc = fastmc.Client([a, b])
    mc.set("x", 1)
    mc.get_stats()
    mc.set_servers([a])
    mc.set_servers([a, b])
    assert mc.metrics()[b]["requests"]["admin"] == 0  # a new Server: fresh counters


def test_health_carries_over(servers):
    dead = "127.0.0.1:1"  # nothing listens there
    a = servers[0]
    mc = fastmc.Client([a, dead], behaviors={"retry_timeout": 60, "connect_timeout": 200})
    keys = [k for k in KEYS[:50] if mc.hash(k) == 1][:5]
    with pytest.raises(fastmc.Error):
        mc.get(keys[0])
    mc.set_servers([dead, a])
    on_dead = next(k for k in KEYS if mc.addresses[mc.hash(k)] == dead)
    with pytest.raises(fastmc.ServerDown):  # still in its retry window: skipped at once
        mc.get(on_dead)
    assert mc.metrics()[dead]["server_down_skips"] >= 1


def test_bad_lists_are_refused_and_the_old_one_kept(servers):
    mc = fastmc.Client(servers[:2])
    with pytest.raises(fastmc.Error, match="empty server list"):
        mc.set_servers([])
    with pytest.raises(ValueError, match="can't mix transport types"):
        mc.set_servers([servers[0], "/tmp/x.sock"])
    with pytest.raises(ValueError):
        mc.set_servers(["host:notaport"])
    with pytest.raises(TypeError):
        mc.set_servers([(1, "host")])
    with pytest.raises(TypeError, match="not one string"):
        mc.set_servers(servers[0])
    with pytest.raises(fastmc.NotSupportedError):
        mc.set_servers(["udp:127.0.0.1:11211"])
    assert mc.addresses == servers[:2]
    assert list(mc.metrics()) == servers[:2]
    assert mc.set("still", "works") and mc.get("still") == "works"


def test_the_list_may_be_any_iterable_and_clone_copies_the_current_one(servers):
    mc = fastmc.Client([servers[0]])
    mc.set_servers(s for s in servers[1:])
    assert mc.addresses == servers[1:]
    assert mc.clone().addresses == servers[1:]
    assert list(mc.clone().metrics()) == servers[1:]


def test_aio_set_servers_moves_requests_to_the_new_list(servers):
    a, b, c = servers

    async def main():
        async with fastmc.aio.Client([a, b], behaviors={"ketama": True}) as mc:
            seen = []
            mc.on("server_added", lambda s, e, d: seen.append((s, e)))
            data = {"aio:%d" % i: "V%d" % i for i in range(200)}
            assert await mc.set_multi(data) == []
            was = {k: mc.addresses[mc.hash(k)] for k in data}
            assert mc.set_servers([b, c]) == ([c], [a])
            assert seen == [(c, "server_added")]
            assert mc.addresses == [b, c]
            assert list(mc.metrics()) == [b, c]
            got = await mc.get_multi(list(data))
            assert all(got[k] == data[k] for k in got)
            # Exactly the keys written to `b` that are still on it.
            assert set(got) == {k for k in data if was[k] == b == mc.addresses[mc.hash(k)]}
            # Writes go to the new list: every key reads back.
            assert await mc.set_multi(data) == []
            assert await mc.get_multi(list(data)) == data
            for k in list(data)[:50]:
                assert await mc.get(k) == data[k]
            assert mc.metrics()[c]["requests"]["store"] >= 1

    asyncio.run(main())


def io_threads():
    """This process's fastmc worker threads, by name (Linux: /proc/self/task/*/comm)."""
    import pathlib

    names = []
    for comm in pathlib.Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            names.append(comm.read_text().strip())
    skip = ("fastmc-io-admin", "fastmc-io-span")  # not per server
    return sorted(n for n in names if n.startswith("fastmc-io-") and not n.startswith(skip))


def test_aio_workers_follow_the_list(servers):
    import time

    a, b, c = servers

    async def settle(n):
        deadline = time.monotonic() + 5
        while len(io_threads()) != n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return len(io_threads())

    async def main():
        async with fastmc.aio.Client([a, b, c]) as mc:
            base = len(io_threads())
            for _ in range(100):  # until other tests' dropped clients' workers have exited
                await asyncio.sleep(0.02)
                base, last = len(io_threads()), base
                if base == last:
                    break
            assert await mc.set("w", 1)
            assert await settle(base + 3) == base + 3
            mc.set_servers([b])
            assert await settle(base + 1) == base + 1  # the removed servers' workers exited
            mc.set_servers([b, a])
            assert await settle(base + 2) == base + 2  # started with no call made
            assert await mc.set("w", 2) and await mc.get("w") == 2

    gc.collect()  # other tests' clients: their workers exit now, not during this test
    gc.disable()
    try:
        asyncio.run(main())
    finally:
        gc.enable()


def test_a_removed_servers_connections_are_closed(servers):
    import time

    a, b, _ = servers
    watcher = fastmc.Client([b])  # one connection of its own, counted every time

    def curr_connections():
        ((_, stats),) = watcher.get_stats()
        return int(stats["curr_connections"])

    gc.collect()  # earlier tests' clients: their connections close now
    before = curr_connections()
    for _ in range(100):  # until memcached has seen every close
        time.sleep(0.02)
        before, last = curr_connections(), before
        if before == last:
            break
    mc = fastmc.Client([a, b])
    keys = ["conn:%d" % i for i in range(100)]
    assert mc.set_multi(dict.fromkeys(keys, 1)) == []
    assert mc.metrics()[b]["connections_idle"] == 1
    assert curr_connections() == before + 1
    mc.set_servers([a])
    deadline = time.monotonic() + 5
    while curr_connections() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert curr_connections() == before


def test_a_callback_may_change_the_list_again():
    mc = fastmc.Client([A, B])
    mc.on("server_added", lambda s, e, d: s == C and mc.set_servers([A, D]))
    assert mc.set_servers([A, B, C]) == ([C], [])
    assert mc.addresses == [A, D]
