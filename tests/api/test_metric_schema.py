"""The shape of Client.metrics() and of the Prometheus export, pinned: every key in its order,
every value's type, and every Prometheus family's name, type, help and labels, on the blocking
and the asyncio client; and the metric table (fastmc.metric_schema()) held against both and
against docs/operations.md's lists."""

import asyncio
import pathlib
import re

import fastmc
import fastmc.aio
import pytest
from memcached import free_port

FAMILIES = ["get", "store", "delete", "arith", "touch", "admin"]

# (key, what its value is): "int", or a dict by "family" or by pylibmc "class", or "latency".
KEYS = [
    ("requests", "family"),
    ("keys", "family"),
    ("hits", "int"),
    ("misses", "int"),
    ("stored", "int"),
    ("not_stored", "int"),
    ("errors", "class"),
    ("timeouts", "int"),
    ("connections_opened", "int"),
    ("connections_closed", "int"),
    ("connections_open", "int"),
    ("connections_idle", "int"),
    ("server_down_skips", "int"),
    ("transient_failures", "int"),
    ("ejections", "int"),
    ("rejoins", "int"),
    ("bytes_sent", "int"),
    ("bytes_received", "int"),
    ("latency", "latency"),
]

LATENCY = [("count", int), ("p50", float), ("p90", float), ("p99", float), ("max", float)]
LATENCY += [("total", float)]

# (family, type, help, labels beyond client and server), in the order a scrape lists them.
BY_FAMILY = ("family",)
PROMETHEUS = [
    ("fastmc_requests", "counter", "Requests sent to a server, by family", BY_FAMILY),
    ("fastmc_keys", "counter", "Keys in the requests sent to a server, by family", BY_FAMILY),
    ("fastmc_errors", "counter", "Failed keys or requests, by pylibmc class", ("class",)),
    ("fastmc_hits", "counter", "Keys found by get requests", ()),
    ("fastmc_misses", "counter", "Keys not found by get requests", ()),
    ("fastmc_stored", "counter", "Keys stored by storage requests", ()),
    (
        "fastmc_not_stored",
        "counter",
        "Keys not stored by storage requests (NOT_STORED, EXISTS, NOT_FOUND)",
        (),
    ),
    ("fastmc_timeouts", "counter", "Requests that timed out", ()),
    ("fastmc_connections_opened", "counter", "Connections opened", ()),
    ("fastmc_connections_closed", "counter", "Connections closed", ()),
    (
        "fastmc_server_down_skips",
        "counter",
        "Requests failed at once because the server was marked down",
        (),
    ),
    (
        "fastmc_transient_failures",
        "counter",
        "Stalled requests that a fresh connection showed the server alive for (not marked down)",
        (),
    ),
    ("fastmc_ejections", "counter", "Times the server was ejected from the ring", ()),
    ("fastmc_rejoins", "counter", "Times an ejected server came back into the ring", ()),
    ("fastmc_sent_bytes", "counter", "Bytes sent", ()),
    ("fastmc_received_bytes", "counter", "Bytes received", ()),
    ("fastmc_connections_open", "gauge", "Connections open", ()),
    ("fastmc_connections_idle", "gauge", "Idle pooled connections", ()),
    ("fastmc_request_duration_seconds", "summary", "Request duration, by family", BY_FAMILY),
    (
        "fastmc_request_duration_quantile_seconds",
        "gauge",
        "Request duration quantiles over the client's life (1: the maximum)",
        ("family", "quantile"),
    ),
]


def exercise(mc, dead):
    """Some of every family, a miss, a NOT_STORED and a failure (errors has one class)."""
    mc.set("a", 1)
    mc.add("a", 2)
    mc.get_multi(["a", "b"])
    mc.delete("a")
    mc.set("n", 1)
    mc.incr("n")
    mc.touch("n", 10)
    mc.flush_all()
    with pytest.raises(fastmc.Error):
        dead.get("k")


def check_shape(all_metrics):
    for m in all_metrics.values():
        assert [k for k, _ in KEYS] == list(m)
        for key, what in KEYS:
            v = m[key]
            if what == "int":
                assert type(v) is int and v >= 0, key
            elif what == "family":
                assert list(v) == FAMILIES and all(type(n) is int for n in v.values()), key
            elif what == "class":
                assert all(type(c) is str and type(n) is int for c, n in v.items()), key
            else:
                assert list(v) == FAMILIES
                for lat in v.values():
                    assert [(k, type(x)) for k, x in lat.items()] == LATENCY


def test_metrics_keys_and_types_of_the_blocking_client(server):
    mc = fastmc.Client([server.address])
    dead = fastmc.Client(["127.0.0.1:%d" % free_port()], behaviors={"connect_timeout": 200})
    exercise(mc, dead)
    check_shape(mc.metrics())
    check_shape(dead.metrics())
    (d,) = dead.metrics().values()
    assert d["errors"] == {"ConnectionError": 1}


def test_metrics_keys_and_types_of_the_asyncio_client(server):
    async def main():
        async with fastmc.aio.Client([server.address]) as mc:
            await mc.set("a", 1)
            await mc.get_multi(["a", "b"])
            await mc.delete("a")
            return mc.metrics()

    check_shape(asyncio.run(main()))


def test_prometheus_families_names_types_help_and_labels(server):
    import fastmc.prometheus
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    dead_address = "127.0.0.1:%d" % free_port()
    mc = fastmc.Client([server.address, dead_address], behaviors={"connect_timeout": 200})
    registry = CollectorRegistry()
    fastmc.prometheus.register(mc, client="c", registry=registry)
    on_dead = next(k for k in ("k%d" % i for i in range(200)) if mc.hash(k) == 1)
    with pytest.raises(fastmc.Error):
        mc.get(on_dead)
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    got = [(f.name, f.type, f.documentation) for f in families]
    assert got == [(name, type_, doc) for name, type_, doc, _ in PROMETHEUS]
    for f, (_, type_, _, extra) in zip(families, PROMETHEUS):
        assert f.samples, f.name
        for s in f.samples:
            assert sorted(s.labels) == sorted(("client", "server", *extra)), f.name
            suffixes = {"counter": ["_total"], "gauge": [""], "summary": ["_count", "_sum"]}
            assert s.name in [f.name + x for x in suffixes[type_]]
        servers = {s.labels["server"] for s in f.samples}
        both = {server.address, dead_address}
        assert servers == ({dead_address} if f.name == "fastmc_errors" else both), f.name


def test_the_schema_is_what_metrics_and_the_scrape_show():
    schema = fastmc.metric_schema()
    assert [(key, "int" if label is None else label) for key, _, kind, label, _ in schema] == [
        (key, "family" if what == "latency" else what) for key, what in KEYS
    ]
    kinds = {key: kind for key, _, kind, _, _ in schema}
    assert kinds["latency"] == "histogram"
    assert {k for k, kind in kinds.items() if kind == "gauge"} == {
        "connections_open",
        "connections_idle",
    }
    assert sorted(exposition_names(schema)) == sorted(
        [name + ("_total" if type_ == "counter" else "") for name, type_, _, _ in PROMETHEUS],
    )


def exposition_names(schema):
    """The names a scrape shows, by kind (counters, gauges, histograms), each in table order."""
    names = []
    for kind in ("counter", "gauge", "histogram"):
        for _, name, kind_, _, _ in schema:
            if kind_ == kind:
                names.append(name)
            if kind_ == kind == "histogram":
                names.append(name.removesuffix("_seconds") + "_quantile_seconds")
    return names


def test_the_docs_list_every_metric():
    """docs/operations.md's table of metrics() keys and its list of Prometheus names are the
    schema's, in its order: a metric added to the table must be added there too."""
    doc = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = doc.split("## `Client.metrics()`")[1].split("\n## ")[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    keys = [k for row in rows for k in re.findall(r"`(\w+)`", row)]
    assert keys == [key for key, *_ in fastmc.metric_schema()]
    prometheus = doc.split("## Prometheus")[1].split("\n## ")[0]
    listed = re.findall(r"`(fastmc_\w+)`", prometheus)
    assert listed == exposition_names(fastmc.metric_schema())
