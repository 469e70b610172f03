"""The memcached servers of a run: throwaway ones (through the launcher the tests use too, in
tests/support/memcached.py) or given ones, and what a server says about itself."""

from __future__ import annotations

import os
import socket
import sys

from .settings import REPO_DIR

sys.path.append(os.path.join(REPO_DIR, "tests", "support"))  # last: it shadows nothing
from memcached import Memcached  # the repository's shared launcher

# The benchmark's servers: memory for the bulk load, two worker threads, room for the
# connections of every client and thread, and items up to 32 MiB (memcached's default limit,
# 1 MiB, refuses a 1 MiB value with its key and header; `large` stores values of 1 and 16 MiB).
# Items over 512 KiB are stored in chunks either way (memcached's slab_chunk_max does not follow
# -I): small items are stored as before.
MEMORY_MB = 1024
THREADS = 2
CONNECTIONS = 4096
ITEM_SIZE_MAX = "32m"


def start_memcached() -> Memcached:
    """A throwaway memcached on a free port of 127.0.0.1, killed with this process."""
    return Memcached(
        "-I", ITEM_SIZE_MAX, memory_mb=MEMORY_MB, threads=THREADS, connections=CONNECTIONS
    )


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "127.0.0.1", int(port)


def server_command(addr: str, line: bytes) -> bytes:
    """One command on a fresh connection; returns the reply up to END/MN/VERSION or an error."""
    with socket.create_connection(split_addr(addr), timeout=5) as s:
        s.sendall(line)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return buf
            buf += chunk
            if buf.endswith((b"END\r\n", b"MN\r\n", b"ERROR\r\n")) or buf.startswith(b"VERSION "):
                return buf


def server_info(addr: str) -> dict:
    info: dict = {"address": addr}
    info["version"] = server_command(addr, b"version\r\n").decode().strip()
    info["meta"] = server_command(addr, b"mn\r\n") == b"MN\r\n"
    stats = server_command(addr, b"stats\r\n").decode(errors="replace")
    for line in stats.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT" and parts[1] in ("limit_maxbytes", "threads"):
            info[parts[1]] = int(parts[2])
    return info


def item_size_max(addr: str) -> int | None:
    """The largest item the server stores (`stats settings`), None if it does not say."""
    for line in server_command(addr, b"stats settings\r\n").decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[:2] == ["STAT", "item_size_max"]:
            return int(parts[2])
    return None
