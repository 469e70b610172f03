"""pylibmc's test helper: a client for the memcached named by the environment."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from . import _fastmc
from .client import Client

__all__ = ["NotAliveError", "is_alive", "make_test_client"]


class NotAliveError(Exception):
    template = (
        "test memcached %s:%s not alive; consider setting MEMCACHED_HOST and/or MEMCACHED_PORT"
    )

    def __init__(self, svr: tuple[str, int | str]) -> None:
        self.server = svr

    def __str__(self) -> str:
        return self.template % self.server


def is_alive(host: str, port: int | str) -> bool:
    try:
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(b"version\r\n")
            return s.recv(1024).startswith(b"VERSION ")
    except OSError:
        return False


def make_test_client(
    cls: type[Client] = Client,
    env: Mapping[str, str] | None = None,
    server_type: str = "tcp",
    host: str = "127.0.0.1",
    port: int | str = 11211,
    **kwds: Any,
) -> Client:
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
