"""fastmc.opentelemetry: one CLIENT span per call of the blocking and the asyncio client, with
the database-client attributes (system, operation, the server that answered, the batch size),
errors with pylibmc's class, the parent kept across ``await``, keys only when asked; found by
``opentelemetry-instrument`` through its entry point; ``uninstrument`` puts the methods back."""

import asyncio
import os
import subprocess
import sys
import textwrap

import fastmc
import fastmc.aio
import pytest
from fastmc import _fastmc, stampede
from fastmc.opentelemetry import FastMCInstrumentor
from memcached import free_port
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode


@pytest.fixture
def spans():
    """The instrumentor on, exporting to memory; yields (tracer, exporter)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    FastMCInstrumentor().instrument(tracer_provider=provider)
    yield provider.get_tracer("test"), exporter
    FastMCInstrumentor().uninstrument()


def fastmc_spans(exporter):
    return [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name != "test"]


def host_port(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


def test_blocking_calls_make_one_client_span_each(spans, server):
    tracer, exporter = spans
    mc = fastmc.Client([server.address])
    with tracer.start_as_current_span("request") as parent:
        assert mc.set("k", "v")
        assert mc.get("k") == "v"
        assert mc.get_multi(["k"]) == {"k": "v"}  # one key: an operation, not a batch
    got = fastmc_spans(exporter)
    assert [s.name for s in got] == ["set", "get", "get_multi"]
    host, port = host_port(server.address)
    for s in got:
        assert s.kind is SpanKind.CLIENT
        assert s.parent.span_id == parent.get_span_context().span_id
        assert s.status.status_code is StatusCode.UNSET
        assert dict(s.attributes) == {
            "db.system.name": "memcached",
            "db.operation.name": s.name,
            "server.address": host,
            "server.port": port,
        }  # no key: db.query.text only when asked


def test_keys_are_recorded_only_when_asked(server):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    FastMCInstrumentor().instrument(tracer_provider=provider, capture_keys=True)
    try:
        mc = fastmc.Client([server.address])
        mc.get("user:1")
        mc.get_multi(["a", b"b"], key_prefix="p:")
    finally:
        FastMCInstrumentor().uninstrument()
    texts = [s.attributes["db.query.text"] for s in exporter.get_finished_spans()]
    assert texts == ["get user:1", "get_multi p:a p:b"]


def test_multi_key_call_over_three_servers_is_one_span(spans, servers):
    _, exporter = spans
    mc = fastmc.Client(servers)
    keys = ["key%d" % i for i in range(60)]
    assert len({mc.hash(k) for k in keys}) == 3
    assert mc.set_multi(dict.fromkeys(keys, 1)) == []
    assert len(mc.get_multi(keys)) == 60
    on_one = [k for k in keys if mc.hash(k) == 1][:5]
    mc.delete_multi(on_one)
    got = fastmc_spans(exporter)
    assert [s.name for s in got] == ["set_multi", "get_multi", "delete_multi"]
    for s in got[:2]:  # three servers answered: no single server to name
        assert s.attributes["db.operation.batch.size"] == 60
        assert "server.address" not in s.attributes and "server.port" not in s.attributes
    host, port = host_port(mc.addresses[1])
    assert got[2].attributes["db.operation.batch.size"] == 5
    assert (got[2].attributes["server.address"], got[2].attributes["server.port"]) == (host, port)


def test_spans_name_the_servers_of_the_current_list(spans, servers):
    _, exporter = spans
    mc = fastmc.Client(servers[:1])
    mc.get("k")
    mc.set_servers(servers[1:2])
    mc.get("k")
    ports = [s.attributes["server.port"] for s in fastmc_spans(exporter)]
    assert ports == [host_port(servers[0])[1], host_port(servers[1])[1]]


def test_error_is_recorded_with_pylibmcs_class(spans, server):
    _, exporter = spans
    mc = fastmc.Client([server.address])
    mc.delete("missing")
    with pytest.raises(fastmc.NotFound):
        mc.incr("missing")
    with pytest.raises(fastmc.BadKeyProvided):
        mc.get("bad key")
    incr, delete_bad = fastmc_spans(exporter)[1:]
    for s, cls in ((incr, "NotFound"), (delete_bad, "BadKeyProvided")):
        assert s.attributes["error.type"] == "pylibmc." + cls
        assert s.status.status_code is StatusCode.ERROR
        (event,) = s.events
        assert event.name == "exception"
        assert event.attributes["exception.type"] == "pylibmc." + cls


def test_server_down_is_recorded_on_its_span(spans, mcd):
    _, exporter = spans
    mc = fastmc.Client([mcd.address], behaviors={"connect_timeout": 200, "retry_timeout": 30})
    assert mc.set("k", 1)
    mcd.stop()
    for _ in range(2):
        with pytest.raises(fastmc.Error):
            mc.get("k")
    dead = "127.0.0.1:%d" % free_port()
    with pytest.raises(fastmc.ConnectionError):
        fastmc.Client([dead], behaviors={"connect_timeout": 200}).get("k")
    got = fastmc_spans(exporter)
    host, port = host_port(mcd.address)
    dead_classes = {"ConnectionError", "ReadError", "WriteError", "UnknownReadFailure"}
    assert got[1].attributes["error.type"] in {"pylibmc." + c for c in dead_classes}
    assert got[2].attributes["error.type"] == "pylibmc.ServerDown"
    for s in got[1:3]:
        assert s.status.status_code is StatusCode.ERROR
        assert (s.attributes["server.address"], s.attributes["server.port"]) == (host, port)
    assert got[3].attributes["error.type"] == "pylibmc.ConnectionError"
    assert got[3].attributes["server.port"] == int(dead.rsplit(":", 1)[1])


def test_asyncio_spans_keep_their_parent_across_await(spans, servers):
    tracer, exporter = spans

    async def task(mc, name):
        with tracer.start_as_current_span(name):
            for i in range(5):
                await mc.set("%s%d" % (name, i), i)
                await asyncio.sleep(0)
                assert await mc.get("%s%d" % (name, i)) == i
            await mc.get_multi(["%s%d" % (name, i) for i in range(5)])
            await mc.get_or_set(name + "-gos", lambda: 7)

    async def main():
        async with fastmc.aio.Client(servers) as mc:
            await asyncio.gather(*(task(mc, "t%d" % n) for n in range(4)))

    asyncio.run(main())
    finished = exporter.get_finished_spans()
    parents = {s.context.span_id: s.name for s in finished if s.name.startswith("t")}
    assert len(parents) == 4
    ours = [s for s in fastmc_spans(exporter) if s.parent.span_id in parents]
    for name in parents.values():
        mine = [s.name for s in ours if parents[s.parent.span_id] == name]
        assert mine == ["set", "get"] * 5 + ["get_multi", "get_or_set"]
    for s in ours:
        assert s.kind is SpanKind.CLIENT and s.attributes["db.system.name"] == "memcached"
        if s.name != "get_multi":
            assert "server.address" in s.attributes


def test_uninstrument_puts_the_native_methods_back(server):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert "get" not in fastmc.Client.__dict__  # imported, not instrumented: nothing wrapped
    FastMCInstrumentor().instrument(tracer_provider=provider)
    assert "get" in fastmc.Client.__dict__
    FastMCInstrumentor().uninstrument()
    assert "get" not in fastmc.Client.__dict__ and fastmc.Client.get is _fastmc.client.get
    assert fastmc.aio.Client.__dict__["get_or_set"] is stampede.aget_or_set
    fastmc.Client([server.address]).get("k")
    assert exporter.get_finished_spans() == ()


SCRIPT = """
import json, fastmc
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
fastmc.install_as_pylibmc()
import pylibmc
pylibmc.Client([%r]).get("k")
print(json.dumps([[s.name, dict(s.attributes)] for s in exporter.get_finished_spans()]))
"""


def test_opentelemetry_instrument_finds_the_instrumentor(server):
    """The entry point: ``opentelemetry-instrument python app.py`` traces fastmc."""
    tool = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    env = dict(os.environ, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    out = subprocess.run(
        [tool, sys.executable, "-c", textwrap.dedent(SCRIPT % server.address)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert '[["get", {"db.system.name": "memcached"' in out


def test_a_hot_keys_span_tells_its_rank_and_never_the_key(spans, server):
    """With hot-key telemetry on, a single-key call's span has the key's rank among its
    server's hottest keys and their estimated requests, as they stood when the call began."""
    _, exporter = spans
    mc = fastmc.Client([server.address], behaviors={"hot_keys": 4, "hot_keys_sample": 1})
    mc.set("warm", 1)
    for _ in range(3):
        mc.get("hot")
    mc.get("warm")
    mc.get("cold", server_key="hot")
    got = {(s.name, i): dict(s.attributes) for i, s in enumerate(fastmc_spans(exporter))}
    hot = [a.get("fastmc.hot_key.rank") for a in got.values()]
    assert hot == [None, None, 1, 1, 2, None]
    assert [a.get("fastmc.hot_key.requests") for a in got.values()] == [None, None, 1, 2, 1, None]
    assert all("hot" not in str(v) for a in got.values() for v in a.values())
