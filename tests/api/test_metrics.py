"""Client.metrics(): per-server counters (requests and keys by family, hits, misses, stored,
errors by pylibmc class, connections, server-down skips, ejections, bytes) and latency
percentiles, on the blocking and the asyncio client; and the Prometheus collector, scraped."""

import asyncio

import fastmc
import fastmc.aio
import pytest
from memcached import free_port


def one(mc):
    (m,) = mc.metrics().values()
    return m


def test_counts_follow_the_operations(server):
    mc = fastmc.Client([server.address])
    mc.flush_all()
    assert mc.set("a", 1) and mc.set("b", "x")
    assert mc.add("a", 2) is False  # NOT_STORED
    assert mc.get("a") == 1 and mc.get("missing") is None
    assert mc.get_multi(["a", "b", "c", "d"]) == {"a": 1, "b": "x"}
    mc.delete("a")
    m = one(mc)
    assert m["requests"]["store"] == 3 and m["keys"]["store"] == 3
    assert m["requests"]["get"] == 3 and m["keys"]["get"] == 6
    assert m["requests"]["delete"] == 1
    assert m["requests"]["admin"] == 1  # flush_all
    assert (m["hits"], m["misses"]) == (3, 3)
    assert (m["stored"], m["not_stored"]) == (2, 1)
    assert m["errors"] == {} and m["timeouts"] == 0
    assert m["bytes_sent"] > 60 and m["bytes_received"] > 40
    assert m["connections_opened"] == 1 and m["connections_idle"] == 1
    for family in ("get", "store", "delete"):
        lat = m["latency"][family]
        assert lat["count"] == m["requests"][family]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] <= lat["total"]


def test_single_calls_count_their_bytes_exactly(server):
    """A single-key call takes the short path (one send, one recv, its reply read by its family)
    and counts what it sent and read byte for byte, as a batch of the general path does, with a
    request and a latency sample each."""
    mc = fastmc.Client([server.address])
    mc.flush_all()
    before = one(mc)
    exchanges = [
        (lambda: mc.set("k", b"abc"), b"set k 0 0 3\r\nabc\r\n", b"STORED\r\n"),
        (lambda: mc.get("k"), b"get k\r\n", b"VALUE k 0 3\r\nabc\r\nEND\r\n"),
        (lambda: mc.get("nope"), b"get nope\r\n", b"END\r\n"),
        (lambda: mc.touch("k", 0), b"touch k 0\r\n", b"TOUCHED\r\n"),
        (lambda: mc.delete("k"), b"delete k\r\n", b"DELETED\r\n"),
        (lambda: mc.delete("k"), b"delete k\r\n", b"NOT_FOUND\r\n"),
    ]
    for call, sent, read in exchanges:
        m0 = one(mc)
        call()
        m1 = one(mc)
        assert m1["bytes_sent"] - m0["bytes_sent"] == len(sent), sent
        assert m1["bytes_received"] - m0["bytes_received"] == len(read), read
    after = one(mc)
    assert after["requests"]["store"] - before["requests"]["store"] == 1
    assert after["requests"]["get"] - before["requests"]["get"] == 2
    assert after["requests"]["delete"] - before["requests"]["delete"] == 2
    assert (after["hits"] - before["hits"], after["misses"] - before["misses"]) == (1, 1)
    assert after["stored"] - before["stored"] == 1
    assert after["latency"]["get"]["count"] == after["requests"]["get"]
    assert after["connections_opened"] == 1


def test_errors_by_class_skips_and_ejection():
    dead = "127.0.0.1:%d" % free_port()
    mc = fastmc.Client([dead], behaviors={"connect_timeout": 200, "retry_timeout": 30})
    for _ in range(3):
        with pytest.raises(fastmc.Error):
            mc.get("k")
    m = one(mc)
    assert m["errors"] == {"ConnectionError": 1, "ServerDown": 2}
    assert m["server_down_skips"] == 2 and m["connections_opened"] == 0
    ejecting = fastmc.Client(
        [dead, dead.replace("127.0.0.1", "localhost")],
        behaviors={"remove_failed": 1, "retry_timeout": 30, "connect_timeout": 200},
    )
    with pytest.raises(fastmc.Error):
        ejecting.set("k", 1)
    assert sum(s["ejections"] for s in ejecting.metrics().values()) == 1


def test_connections_closed_and_open(server):
    mc = fastmc.Client([server.address])
    mc.set("k", 1)
    mc.disconnect_all()
    m = one(mc)
    assert (m["connections_opened"], m["connections_closed"], m["connections_open"]) == (1, 1, 0)
    assert m["connections_idle"] == 0


def test_asyncio_client_counts_the_same(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("a", 1)
            await asyncio.gather(*(mc.get("a") for _ in range(50)))
            return one(mc)

    m = asyncio.run(main())
    assert m["keys"]["get"] <= 50 and m["hits"] == m["keys"]["get"] >= 1
    assert m["requests"]["store"] == 1


def test_a_skipped_server_is_counted_once_when_the_loop_hands_the_call_on(server):
    """The asyncio client's loop thread looks at every server before it begins a call; when it
    then leaves the call to the workers (here: no idle connection to the live server yet), the
    down server the workers skip is counted once, not once by each."""
    dead = "127.0.0.1:%d" % free_port()
    addrs = [dead, server.address]
    placement = fastmc.Client(addrs)
    on_dead = [k for k in ("d%d" % i for i in range(200)) if placement.hash(k) == 0][:3]
    on_live = [k for k in ("l%d" % i for i in range(200)) if placement.hash(k) == 1][:3]
    behaviors = {"connect_timeout": 200, "retry_timeout": 30}

    async def main():
        async with fastmc.aio.Client(addrs, behaviors=behaviors) as mc:
            with pytest.raises(fastmc.Error):
                await mc.get(on_dead[0])  # the connection fails: the server is down from now
            before = mc.metrics()[dead]
            assert before["server_down_skips"] == 0
            assert await mc.get_multi(on_dead + on_live) == {}
            after = mc.metrics()[dead]
            assert after["server_down_skips"] == 1
            assert after["errors"].get("ServerDown", 0) == before["errors"].get("ServerDown", 0) + 1

    asyncio.run(main())


def test_prometheus_collector_scrape(server):
    import fastmc.prometheus
    from prometheus_client import CollectorRegistry, generate_latest

    mc = fastmc.Client([server.address])
    registry = CollectorRegistry()
    fastmc.prometheus.register(mc, client="sessions", registry=registry)
    mc.set("p", 1)
    mc.get("p")
    mc.get("nope")
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        (smp.name, tuple(sorted(smp.labels.items()))): smp.value
        for fam in text_string_to_metric_families(generate_latest(registry).decode())
        for smp in fam.samples
    }

    def value(name, **extra):
        labels = {"client": "sessions", "server": server.address, **extra}
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("fastmc_requests_total", family="get") == 2
    assert value("fastmc_hits_total") == 1 and value("fastmc_misses_total") == 1
    assert value("fastmc_request_duration_seconds_count", family="store") == 1
    assert value("fastmc_request_duration_quantile_seconds", family="get", quantile="0.99") > 0
    assert value("fastmc_connections_idle") == 1
    assert value("fastmc_sent_bytes_total") > 0
