"""A Prometheus collector for fastmc's client metrics (``pip install fastmc[prometheus]``).

::

    import fastmc, fastmc.prometheus
    mc = fastmc.Client(["10.0.0.1:11211", "10.0.0.2:11211"])
    fastmc.prometheus.register(mc, client="sessions")   # on prometheus_client's default registry

Every scrape reads :meth:`fastmc.Client.metrics` (no I/O; a few atomic loads per server) and
exports, labelled by ``client`` and ``server`` (and ``family`` — get, store, delete, arith,
touch, admin — or ``class``, pylibmc's exception class):

- counters ``fastmc_requests_total``, ``fastmc_keys_total`` (by family), ``fastmc_hits_total``,
  ``fastmc_misses_total``, ``fastmc_stored_total``, ``fastmc_not_stored_total``,
  ``fastmc_errors_total`` (by class), ``fastmc_timeouts_total``,
  ``fastmc_connections_opened_total``, ``fastmc_connections_closed_total``,
  ``fastmc_server_down_skips_total``, ``fastmc_transient_failures_total``,
  ``fastmc_ejections_total``, ``fastmc_rejoins_total``, ``fastmc_sent_bytes_total``,
  ``fastmc_received_bytes_total``;
- gauges ``fastmc_connections_open`` and ``fastmc_connections_idle``;
- summary ``fastmc_request_duration_seconds`` (count and sum by family) and gauge
  ``fastmc_request_duration_quantile_seconds`` with ``quantile`` 0.5, 0.9, 0.99 and 1 (the max),
  over the client's life.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["FastMCCollector", "register"]

_COUNTERS = [
    ("hits", "Keys found by get requests"),
    ("misses", "Keys not found by get requests"),
    ("stored", "Keys stored by storage requests"),
    ("not_stored", "Keys not stored by storage requests (NOT_STORED, EXISTS, NOT_FOUND)"),
    ("timeouts", "Requests that timed out"),
    ("connections_opened", "Connections opened"),
    ("connections_closed", "Connections closed"),
    ("server_down_skips", "Requests failed at once because the server was marked down"),
    (
        "transient_failures",
        "Stalled requests that a fresh connection showed the server alive for (not marked down)",
    ),
    ("ejections", "Times the server was ejected from the ring"),
    ("rejoins", "Times an ejected server came back into the ring"),
]


class FastMCCollector(Collector):
    """Exports one client's metrics; ``client`` labels them."""

    def __init__(self, mc: Any, client: str = "default") -> None:
        self.mc = mc
        self.client = client

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        servers = self.mc.metrics()
        base = ["client", "server"]

        def counter(name: str, doc: str, extra: list[str] | None = None) -> CounterMetricFamily:
            return CounterMetricFamily("fastmc_" + name, doc, labels=base + (extra or []))

        requests = counter("requests", "Requests sent to a server, by family", ["family"])
        keys = counter("keys", "Keys in the requests sent to a server, by family", ["family"])
        errors = counter("errors", "Failed keys or requests, by pylibmc class", ["class"])
        simple = {name: counter(name, doc) for name, doc in _COUNTERS}
        sent = counter("sent_bytes", "Bytes sent")
        received = counter("received_bytes", "Bytes received")
        open_ = GaugeMetricFamily("fastmc_connections_open", "Connections open", labels=base)
        idle = GaugeMetricFamily("fastmc_connections_idle", "Idle pooled connections", labels=base)
        duration = SummaryMetricFamily(
            "fastmc_request_duration_seconds",
            "Request duration, by family",
            labels=[*base, "family"],
        )
        quantiles = GaugeMetricFamily(
            "fastmc_request_duration_quantile_seconds",
            "Request duration quantiles over the client's life (1: the maximum)",
            labels=[*base, "family", "quantile"],
        )
        for server, m in servers.items():
            labels = [self.client, server]
            for family, n in m["requests"].items():
                requests.add_metric([*labels, family], n)
                keys.add_metric([*labels, family], m["keys"][family])
                lat = m["latency"][family]
                duration.add_metric([*labels, family], lat["count"], lat["total"])
                for q, key in (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"), ("1", "max")):
                    quantiles.add_metric([*labels, family, q], lat[key])
            for cls, n in m["errors"].items():
                errors.add_metric([*labels, cls], n)
            for name, family_ in simple.items():
                family_.add_metric(labels, m[name])
            sent.add_metric(labels, m["bytes_sent"])
            received.add_metric(labels, m["bytes_received"])
            open_.add_metric(labels, m["connections_open"])
            idle.add_metric(labels, m["connections_idle"])
        yield from (requests, keys, errors, *simple.values(), sent, received, open_, idle)
        yield from (duration, quantiles)


def register(
    mc: Any, client: str = "default", registry: CollectorRegistry = REGISTRY
) -> FastMCCollector:
    """Export ``mc``'s metrics on ``registry`` (prometheus_client's default one unless given)."""
    collector = FastMCCollector(mc, client)
    registry.register(collector)
    return collector
