"""Cluster auto-discovery (``fastmc.autodiscovery``, ``fastmc.autoconf``) against an in-process
configuration endpoint (``config_endpoint.ConfigEndpoint``) in front of real memcached servers:
both answer formats, malformed answers refused with a clear error and the old list kept, a
refresh applied only when the version or the nodes change, and stopped by ``close()``."""

import asyncio
import logging
import time

import fastmc
import fastmc.aio
import pytest
from config_endpoint import ConfigEndpoint
from fastmc import autoconf
from fastmc.autodiscovery import (
    AutoDiscovery,
    ClusterConfig,
    DiscoveryError,
    MalformedConfig,
    NoAutoconfFound,
    discover,
    discover_aio,
    fetch_config,
    parse_cluster_config,
)

# -- parsing ---------------------------------------------------------------------------------


def test_the_elasticache_body_parses_with_ips_preferred():
    body = b"12\nmc1.cache.amazonaws.com|10.0.0.1|11211 mc2.cache.amazonaws.com||11212\n"
    assert parse_cluster_config(body) == ClusterConfig(
        12, ("10.0.0.1:11211", "mc2.cache.amazonaws.com:11212")
    )
    assert parse_cluster_config("3\nh|::1|11211\n").servers == ("[::1]:11211",)
    assert parse_cluster_config("7\r\nlocalhost|127.0.0.1|11211").version == 7


@pytest.mark.parametrize(
    "body,message",
    [
        (b"", "a version line and a node line"),
        (b"12\n", "a version line and a node line"),
        (b"12\nh|1.2.3.4|11211\nextra\n", "a version line and a node line"),
        (b"v1\nh|1.2.3.4|11211\n", "version 'v1' is not a number"),
        (b"12\n \n", "a version line and a node line"),
        (b"12\nh|1.2.3.4\n", "is not host|ip|port"),
        (b"12\nh|1.2.3.4|11211|x\n", "is not host|ip|port"),
        (b"12\nh|1.2.3.4|port\n", "no valid port"),
        (b"12\nh|1.2.3.4|0\n", "no valid port"),
        (b"12\nh|1.2.3.4|70000\n", "no valid port"),
        (b"12\n||11211\n", "neither a host name nor an IP"),
        (b"12\nh|1.2.3.4/x|11211\n", "invalid address"),
        (b"12\n\xff|1.2.3.4|11211\n", "not ASCII"),
    ],
)
def test_malformed_bodies_are_refused_clearly(body, message):
    with pytest.raises(MalformedConfig, match=message):
        parse_cluster_config(body)


def test_malformed_is_a_value_error_and_a_discovery_error():
    assert issubclass(MalformedConfig, ValueError)
    assert issubclass(MalformedConfig, DiscoveryError)
    assert issubclass(NoAutoconfFound, DiscoveryError)
    assert autoconf.NoAutoconfFound is NoAutoconfFound


# -- fetching ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["config", "legacy"])
def test_both_answer_formats(servers, mode):
    with ConfigEndpoint(servers[:2], version=4, mode=mode) as ep:
        assert fetch_config(ep.address) == ClusterConfig(4, tuple(servers[:2]))
        requests = ep.take()
    assert requests.startswith(b"config get cluster\r\n")
    if mode == "legacy":
        assert requests.endswith(b"get AmazonElastiCache:cluster\r\n")


def test_no_configuration_at_all_raises_no_autoconf_found(servers):
    with ConfigEndpoint(servers, mode="none") as ep:
        with pytest.raises(NoAutoconfFound):
            fetch_config(ep.address)
        with pytest.raises(NoAutoconfFound):
            autoconf.elasticache(address=ep.address)


@pytest.mark.parametrize(
    "raw,error,message",
    [
        (b"CONFIG cluster 0 4\r\n12\nx\r\nEND\r\n", MalformedConfig, "host|ip|port"),
        (b"CONFIG cluster 0 3\r\n12\nh|1.2.3.4|1\r\nEND\r\n", MalformedConfig, "not closed by END"),
        (b"CONFIG cluster zero\r\n", MalformedConfig, "unexpected answer"),
        (b"HELLO\r\n", MalformedConfig, "unexpected answer"),
        (b"SERVER_ERROR out of memory\r\n", DiscoveryError, "SERVER_ERROR out of memory"),
    ],
)
def test_malformed_answers_are_refused_clearly(servers, raw, error, message):
    with ConfigEndpoint(servers) as ep:
        ep.raw = raw
        with pytest.raises(error, match=message):
            fetch_config(ep.address)


def test_an_endpoint_that_closes_or_hangs_fails_within_the_timeout(servers):
    with ConfigEndpoint(servers) as ep:
        ep.raw = b"CONFIG cluster 0 100\r\n12\n"  # and then nothing
        t = time.monotonic()
        with pytest.raises(OSError):  # socket.timeout
            fetch_config(ep.address, timeout=0.3)
        assert time.monotonic() - t < 2
    with pytest.raises(ValueError, match="host:port"):
        fetch_config("no-port")


def test_pylibmc_autoconf_entry_point_reads_the_legacy_key(server):
    mc = fastmc.Client([server.address])
    host, port = server.address.split(":")
    mc.set("AmazonElastiCache:cluster", b"12\nlocalhost|%s|%s" % (host.encode(), port.encode()))
    try:
        client = autoconf.elasticache(address=server.address, config_key=b"cluster")
        assert client.addresses == [server.address]
        assert client.set("a", "b") and client.get("a") == "b"
    finally:
        mc.delete("AmazonElastiCache:cluster")


# -- refreshing -------------------------------------------------------------------------------


def test_refresh_applies_changes_only_and_keeps_the_list_on_failure(servers, caplog):
    a, b, c = servers
    with ConfigEndpoint([a, b], version=1) as ep:
        mc = discover(ep.address, interval=3600)
        try:
            assert mc.addresses == [a, b]
            d = mc.discovery
            assert d is not None and d.config == ClusterConfig(1, (a, b))
            added = []
            mc.on("server_added", lambda s, e, _: added.append(s))
            assert d.refresh() is False  # same version, same nodes: nothing applied
            ep.set_nodes([a, b, c])
            with caplog.at_level(logging.INFO, logger="fastmc"):
                assert d.refresh() is True
            assert mc.addresses == [a, b, c] and added == [c]
            assert d.config.version == 2
            assert any("version 1 -> 2" in r.getMessage() for r in caplog.records)
            # A new version with the same nodes is recorded; set_servers changes nothing.
            ep.set_nodes([a, b, c])
            assert d.refresh() is True and added == [c]
            for raw in (b"CONFIG cluster 0 2\r\nxx\r\nEND\r\n", b"garbage\r\n"):
                ep.raw = raw
                caplog.clear()
                with caplog.at_level(logging.WARNING, logger="fastmc"):
                    assert d.refresh() is False
                assert mc.addresses == [a, b, c]
                (warning,) = [r for r in caplog.records if r.name == "fastmc"]
                assert "keeping 3 servers" in warning.getMessage()
                assert "MalformedConfig" in warning.getMessage()
            ep.raw = None
        finally:
            mc.close()
    assert d.refresh() is False  # the endpoint is gone: logged, list kept
    assert mc.addresses == [a, b, c]


def test_the_background_thread_follows_the_endpoint_and_close_stops_it(servers):
    a, b, _ = servers
    with ConfigEndpoint([a], version=1) as ep:
        with discover(ep.address, interval=0.02, behaviors={"ketama": True}) as mc:
            assert mc.get_behaviors()["ketama"]
            ep.set_nodes([a, b])
            deadline = time.monotonic() + 5
            while mc.addresses != [a, b] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert mc.addresses == [a, b]
            thread = mc.discovery._thread
        assert thread is not None and not thread.is_alive()
        served = ep.requests
        time.sleep(0.1)
        assert ep.requests == served  # no refresh after close()


def test_discovery_refuses_a_bad_interval(servers):
    mc = fastmc.Client(servers[:1])
    with pytest.raises(ValueError, match="interval"):
        AutoDiscovery(mc, "127.0.0.1:1", interval=0)


def test_aio_discovery_refreshes_in_a_task_and_close_stops_it(servers):
    a, b, c = servers

    async def main():
        with ConfigEndpoint([a, b], mode="legacy") as ep:
            mc = await discover_aio(ep.address, interval=0.02)
            loop_thread = []
            mc.on("server_removed", lambda s, e, d: loop_thread.append(s))
            assert mc.addresses == [a, b]
            assert await mc.set("k", "v")
            ep.set_nodes([c])
            deadline = time.monotonic() + 5
            while mc.addresses != [c] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert mc.addresses == [c]
            assert loop_thread == [a, b]
            assert await mc.get("k") is None  # c never had it
            task = mc.discovery._task
            await mc.close()
            await asyncio.sleep(0)
            assert task.done()

    asyncio.run(main())


def test_tls_context_follows_the_clients_tls_keywords():
    import ssl

    from fastmc.autodiscovery import tls_context

    assert tls_context() == (None, None)
    ctx, name = tls_context(tls=True, tls_server_name="cfg.example")
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert name == "cfg.example"
    with pytest.raises(ValueError, match="both tls_cert_file and tls_key_file"):
        tls_context(tls_cert_file="client.pem")
