"""Hot-key telemetry (docs/operations.md#hot-keys-which-keys-are-asked-for-most): off by default
and invisible then; on (behaviors ``hot_keys``, ``hot_keys_sample``), each server's sampled
top-K (Space-Saving) lists the keys this client asked that server for most, with counts that
hold the documented error bound, through hot_keys(), metrics(), Prometheus and tracing spans,
on both clients; a summary never holds more than K keys."""

import asyncio
import collections

import fastmc
import fastmc.aio
import pytest
from fastmc.prometheus import FastMCCollector


def owner(servers, key):
    """The address of the server that holds ``key`` (asked of each server alone)."""
    held = [a for a in servers if fastmc.Client([a]).get(key) is not None]
    assert len(held) == 1, (key, held)
    return held[0]


def test_off_by_default_and_invisible(server):
    mc = fastmc.Client([server.address])
    mc.set("k", 1)
    mc.get("k")
    assert mc.hot_keys() == {server.address: []}
    assert "hot_keys" not in mc.metrics()[server.address]
    assert "hot_keys" not in mc.get_behaviors()
    assert mc._hot_rank("k") is None
    assert [m.name for m in FastMCCollector(mc).collect() if "hot" in m.name] == []


@pytest.mark.parametrize("value", [-1, 1001])
def test_a_size_out_of_range_is_refused(server, value):
    with pytest.raises(fastmc.Error, match="hot_keys"):
        fastmc.Client([server.address], behaviors={"hot_keys": value})


@pytest.mark.parametrize("value", [0, -3, 1 << 21])
def test_a_sample_out_of_range_is_refused(server, value):
    with pytest.raises(fastmc.Error, match="hot_keys_sample"):
        fastmc.Client([server.address], behaviors={"hot_keys": 8, "hot_keys_sample": value})


@pytest.mark.parametrize("binary", [False, True])
def test_every_call_counts_its_keys_on_the_server_that_holds_them(servers, binary):
    """With every key sampled, the counts are exact while fewer keys than K are seen: single
    and multi calls, reads and writes, ``noreply`` writes, and keys placed by ``server_key``."""
    mc = fastmc.Client(servers, binary=binary, behaviors={"hot_keys": 50, "hot_keys_sample": 1})
    assert mc.get_behaviors()["hot_keys"] == 50 and mc.get_behaviors()["hot_keys_sample"] == 1
    want = collections.Counter()
    for i in range(12):
        key = "h%d" % i
        mc.set(key, i)
        want[key] += 1
        for _ in range(i):
            assert mc.get(key) == i
        want[key] += i
    assert mc.get_multi(["h3", "h4", "h5"]) == {"h3": 3, "h4": 4, "h5": 5}
    want.update(["h3", "h4", "h5"])
    mc.set_multi({"h6": 6, "h7": 7})
    want.update(["h6", "h7"])
    mc.incr("h8", 1)
    mc.touch("h9", 100)
    mc.delete("h10", noreply=True)
    want.update(["h8", "h9", "h10"])
    mc.set("grouped", 1, server_key="h11")
    want["grouped"] += 1
    got = mc.hot_keys()
    assert list(got) == servers
    seen = collections.Counter()
    for address, keys in got.items():
        assert [c for _, c, _ in keys] == sorted((c for _, c, _ in keys), reverse=True)
        for key, count, error in keys:
            key = key.decode()
            seen[key] += count
            assert error == 0
            if key == "grouped":
                assert address == owner(servers, "h11")
            elif key != "h10":
                assert address == owner(servers, key)
    assert seen == want
    assert mc._hot_rank("h11") is not None and mc._hot_rank("zz") is None
    assert mc._hot_rank("grouped", "h11") == (len(got[owner(servers, "h11")]), 1)


def test_a_sampled_workload_finds_the_hot_keys_within_the_bound(server):
    """One key in 16 sampled (the default), 5 heavy keys among 4,000 one-off keys: the heavy
    keys lead, their estimates within sampling noise of the truth, every error within the
    Space-Saving bound (sampled keys / K, scaled)."""
    k = 16
    mc = fastmc.Client([server.address], behaviors={"hot_keys": k})
    assert "hot_keys_sample" not in mc.get_behaviors()  # its default, 16, as other defaults
    heavy = {"heavy%d" % i: 2000 * (i + 1) for i in range(5)}  # 2,000 to 10,000 requests
    mc.set_multi({key: 1 for key in heavy})
    pending = {key: n for key, n in heavy.items()}
    tail = 0
    while pending:
        for key in list(pending):
            mc.get(key)
            pending[key] -= 1
            if not pending[key]:
                del pending[key]
        if tail < 4000:
            mc.get("tail%d" % tail)
            tail += 1
    total = sum(heavy.values()) + len(heavy) + tail
    keys = mc.hot_keys()[server.address]
    assert len(keys) == k
    assert {key.decode() for key, _, _ in keys[:5]} == set(heavy)
    bound = total // k + 16 * 64  # n / K, scaled; and slack for the sampled n
    for key, count, error in keys:
        assert error <= bound, (key, count, error)
        truth = heavy.get(key.decode())
        if truth is not None:
            # the sampled truth (x16) is within [count - error, count]; the sample is a
            # binomial count of mean truth/16, and 40% is over 4.5 standard deviations of it
            assert count - error - 0.4 * truth <= truth <= count + 0.4 * truth
    assert mc.hot_keys(reset=True)[server.address] == keys
    assert mc.hot_keys()[server.address] == []


def test_a_summary_holds_at_most_k_keys_whatever_the_key_space(server):
    mc = fastmc.Client([server.address], behaviors={"hot_keys": 7, "hot_keys_sample": 1})
    for i in range(0, 20000, 100):
        mc.get_multi(["k%d" % j for j in range(i, i + 100)])
    keys = mc.hot_keys()[server.address]
    assert len(keys) == 7
    assert all(error <= 20000 // 7 for _, _, error in keys)


def test_changing_the_settings_starts_the_summaries_again(server):
    mc = fastmc.Client([server.address], behaviors={"hot_keys": 4, "hot_keys_sample": 1})
    mc.get("a")
    assert mc.hot_keys()[server.address] == [(b"a", 1, 0)]
    mc.behaviors = {"hot_keys_sample": 2}
    assert mc.hot_keys()[server.address] == []
    mc.behaviors = {"hot_keys_sample": 1}
    mc.get("b")
    mc.behaviors = {"verify_keys": 1}  # another behavior: the summary stays
    assert mc.hot_keys()[server.address] == [(b"b", 1, 0)]
    mc.behaviors = {"hot_keys": 0}
    mc.get("b")
    assert mc.hot_keys()[server.address] == []
    assert "hot_keys" not in mc.metrics()[server.address]


def test_metrics_and_prometheus_show_the_top_k(servers):
    mc = fastmc.Client(servers, behaviors={"hot_keys": 3, "hot_keys_sample": 1})
    for i in range(40):
        mc.get("p%d" % (i % 8))
        mc.get("hot")
    m = mc.metrics()
    hot = mc.hot_keys()
    assert {a: m[a]["hot_keys"] for a in servers} == hot
    family = [f for f in FastMCCollector(mc, "c").collect() if f.name == "fastmc_hot_key_requests"]
    assert len(family) == 1 and family[0].type == "gauge"
    samples = {(s.labels["server"], s.labels["key"]): s.value for s in family[0].samples}
    want = {(a, key.decode()): count for a, keys in hot.items() for key, count, _ in keys}
    assert samples == want
    assert all(len([1 for a, _ in samples if a == s]) <= 3 for s in servers)
    assert samples[(hot_server(hot), "hot")] == 40


def hot_server(hot):
    return next(a for a, keys in hot.items() if any(k == b"hot" for k, _, _ in keys))


def test_the_asyncio_client_counts_its_keys(server):
    """Each awaited call counts its keys; gets of one key that queue up together are fetched
    once for all of them (merged on a worker), and count as the one request the server saw."""

    async def run():
        async with fastmc.aio.Client(
            [server.address], behaviors={"hot_keys": 4, "hot_keys_sample": 1}
        ) as mc:
            await mc.set("x", 1)
            for _ in range(5):
                assert await mc.get("x") == 1
            for _ in range(3):
                assert await mc.get("y") is None
            assert await mc.get_multi(["x", "y"]) == {"x": 1}
            exact = mc.hot_keys()
            await asyncio.gather(*(mc.get("z") for _ in range(3)))
            return exact, mc.hot_keys()

    exact, merged = asyncio.run(run())
    assert exact == {server.address: [(b"x", 7, 0), (b"y", 4, 0)]}
    z = [count for key, count, _ in merged[server.address] if key == b"z"]
    assert len(z) == 1 and 1 <= z[0] <= 3
