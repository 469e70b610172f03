"""pylibmc's test helper: a client for the memcached named by the environment."""

import os
import socket

from . import _fastmc
from .client import Client

__all__ = ["NotAliveError", "is_alive", "make_test_client"]


class NotAliveError(Exception):
    template = "test memcached %s:%s not alive; consider setting MEMCACHED_HOST and/or MEMCACHED_PORT"

    def __init__(self, svr):
        self.server = svr

    def __str__(self):
        return self.template % self.server


def is_alive(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(b"version\r\n")
            return s.recv(1024).startswith(b"VERSION ")
    except OSError:
        return False


def make_test_client(cls=Client, env=None, server_type="tcp", host="127.0.0.1", port=11211, **kwds):
    """Make a client for the test server given by ``MEMCACHED_TYPE/HOST/PORT``."""
    if env is None:
        env = os.environ
    server_type = env.get("MEMCACHED_TYPE", server_type)
    host = env.get("MEMCACHED_HOST", host)
    port = env.get("MEMCACHED_PORT", port)
    if server_type != "tcp":
        raise NotImplementedError(server_type)
    if not is_alive(host, port):
        raise NotAliveError((host, port))
    return cls([(_fastmc.server_type_tcp, host, int(port))], **kwds)
