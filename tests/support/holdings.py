"""What each server holds, read and written around the clients with raw text commands (the
num_replicas tests inspect every server directly)."""

from __future__ import annotations

import socket


def raw(addr: str, command: bytes, end: bytes = b"END\r\n") -> bytes:
    """The server's answer to a raw text `command`, up to `end` (or the connection's close)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(command)
        buf = b""
        while not buf.endswith(end):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


def contents(addrs: list[str], keys: list[str]) -> list[dict[str, bytes]]:
    """Per server, the raw value of each of `keys` it holds (read with a text get)."""
    out = []
    for a in addrs:
        lines = raw(a, b"get " + " ".join(keys).encode() + b"\r\n").split(b"\r\n")
        held = {}
        for i, line in enumerate(lines):
            if line.startswith(b"VALUE "):
                held[line.split()[1].decode()] = lines[i + 1]
        out.append(held)
    return out


def put(addrs: list[str], keys: list[str], value: bytes) -> None:
    """Store `value` under each key on every server of `addrs`."""
    for a in addrs:
        for k in keys:
            raw(a, b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(value), value), end=b"\r\n")


def flush(addrs: list[str]) -> None:
    for a in addrs:
        raw(a, b"flush_all\r\n", end=b"\r\n")


def ttls(addr: str, keys: list[str]) -> dict[str, int]:
    """The seconds each of `keys` has left on `addr` (meta `mg <key> t`; -1: no expiry), for
    the keys it holds."""
    command = b"".join(b"mg %s k t\r\n" % k.encode() for k in keys) + b"mn\r\n"
    left = {}
    for line in raw(addr, command, end=b"MN\r\n").split(b"\r\n"):
        if line.startswith(b"HD "):
            flags = {f[:1]: f[1:] for f in line.split()[1:]}
            left[flags[b"k"].decode()] = int(flags[b"t"])
    return left
