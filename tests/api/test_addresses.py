"""Server addresses beyond host:port: a UNIX socket path and an IPv6 address in brackets, each
against a real memcached, with the server names get_stats reports for them."""

import socket

import fastmc
import pytest
from memcached import Memcached


def test_unix_socket(tmp_path):
    path = str(tmp_path / "mc.sock")
    proc = Memcached(memory_mb=16, unix_path=path)
    try:
        mc = fastmc.Client([path])
        assert mc.set("u", b"x")
        assert mc.get("u") == b"x"
        name = mc.get_stats()[0][0]
        assert name == (path + ":0 (0)").encode()
    finally:
        proc.stop()


def test_ipv6_server_spec():
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6 loopback")
    proc = Memcached(memory_mb=16, host="::1")
    port = proc.port
    try:
        mc = fastmc.Client(["[::1]:%d" % port])
        assert mc.set("v6", "yes")
        assert mc.get("v6") == "yes"
        assert mc.get_stats()[0][0] == ("::1:%d (0)" % port).encode()
    finally:
        proc.stop()
