"""A Prometheus collector for fastmc's client metrics (``pip install fastmc[prometheus]``).

::

    import fastmc, fastmc.prometheus
    mc = fastmc.Client(["10.0.0.1:11211", "10.0.0.2:11211"])
    fastmc.prometheus.register(mc, client="sessions")   # on prometheus_client's default registry

Every scrape reads :meth:`fastmc.Client.metrics` (no I/O; a few atomic loads per server) and
exports each of its keys as one family, named and described by :func:`fastmc.metric_schema` (the
list is in docs/operations.md), labelled by ``client`` and ``server`` (and ``family`` — get,
store, delete, arith, touch, admin — or ``class``, pylibmc's exception class): the counters
(``fastmc_..._total``) first, then the gauges, then each latency histogram as a summary (count
and sum by family) and a gauge ``..._quantile_seconds`` with ``quantile`` 0.5, 0.9, 0.99 and 1
(the max), over the client's life. While hot-key telemetry is on (behaviors ``hot_keys``),
``fastmc_hot_key_requests`` is a gauge of each server's hottest keys, labelled by ``key``.
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

from ._fastmc import metric_schema

__all__ = ["FastMCCollector", "register"]

_BY = {"family": ", by family", "class": ", by pylibmc class"}
_QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"), ("1", "max"))
_ORDER = {"counter": 0, "gauge": 1, "histogram": 2}
# A client that follows DNS names (metrics()["dns"]): one family each, labelled by client.
_DNS = (
    ("lookups", "fastmc_dns_lookups", "counter", "Lookups of the server list's DNS names"),
    (
        "failures",
        "fastmc_dns_failures",
        "counter",
        "Lookups that failed, timed out or were refused (the last list kept)",
    ),
    ("changes", "fastmc_dns_changes", "counter", "Server lists applied after a lookup changed"),
    ("servers", "fastmc_dns_servers", "gauge", "Servers in the list the names stand for now"),
    (
        "since_success",
        "fastmc_dns_since_success_seconds",
        "gauge",
        "Seconds since the last lookup that succeeded",
    ),
)
# Counters first (those split by a label before the others), then gauges, then histograms.
# A client with a near cache (metrics()["near"]): one family each, labelled by client.
_NEAR = (
    ("hits", "fastmc_near_hits", "counter", "Reads answered from the near cache"),
    ("misses", "fastmc_near_misses", "counter", "Reads the near cache did not answer"),
    ("fills", "fastmc_near_fills", "counter", "Values the near cache started holding"),
    (
        "revalidations_unchanged",
        "fastmc_near_revalidations_unchanged",
        "counter",
        "Checks that found a held value current",
    ),
    (
        "revalidations_changed",
        "fastmc_near_revalidations_changed",
        "counter",
        "Checks that found a held value changed or gone",
    ),
    (
        "bytes_not_transferred",
        "fastmc_near_bytes_not_transferred",
        "counter",
        "Bytes of values found current by their CAS alone, not sent again",
    ),
    ("evictions", "fastmc_near_evictions", "counter", "Values evicted to keep the bounds"),
    ("invalidations", "fastmc_near_invalidations", "counter", "Values dropped by writes"),
    (
        "stale_served",
        "fastmc_near_stale_served",
        "counter",
        "Values served past their ttl while their server could not be reached",
    ),
    ("items", "fastmc_near_items", "gauge", "Values the near cache holds"),
    ("bytes", "fastmc_near_bytes", "gauge", "Bytes the near cache holds (as stored)"),
)
_SCHEMA = sorted(metric_schema(), key=lambda row: (_ORDER[row[2]], row[3] is None))


class FastMCCollector(Collector):
    """Exports one client's metrics; ``client`` labels them."""

    def __init__(self, mc: Any, client: str = "default") -> None:
        self.mc = mc
        self.client = client

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        servers = self.mc.metrics()
        dns = servers.pop("dns", None)
        near = servers.pop("near", None)
        for key, name, kind, label, help_ in _SCHEMA:
            labels = ["client", "server"] + ([label] if label else [])
            doc = help_ + _BY[label] if label else help_
            if kind == "histogram":
                yield from self._histogram(servers, key, name, labels, help_, doc)
                continue
            make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = make(name, doc, labels=labels)
            for server, m in servers.items():
                if label is None:
                    family.add_metric([self.client, server], m[key])
                    continue
                for value, n in m[key].items():
                    family.add_metric([self.client, server, value], n)
            yield family
        if dns is not None:
            yield from self._client_families(_DNS, dns)
        if near is not None:
            yield from self._client_families(_NEAR, near)
        hot = [(server, m["hot_keys"]) for server, m in servers.items() if "hot_keys" in m]
        if hot:
            yield self._hot(hot)

    def _hot(self, servers: list[tuple[str, list[tuple[bytes, int, int]]]]) -> Metric:
        """Each server's hot keys (behaviors ``hot_keys``): at most that many series per
        server, whatever the key space."""
        family = GaugeMetricFamily(
            "fastmc_hot_key_requests",
            "Estimated requests for each of a server's hottest keys since its summary was reset"
            " (sampled; behaviors hot_keys, hot_keys_sample)",
            labels=["client", "server", "key"],
        )
        for server, keys in servers:
            for key, count, _error in keys:
                family.add_metric(
                    [self.client, server, key.decode("utf-8", "backslashreplace")], count
                )
        return family

    def _client_families(
        self, table: tuple[tuple[str, str, str, str], ...], values: dict[str, Any]
    ) -> Iterator[Metric]:
        """The client-wide families: the DNS names' lookups (``fastmc.dnsdiscovery``) for a
        client that follows some, the near cache's counters for a client that has one."""
        for key, name, kind, doc in table:
            make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            family = make(name, doc, labels=["client"])
            family.add_metric([self.client], values[key])
            yield family

    def _histogram(
        self, servers: dict[str, Any], key: str, name: str, labels: list[str], help_: str, doc: str
    ) -> Iterator[Metric]:
        """A summary (count and sum) and a gauge of its quantiles, ``..._quantile_seconds``."""
        summary = SummaryMetricFamily(name, doc, labels=labels)
        quantiles = GaugeMetricFamily(
            name.removesuffix("_seconds") + "_quantile_seconds",
            help_ + " quantiles over the client's life (1: the maximum)",
            labels=[*labels, "quantile"],
        )
        for server, m in servers.items():
            for family, lat in m[key].items():
                summary.add_metric([self.client, server, family], lat["count"], lat["total"])
                for q, stat in _QUANTILES:
                    quantiles.add_metric([self.client, server, family, q], lat[stat])
        yield from (summary, quantiles)


def register(
    mc: Any, client: str = "default", registry: CollectorRegistry = REGISTRY
) -> FastMCCollector:
    """Export ``mc``'s metrics on ``registry`` (prometheus_client's default one unless given)."""
    collector = FastMCCollector(mc, client)
    registry.register(collector)
    return collector
