"""Datadog's ddtrace with fastmc installed as pylibmc, in the setups its docs give
(``ddtrace-run``, ``import ddtrace.auto`` before or after ``install_as_pylibmc()``): its pylibmc
integration patches ``pylibmc.Client`` (one span per call, the blocking client and Django's
PyLibMCCache), leaves ``fastmc.Client`` alone, and results and exceptions are unchanged. The
asyncio client, FastMCCache and ``get_or_set`` are traced through ddtrace's OpenTelemetry
support and ``fastmc.opentelemetry``. Each setup runs in a child process, offline: a
ddtrace ``TraceFilter`` keeps the finished spans and drops the traces before any writer."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
from memcached import free_port

# ddtrace has no release for every CPython the suite runs on (none for 3.15: release/sid.py)
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ddtrace") is None, reason="ddtrace is not installed"
)

PRELUDE = """
import json, sys, threading
ORDER, ADDR = sys.argv[1], sys.argv[2]
if ORDER == "auto-first":
    import ddtrace.auto
import fastmc
fastmc.install_as_pylibmc()
if ORDER == "auto-after":
    import ddtrace.auto
from ddtrace.trace import TraceFilter, tracer

SPANS = []

class Keep(TraceFilter):
    def process_trace(self, trace):
        SPANS.extend(trace)
        return None  # dropped: nothing is sent

tracer.configure(trace_processors=[Keep()])

def spans():
    tracer.flush()
    return [
        [s.resource, s.name, s.error, s.get_tag("error.type"), s.get_tag("out.host")]
        for s in sorted(SPANS, key=lambda s: s.start_ns)
    ]

import django
from django.conf import settings
"""

PYLIBMC = """
settings.configure(CACHES={"default": {
    "BACKEND": "django.core.cache.backends.memcached.PyLibMCCache", "LOCATION": ADDR}})
django.setup()
import pylibmc
from django.core.cache import caches

out = {"pylibmc.Client": pylibmc.Client.__name__, "fastmc.Client": fastmc.Client.__module__,
       "version": pylibmc.__version__}
mc = pylibmc.Client([ADDR])
out["results"] = [mc.set("k", 1), mc.get("k"), mc.get_multi(["k", "nope"])]
try:
    mc.incr("nope")
except pylibmc.Error as e:
    out["raised"] = "%s.%s" % (type(e).__module__, type(e).__name__)
copy = mc.clone()
out["clone"] = [type(copy).__name__, copy.get("k")]
seen = []
def worker(n):
    for i in range(5):
        mc.set("t%d" % n, i)
        seen.append(mc.get("t%d" % n) == i)
threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
for t in threads: t.start()
for t in threads: t.join()
out["threads"] = [len(seen), all(seen)]
caches["default"].set("dj", {"a": 1})
out["django"] = caches["default"].get("dj")
out["spans"] = spans()
print(json.dumps(out))
"""

BRIDGE = """
import asyncio
import fastmc.aio
from fastmc.opentelemetry import FastMCInstrumentor

FastMCInstrumentor().instrument()
settings.configure(CACHES={"default": {"BACKEND": "fastmc.django.FastMCCache", "LOCATION": ADDR}})
django.setup()
from django.core.cache import caches

out = {}
async def main():
    async with fastmc.aio.Client([ADDR]) as amc:
        with tracer.trace("request") as parent:
            await amc.set("a", 1)
            out["aio"] = await amc.get("a")
            out["parent"] = parent.span_id
caches["default"].set("dj", 2)
out["django"] = caches["default"].get("dj")
out["get_or_set"] = fastmc.Client([ADDR]).get_or_set("gos", lambda: 3)
asyncio.run(main())
tracer.flush()
out["spans"] = [[s.resource, s.parent_id, s.get_tag("db.system.name")]
                for s in sorted(SPANS, key=lambda s: s.start_ns)]
print(json.dumps(out))
"""


def run(server, order, body, **env):
    env = dict(
        os.environ,
        DD_TRACE_AGENT_URL="http://127.0.0.1:%d" % free_port(),
        DD_INSTRUMENTATION_TELEMETRY_ENABLED="false",
        DD_REMOTE_CONFIGURATION_ENABLED="false",
        DD_TRACE_STARTUP_LOGS="false",
        DD_SERVICE="fastmc-test",
        **env,
    )
    cmd = [sys.executable, "-c", textwrap.dedent(PRELUDE + body), order, server.address]
    if order == "ddtrace-run":
        cmd.insert(0, os.path.join(os.path.dirname(sys.executable), "ddtrace-run"))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("order", ["ddtrace-run", "auto-first", "auto-after"])
def test_ddtrace_traces_fastmc_installed_as_pylibmc(server, order):
    # safe instrumentation checks pylibmc.__version__ against the integration's ">=1.6.2"
    out = run(server, order, PYLIBMC, DD_TRACE_SAFE_INSTRUMENTATION_ENABLED="true")
    assert out["pylibmc.Client"] == "TracedClient"  # patched ...
    assert out["fastmc.Client"] == "fastmc.client"  # ... on pylibmc, not on fastmc
    assert out["version"] == "1.6.3"
    assert out["results"] == [True, 1, {"k": 1}]
    assert out["raised"] == "pylibmc.NotFound"
    assert out["clone"] == ["TracedClient", 1]
    assert out["threads"] == [20, True]
    assert out["django"] == {"a": 1}
    spans = out["spans"]
    host = server.address.rsplit(":", 1)[0]
    assert spans[:5] == [
        ["set", "memcached.cmd", 0, None, host],
        ["get", "memcached.cmd", 0, None, host],
        ["get_multi", "memcached.cmd", 0, None, host],
        ["incr", "memcached.cmd", 1, "pylibmc.NotFound", host],
        ["get", "memcached.cmd", 0, None, host],  # on the clone
    ]
    assert sorted(s[0] for s in spans[5:-2]) == ["get"] * 20 + ["set"] * 20
    assert [s[0] for s in spans[-2:]] == ["set", "get"]  # Django's PyLibMCCache


def test_ddtrace_sees_the_asyncio_client_and_fastmccache_through_opentelemetry(server):
    out = run(server, "auto-first", BRIDGE, DD_TRACE_OTEL_ENABLED="true")
    assert (out["aio"], out["django"], out["get_or_set"]) == (1, 2, 3)
    spans = out["spans"]
    assert [s[0] for s in spans[:2]] == ["set", "get"]  # FastMCCache
    assert spans[2][0] == "get_or_set"
    assert [s[:2] for s in spans[-3:]] == [
        ["request", None],
        ["set", out["parent"]],
        ["get", out["parent"]],
    ]
    assert all(s[2] == "memcached" for s in spans if s[0] != "request")
