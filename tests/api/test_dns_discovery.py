"""DNS discovery (docs/operations.md, DNS discovery): `dns+NAME:PORT` and `dnssrv+NAME` server
entries, against Debian's dnsmasq on loopback serving A and SRV records for memcached servers on
127.0.0.1-127.0.0.4 (pods of a StatefulSet, as a headless Service's DNS shows them): scale up,
scale down, a pod replaced, the DNS server down and back, an empty, a garbage, a huge and a
never-coming answer; blocking and asyncio clients."""

import asyncio
import logging
import socket
import subprocess
import sys
import threading
import time

import fastmc
import fastmc.aio
import pytest
from dnsmasq import LOOPBACKS as IPS
from fastmc.dnsdiscovery import MAX_RECORDS, DNSError
from memcached import Memcached, free_port

KEYS = ["key:%d" % i for i in range(300)]


def addrs(port, *which):
    return ["%s:%d" % (IPS[i], port) for i in which]


def placement(mc):
    """Which server each key maps to, by address (the ring, as the client applies it)."""
    servers = mc.dns.servers if mc.dns is not None else mc.addresses
    return {k: servers[mc.hash(k)] for k in KEYS}


def make_client(kind, servers, **kw):
    if kind == "blocking":
        return fastmc.Client(servers, **kw)
    return fastmc.aio.Client(servers, **kw)


@pytest.fixture(params=["blocking", "aio"])
def kind(request):
    return request.param


def pod_hosts(*which):
    return [("mc.test", IPS[i]) for i in which]


def test_a_name_stands_for_every_address_and_builds_the_explicit_ring(dns, pods, kind):
    dns.set_hosts(pod_hosts(2, 0, 1), wait=("mc.test", set(IPS[:3])))
    for behaviors in ({}, {"ketama": True}):
        mc = make_client(
            kind, ["dns+mc.test:%d" % pods], behaviors=behaviors, dns_nameservers=[dns.nameserver]
        )
        assert mc.addresses == ["dns+mc.test:%d" % pods]
        # sorted, whatever order the answer had: every client builds the same ring
        assert mc.dns.servers == addrs(pods, 0, 1, 2)
        explicit = fastmc.Client(addrs(pods, 0, 1, 2), behaviors=behaviors)
        assert placement(mc) == placement(explicit)
    if kind == "blocking":
        mc.set_multi({k: k for k in KEYS})
        assert mc.get_multi(KEYS) == {k: k for k in KEYS}
        for addr in addrs(pods, 0, 1, 2):  # every pod holds some keys
            assert fastmc.Client([addr]).get_multi(KEYS)


def test_scale_up_down_and_a_replaced_pod_move_only_their_keys(dns, pods, kind):
    dns.set_hosts(pod_hosts(0, 1, 2), wait=("mc.test", set(IPS[:3])))
    mc = make_client(
        kind,
        ["dns+mc.test:%d" % pods],
        behaviors={"ketama": True},
        dns_nameservers=[dns.nameserver],
    )
    events = []
    for event in ("server_added", "server_removed"):
        mc.on(event, lambda server, what, detail: events.append((what, server)))
    before = placement(mc)
    assert mc.dns.refresh() is False  # nothing changed
    # scale up: the fourth pod takes only keys, and only its own share
    dns.set_hosts(pod_hosts(0, 1, 2, 3), wait=("mc.test", set(IPS)))
    assert mc.dns.refresh() is True
    after = placement(mc)
    new = addrs(pods, 3)[0]
    moved = {k for k in KEYS if after[k] != before[k]}
    assert moved and all(after[k] == new for k in moved)
    assert ("server_added", new) in events
    # scale down: only the removed pod's keys move
    dns.set_hosts(pod_hosts(0, 2, 3), wait=("mc.test", {IPS[0], IPS[2], IPS[3]}))
    assert mc.dns.refresh() is True
    gone = addrs(pods, 1)[0]
    down = placement(mc)
    assert all(down[k] == after[k] for k in KEYS if after[k] != gone)
    assert ("server_removed", gone) in events
    # a pod replaced (a new address): keys move off the old one and onto the new one only
    dns.set_hosts(pod_hosts(0, 1, 3), wait=("mc.test", {IPS[0], IPS[1], IPS[3]}))
    assert mc.dns.refresh() is True
    replaced = placement(mc)
    gone, new = addrs(pods, 2, 1)
    assert all(replaced[k] == down[k] for k in KEYS if down[k] != gone and replaced[k] != new)
    assert all(replaced[k] != gone for k in KEYS)
    assert mc.dns.servers == addrs(pods, 0, 1, 3)
    assert placement(mc) == placement(
        fastmc.Client(addrs(pods, 0, 1, 3), behaviors={"ketama": True})
    )
    m = mc.metrics()["dns"]
    assert m["changes"] == 3 and m["failures"] == 0 and m["servers"] == 3


def test_srv_records_give_targets_and_ports(dns, pods, kind):
    other = free_port()
    extra = Memcached(host=IPS[3], port=other)
    try:
        dns.set_hosts(
            [("pod%d.mc.test" % i, IPS[i]) for i in range(4)], wait=("pod3.mc.test", {IPS[3]})
        )
        dns.set_srv(
            [("_memcache._tcp.mc.test", "pod%d.mc.test" % i, pods) for i in (2, 0)]
            + [("_memcache._tcp.mc.test", "pod3.mc.test", other)]
        )
        mc = make_client(kind, ["dnssrv+_memcache._tcp.mc.test"], dns_nameservers=[dns.nameserver])
        want = [*addrs(pods, 0, 2), "%s:%d" % (IPS[3], other)]
        assert mc.dns.servers == want
        if kind == "blocking":
            mc.set_multi({k: k for k in KEYS})
            assert fastmc.Client(["%s:%d" % (IPS[3], other)]).get_multi(KEYS)
        dns.set_srv([("_memcache._tcp.mc.test", "pod1.mc.test", pods)])
        assert mc.dns.refresh() is True
        assert mc.dns.servers == addrs(pods, 1)
    finally:
        extra.stop()


def test_failures_keep_the_last_list_and_are_counted_and_logged(dns, pods, kind, caplog):
    dns.set_hosts(pod_hosts(0, 1), wait=("mc.test", set(IPS[:2])))
    mc = make_client(kind, ["dns+mc.test:%d" % pods], dns_nameservers=[dns.nameserver])
    kept = addrs(pods, 0, 1)
    caplog.set_level(logging.WARNING, logger="fastmc")
    # the DNS server down
    dns.stop()
    assert mc.dns.refresh() is False
    assert mc.dns.servers == kept
    assert "DNS lookup failed, keeping 2 servers" in caplog.text
    # back
    dns.start()
    assert mc.dns.refresh() is False  # the same list
    # an empty answer: the name is gone (NXDOMAIN)
    dns.set_hosts([("other.test", IPS[0])], wait=("mc.test", set()))
    assert mc.dns.refresh() is False and mc.dns.servers == kept
    # more records than the cap
    many = [("mc.test", "127.1.%d.%d" % (i // 250, i % 250 + 1)) for i in range(MAX_RECORDS + 1)]
    dns.set_hosts(many, wait=("ready.test", {"127.0.0.1"}))
    assert mc.dns.refresh() is False and mc.dns.servers == kept
    assert "more than %d" % MAX_RECORDS in mc.metrics()["dns"]["last_error"]
    m = mc.metrics()["dns"]
    assert m["failures"] == 3 and m["changes"] == 0 and m["lookups"] == 5
    # the client served throughout
    if kind == "blocking":
        assert mc.set("k", "v") and mc.get("k") == "v"


class FakeDNS:
    """A DNS server on loopback UDP that answers every query with `reply(query)`: garbage, or
    nothing at all (None)."""

    def __init__(self, reply):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.reply = reply
        self.queries = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def nameserver(self):
        return "127.0.0.1:%d" % self.sock.getsockname()[1]

    def _serve(self):
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            if peer is None:  # PyPy: the socket was closed under the call
                return
            self.queries.set()
            out = self.reply(data)
            if out is not None:
                try:
                    self.sock.sendto(out, peer)
                except OSError:  # closed while the reply was made (the test is over)
                    return

    def close(self):
        self.sock.close()


def test_a_garbage_answer_is_a_counted_failure(dns, pods):
    dns.set_hosts(pod_hosts(0), wait=("mc.test", {IPS[0]}))
    mc = fastmc.Client(["dns+mc.test:%d" % pods], dns_nameservers=[dns.nameserver])
    for garbage in (
        lambda q: b"\xff" * 3,
        lambda q: q[:2] + b"\x81\x80" + b"\x00\x01\x00\x05" + b"\x00" * 4 + q[12:] + b"\xc0" * 40,
    ):
        fake = FakeDNS(garbage)
        mc.dns._resolver = type(mc.dns._resolver)([fake.nameserver], 0.5)
        try:
            assert mc.dns.refresh() is False
        finally:
            fake.close()
        assert mc.dns.servers == addrs(pods, 0)
    assert mc.metrics()["dns"]["failures"] == 2


def test_a_dns_server_that_never_answers_blocks_no_cache_call(dns, pods):
    dns.set_hosts(pod_hosts(0), wait=("mc.test", {IPS[0]}))
    mc = fastmc.Client(["dns+mc.test:%d" % pods], dns_nameservers=[dns.nameserver])
    mc.set("k", "v")
    silent = FakeDNS(lambda q: None)
    mc.dns._resolver = type(mc.dns._resolver)([silent.nameserver], 2.0)
    refresh = threading.Thread(target=mc.dns.refresh)
    refresh.start()
    try:
        assert silent.queries.wait(5)
        # the lookup waits for its timeout; calls, and another server list, do not wait for it
        for _ in range(200):
            assert mc.get("k") == "v"
        assert refresh.is_alive()
    finally:
        refresh.join()
        silent.close()
    assert mc.dns.servers == addrs(pods, 0)
    assert "Timeout" in mc.metrics()["dns"]["last_error"]


def test_construction_needs_the_name_to_resolve(dns, pods):
    with pytest.raises(DNSError, match=r"dns\+nowhere\.test:1: NXDOMAIN"):
        fastmc.Client(["dns+nowhere.test:1"], dns_nameservers=[dns.nameserver])
    with pytest.raises(ValueError, match="NAME:PORT"):
        fastmc.Client(["dns+mc.test:notaport"], dns_nameservers=[dns.nameserver])
    with pytest.raises(ValueError, match="SRV records carry the ports"):
        fastmc.Client(["dnssrv+_x._tcp.mc.test:11211"], dns_nameservers=[dns.nameserver])
    with pytest.raises(ValueError, match="positive"):
        fastmc.Client(["dns+mc.test:1"], dns_refresh=0, dns_nameservers=[dns.nameserver])
    # a missing dnspython says which extra brings it
    code = (
        "import sys; sys.modules['dns'] = None\n"
        "import fastmc\n"
        "try:\n"
        "    fastmc.Client(['dns+mc.test:1'])\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'fastmc[dns]'" in out.stdout


def test_plain_and_dns_entries_mix_and_set_servers_follows_names(dns, pods):
    dns.set_hosts(pod_hosts(1, 2), wait=("mc.test", set(IPS[1:3])))
    mc = fastmc.Client(addrs(pods, 0), dns_nameservers=[dns.nameserver])
    assert mc.dns is None and "dns" not in mc.metrics()
    mc.set_servers([addrs(pods, 0)[0], "dns+mc.test:%d" % pods, addrs(pods, 2)[0]])
    # in the list's order, each server once
    assert mc.dns.servers == addrs(pods, 0, 1, 2)
    assert mc.addresses == [addrs(pods, 0)[0], "dns+mc.test:%d" % pods, addrs(pods, 2)[0]]
    watch = mc.dns
    # a name that does not resolve changes nothing
    with pytest.raises(DNSError):
        mc.set_servers(["dns+gone.test:1"])
    assert mc.dns is watch and mc.dns.servers == addrs(pods, 0, 1, 2)
    mc.set_servers(addrs(pods, 3))
    assert mc.dns is None and watch._stop.is_set() and "dns" not in mc.metrics()


def test_the_names_are_looked_up_again_in_the_background(dns, pods, kind):
    dns.set_hosts(pod_hosts(0), wait=("mc.test", {IPS[0]}))
    mc = make_client(
        kind, ["dns+mc.test:%d" % pods], dns_refresh=0.05, dns_nameservers=[dns.nameserver]
    )
    dns.set_hosts(pod_hosts(0, 1), wait=("mc.test", set(IPS[:2])))
    deadline = time.monotonic() + 20
    while mc.dns.servers != addrs(pods, 0, 1) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mc.dns.servers == addrs(pods, 0, 1)
    watch = mc.dns
    if kind == "aio":

        async def main():
            await mc.set("k", "v")
            assert await mc.get("k") == "v"
            await mc.close()

        asyncio.run(main())
        assert watch._stop.is_set()


def test_the_environment_names_the_nameservers_for_frameworks(dns, pods, monkeypatch):
    """Code that builds its own client (Flask-Caching, the CLI) gets the nameservers and the
    refresh from FASTMC_DNS_NAMESERVERS and FASTMC_DNS_REFRESH."""
    dns.set_hosts(pod_hosts(0, 1), wait=("mc.test", set(IPS[:2])))
    monkeypatch.setenv("FASTMC_DNS_NAMESERVERS", dns.nameserver)
    monkeypatch.setenv("FASTMC_DNS_REFRESH", "7.5")
    mc = fastmc.Client(["dns+mc.test:%d" % pods])
    assert mc.dns.servers == addrs(pods, 0, 1) and mc.dns.interval == 7.5
    mc.set("cli", "v")
    out = subprocess.run(
        [sys.executable, "-m", "fastmc", "--servers", "dns+mc.test:%d" % pods, "get", "cli"],
        capture_output=True,
        check=True,
    )
    assert out.stdout == b"VALUE cli 16 1\nv\n"


def test_aaaa_records_follow_the_a_records_in_brackets(dns, pods):
    dns.set_hosts(
        [("mc6.test", "::1"), ("mc6.test", IPS[1]), ("mc6.test", IPS[0])],
        wait=("mc6.test", {IPS[0], IPS[1]}),
    )
    mc = fastmc.Client(["dns+mc6.test:%d" % pods], dns_nameservers=[dns.nameserver])
    assert mc.dns.servers == [*addrs(pods, 0, 1), "[::1]:%d" % pods]
