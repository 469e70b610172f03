"""Server lists from DNS: ``dns+NAME:PORT`` (every A and AAAA record of NAME, each a server on
PORT) and ``dnssrv+NAME`` (every SRV record of NAME, its target resolved, with its port), the
convention Thanos, Cortex, Mimir and Loki share for their memcached clients. Such entries may
stand anywhere a server list is taken, mixed with plain addresses::

    mc = fastmc.Client(["dns+memcached.cache.svc.cluster.local:11211"])
    mc = fastmc.Client(["dnssrv+_memcache._tcp.memcached.cache.svc.cluster.local"])

The names are looked up at construction (a name that does not resolve raises
:class:`DNSError` there), then again every ``dns_refresh`` seconds (default 30) on a daemon
thread, and a changed list is applied as ``set_servers`` applies one. A lookup that fails, times
out, answers nothing or more than ``MAX_RECORDS`` records keeps the last list, is logged on the
``fastmc`` logger and counted (``metrics()["dns"]``). Lookups never run on a cache call's path.
``dns_nameservers=["10.0.0.10:53", ...]`` asks those servers instead of the system's (the search
domains and ``ndots`` of ``/etc/resolv.conf`` still apply). Either keyword left out takes
``FASTMC_DNS_REFRESH`` or ``FASTMC_DNS_NAMESERVERS`` (separated by commas) from the environment,
for code that builds its own client. Needs dnspython (``pip install 'fastmc[dns]'``).
docs/operations.md, DNS discovery.
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Callable

from ._clusterconfig import DiscoveryError
from ._log import LOGGER

__all__ = ["DEFAULT_REFRESH", "LOOKUP_TIMEOUT", "MAX_RECORDS", "DNSError", "DNSWatch", "is_dns"]

DEFAULT_REFRESH = 30.0
"""Seconds between lookups: Kubernetes' CoreDNS caches answers for 30 s by default."""
LOOKUP_TIMEOUT = 2.0
"""Seconds one name's lookup may take in all (each record type, retries included)."""
MAX_RECORDS = 512
"""The most servers one name may stand for (as auto-discovery's ``max_nodes``)."""

_PREFIXES = ("dns+", "dnssrv+")


class DNSError(DiscoveryError):
    """A name of the server list could not be looked up, or its answer was refused."""

    __module__ = "fastmc.dnsdiscovery"


def is_dns(spec: object) -> bool:
    """Whether a server list entry is a DNS name (``dns+`` or ``dnssrv+``)."""
    return isinstance(spec, str) and spec.startswith(_PREFIXES)


def _parse(spec: str) -> tuple[str, str, int]:
    """(record type, name, port) of an entry: ``("A", name, port)`` or ``("SRV", name, 0)``."""
    if spec.startswith("dnssrv+"):
        name = spec[len("dnssrv+") :]
        if not name or ":" in name:
            raise ValueError("dnssrv+ takes a name alone (SRV records carry the ports): %r" % spec)
        return "SRV", name, 0
    rest = spec[len("dns+") :]
    name, colon, port = rest.rpartition(":")
    if not colon:
        name, port = rest, "11211"
    if not name or not port.isdigit() or not 0 < int(port) < 65536 or "[" in name:
        raise ValueError("dns+ takes NAME:PORT, not %r" % spec)
    return "A", name, int(port)


def _address(ip: str, port: int) -> str:
    return "[%s]:%d" % (ip, port) if ":" in ip else "%s:%d" % (ip, port)


def _nameserver(spec: str) -> tuple[str, int]:
    host, port = spec, 53
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else 53
    elif spec.count(":") == 1:
        host, p = spec.split(":")
        port = int(p)
    ipaddress.ip_address(host)  # a nameserver is an address: ValueError otherwise
    return host, port


class _Resolver:
    """dnspython's resolver, set up once: the system's configuration, or ``nameservers``."""

    def __init__(self, nameservers: Sequence[str] | None, timeout: float) -> None:
        try:
            import dns.exception
            import dns.nameserver
            import dns.resolver
        except ImportError:
            raise ImportError(
                "dns+ and dnssrv+ servers need dnspython: pip install 'fastmc[dns]'"
            ) from None
        self.errors: tuple[type[BaseException], ...] = (dns.exception.DNSException, OSError)
        self._no_answer = (dns.resolver.NoAnswer,)
        try:
            r = dns.resolver.Resolver(configure=True)
        except dns.resolver.NoResolverConfiguration:
            if not nameservers:
                raise DNSError(
                    "no resolver configuration (/etc/resolv.conf) and no dns_nameservers"
                ) from None
            r = dns.resolver.Resolver(configure=False)
        if nameservers:
            pairs = [_nameserver(n) for n in nameservers]
            r.nameservers = [dns.nameserver.Do53Nameserver(h, port=p) for h, p in pairs]
        r.timeout = r.lifetime = timeout
        r.cache = None
        self.resolver = r

    def query(self, name: str, rdtype: str) -> list[Any]:
        """The records of one type; [] when the name has none of that type."""
        try:
            answer = self.resolver.resolve(name, rdtype, search=True)
        except self._no_answer:
            return []
        records = list(answer)
        if len(records) > MAX_RECORDS:
            raise DNSError(
                "%s %s: %d records, more than %d; refused"
                % (name, rdtype, len(records), MAX_RECORDS)
            )
        return records

    def addresses(self, name: str) -> list[str]:
        """A name's IPv4 addresses, then its IPv6 ones, each sorted."""
        v4 = sorted(ipaddress.ip_address(r.address) for r in self.query(name, "A"))
        v6 = sorted(ipaddress.ip_address(r.address) for r in self.query(name, "AAAA"))
        return [str(ip) for ip in (*v4, *v6)]


def resolve(resolver: _Resolver, specs: Sequence[Any]) -> list[Any]:
    """The server list with each DNS entry replaced by its servers, in a stable order (a name's
    addresses sorted, SRV targets by address then port), each server once."""
    out: list[Any] = []
    seen: set[str] = set()

    def add(server: Any) -> None:
        key = server if isinstance(server, str) else repr(server)
        if key not in seen:
            seen.add(key)
            out.append(server)

    for spec in specs:
        if not is_dns(spec):
            add(spec)
            continue
        kind, name, port = _parse(spec)
        try:
            if kind == "A":
                found = [_address(ip, port) for ip in resolver.addresses(name)]
            else:
                pairs = []
                for srv in resolver.query(name, "SRV"):
                    target = srv.target.to_text()
                    pairs += [
                        (ipaddress.ip_address(ip), srv.port) for ip in resolver.addresses(target)
                    ]
                found = [_address(str(ip), p) for ip, p in sorted(set(pairs), key=_order)]
        except resolver.errors as e:
            raise DNSError("%s: %s: %s" % (spec, type(e).__name__, e)) from None
        if not found:
            raise DNSError(
                "%s: the name has no %s records" % (spec, "A or AAAA" if kind == "A" else "SRV")
            )
        if len(found) > MAX_RECORDS:
            raise DNSError(
                "%s: %d servers, more than %d; refused" % (spec, len(found), MAX_RECORDS)
            )
        for server in found:
            add(server)
    return out


def _order(pair: tuple[Any, int]) -> tuple[int, Any, int]:
    ip, port = pair
    return ip.version, ip, port


class DNSWatch:
    """Keeps a client's servers in step with the DNS names of its list (``client.dns``):
    ``refresh()`` looks them up once and applies a changed list; a daemon thread refreshes every
    ``interval`` seconds until ``stop()`` (it holds the client only weakly)."""

    def __init__(
        self,
        specs: Sequence[Any],
        interval: float | None = None,
        nameservers: Iterable[str] | None = None,
        timeout: float = LOOKUP_TIMEOUT,
    ) -> None:
        if interval is None:
            interval = float(os.environ.get("FASTMC_DNS_REFRESH", "").strip() or DEFAULT_REFRESH)
        if nameservers is None:
            env = os.environ.get("FASTMC_DNS_NAMESERVERS", "")
            nameservers = [n.strip() for n in env.split(",") if n.strip()] or None
        interval = float(interval)
        if not interval > 0:
            raise ValueError("dns_refresh must be positive, not %r" % (interval,))
        if isinstance(nameservers, str):
            raise TypeError("dns_nameservers takes a list of addresses, not one string")
        for spec in specs:
            if is_dns(spec):
                _parse(spec)
        self.specs = list(specs)
        self.interval = interval
        self.nameservers = list(nameservers) if nameservers else None
        self._resolver = _Resolver(self.nameservers, timeout)
        self.servers: list[Any] = []
        """The list applied last: every server, each name replaced by its servers."""
        self.lookups = 0
        self.failures = 0
        self.changes = 0
        self.last_error: str | None = None
        self._last_success = 0.0
        self._client: Callable[[], Any] = lambda: None
        self._apply: Callable[[Any, list[Any]], Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def resolve(self) -> list[Any]:
        """Look every name up now (counted); raises :class:`DNSError`."""
        self.lookups += 1
        try:
            servers = resolve(self._resolver, self.specs)
        except DNSError as e:
            self.failures += 1
            self.last_error = str(e)
            raise
        self._last_success = time.monotonic()
        return servers

    def first(self) -> list[Any]:
        """The list to construct the client with."""
        self.servers = self.resolve()
        return self.servers

    def follow(self, client: Any, apply: Callable[[Any, list[Any]], Any]) -> None:
        """Refresh ``client`` with ``apply(client, servers)`` (its class's native
        ``set_servers`` on translated specs) from now on, on a daemon thread."""
        self._client = weakref.ref(client)
        self._apply = apply
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fastmc-dns", daemon=True)
            self._thread.start()

    def refresh(self) -> bool:
        """Look the names up and apply a changed list. A failure is logged (WARNING), counted
        and the current list kept; returns whether the list was set."""
        with self._lock:
            try:
                servers = self.resolve()
            except DNSError as e:
                LOGGER.warning("DNS lookup failed, keeping %d servers: %s", len(self.servers), e)
                return False
            client = self._client()
            if servers == self.servers or client is None or self._apply is None:
                return False
            added, removed = self._apply(client, servers)
            self.servers = servers
            self.changes += 1
        LOGGER.info("DNS: %d servers (added %s, removed %s)", len(servers), added, removed)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._client() is None:
                return
            self.refresh()

    def stop(self) -> None:
        """Stop refreshing (a lookup in progress finishes on its own, within its timeout)."""
        self._stop.set()
        self._thread = None

    def metrics(self) -> dict[str, Any]:
        """Lookups, failures, list changes, the last error, the seconds since the last lookup
        that succeeded, and how many servers the names stand for now."""
        return {
            "lookups": self.lookups,
            "failures": self.failures,
            "changes": self.changes,
            "servers": len(self.servers),
            "last_error": self.last_error,
            "since_success": time.monotonic() - self._last_success,
        }
