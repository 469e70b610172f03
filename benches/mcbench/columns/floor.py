"""The floor: raw sockets from Python, no parsing.

The floor is the practical limit for a batch from Python: one sendall of N commands followed by a
no-op marker command, then recv until the marker's reply comes back, with the requests built in
Python inside the clock from the same str keys and bytes values the clients get. Its text variant
speaks set/get/delete (pylibmc's default protocol), its meta variant ms/mg/md, with `mn` as the
marker (`version` before memcached 1.6). The references built on it (the bound, the arguments
and results alone) are in `bound.py`.
"""

from __future__ import annotations

import contextlib
import select
import socket
from typing import Any

from ..servers import server_command, split_addr
from .base import Column


def _connect(addr: str) -> socket.socket:
    s = socket.create_connection(split_addr(addr))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _done(parts: list, chunk: bytes, suffix: bytes) -> bool:
    if chunk.endswith(suffix):
        return True
    return len(chunk) < len(suffix) and b"".join(parts[-3:]).endswith(suffix)


def roundtrip(sock: socket.socket, data: bytes, suffix: bytes) -> bytes:
    """Blocking: one sendall, then recv until the reply ends with suffix (small requests only)."""
    sock.sendall(data)
    chunk = sock.recv(262144)
    if chunk.endswith(suffix):
        return chunk
    parts = [chunk]
    while True:
        if not chunk:
            raise ConnectionError("server closed the connection")
        chunk = sock.recv(262144)
        parts.append(chunk)
        if _done(parts, chunk, suffix):
            return b"".join(parts)


def drive(socks: list, blobs: list, suffixes: list) -> list:
    """Non-blocking: send every blob to its socket and drain all replies at once (poll loop), so
    no batch can deadlock on full socket buffers and three servers work in parallel."""
    poller = select.poll()
    state = {}
    for s, blob, suffix in zip(socks, blobs, suffixes):
        view = memoryview(blob)
        try:
            n = s.send(view)
        except BlockingIOError:
            n = 0
        view = view[n:]
        fd = s.fileno()
        state[fd] = [s, view, [], suffix]
        poller.register(fd, select.POLLIN | (select.POLLOUT if len(view) else 0))
    pending = len(state)
    while pending:
        for fd, ev in poller.poll(10_000):
            st = state[fd]
            s = st[0]
            if ev & select.POLLOUT and len(st[1]):
                try:
                    n = s.send(st[1])
                except BlockingIOError:
                    n = 0
                st[1] = st[1][n:]
                if not len(st[1]):
                    poller.modify(fd, select.POLLIN)
            if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                try:
                    chunk = s.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise ConnectionError("server closed the connection")
                st[2].append(chunk)
                if _done(st[2], chunk, st[3]):
                    poller.unregister(fd)
                    pending -= 1
    return [b"".join(state[s.fileno()][2]) for s in socks]


class Floor(Column):
    """Raw pipelined socket batch from Python, the floor the targets are measured against: one
    sendall of N commands and a marker command, then recv until the marker's reply; no parsing.
    Text variant (set/get/delete, pylibmc's default protocol) and meta variant (ms/mg/md + mn).
    """

    kind = "floor"
    SMALL = 16384  # requests up to this size go through the blocking fast path (one server)

    def __init__(self, name: str, tag: str, servers: list, proto: str, meta_ok: bool) -> None:
        super().__init__(name, tag)
        self.proto = proto
        self.socks = [_connect(a) for a in servers]
        self.multi_server = len(self.socks) > 1
        if self.multi_server:
            for s in self.socks:
                s.setblocking(False)
        if meta_ok:
            self.marker, self.marker_reply = b"mn\r\n", b"MN\r\n"
        else:  # memcached < 1.6: version is the no-op; its reply is a constant for a server
            self.marker = b"version\r\n"
            self.marker_reply = server_command(servers[0], b"version\r\n")
        self.addrs = servers
        self.get = self.set = self.delete = self.incr = True  # loops below
        self.get_multi, self.set_multi, self.delete_multi = self._get_m, self._set_m, self._del_m
        self.set_multi_nr, self.delete_multi_nr = self._set_m_nr, self._del_m_nr
        self.set_nr = self.delete_nr = True
        self.sync_nr = self._sync
        self.threads_factory = self._threads

    # --- batches ---
    def _run(self, blobs: list, suffix: bytes) -> list:
        if not self.multi_server:
            s = self.socks[0]
            if len(blobs[0]) <= self.SMALL:
                return [roundtrip(s, blobs[0], suffix)]
            s.setblocking(False)
            try:
                return drive(self.socks, blobs, [suffix])
            finally:
                s.setblocking(True)
        return drive(self.socks, blobs, [suffix] * len(blobs))

    def _parts(self, seq: list, start: int = 0) -> list:
        """`seq` dealt out to the servers in turn, as if it began at place `start` of a batch."""
        n = len(self.socks)
        return [seq] if n == 1 else [seq[(i - start) % n :: n] for i in range(n)]

    # Each batch: the requests for every server (built in Python), then one _run.
    def _set_blobs(self, mapping: dict, quiet: bool, start: int = 0) -> list:
        if self.proto == "text":
            fmt = b"set %s 0 0 %d noreply\r\n%s\r\n" if quiet else b"set %s 0 0 %d\r\n%s\r\n"
        else:
            fmt = b"ms %s %d q\r\n%s\r\n" if quiet else b"ms %s %d\r\n%s\r\n"
        return [
            b"".join([fmt % (k.encode(), len(v), v) for k, v in part]) + self.marker
            for part in self._parts(list(mapping.items()), start)
        ]

    def _get_blobs(self, keys: list) -> list:
        cmd, opts = (b"get ", b"\r\n") if self.proto == "text" else (b"mg ", b" v f\r\n")
        return [
            b"".join([cmd + k.encode() + opts for k in p]) + self.marker for p in self._parts(keys)
        ]

    def _del_blobs(self, keys: list, quiet: bool, start: int = 0, tokens: bool = False) -> list:
        """Deletes of `keys` (from place `start` of a batch); `tokens`: each quiet meta delete
        with an opaque token, its place in its server's part."""
        if self.proto == "text":
            pre, post = b"delete ", b" noreply\r\n" if quiet else b"\r\n"
        else:
            pre, post = b"md ", b" q\r\n" if quiet else b"\r\n"
        if tokens and quiet and self.proto == "meta":
            return [
                b"".join([b"md %s q O%d\r\n" % (k.encode(), i) for i, k in enumerate(p)])
                + self.marker
                for p in self._parts(keys, start)
            ]
        return [
            b"".join([pre + k.encode() + post for k in p]) + self.marker
            for p in self._parts(keys, start)
        ]

    def _set_m(self, mapping: dict) -> list:
        return self._run(self._set_blobs(mapping, False), self.marker_reply)

    def _set_m_nr(self, mapping: dict) -> list:
        return self._run(self._set_blobs(mapping, True), self.marker_reply)

    def _get_m(self, keys: list) -> tuple:
        return self._parts(keys), self._run(self._get_blobs(keys), self.marker_reply)

    def _del_m(self, keys: list) -> list:
        return self._run(self._del_blobs(keys, False), self.marker_reply)

    def _del_m_nr(self, keys: list) -> list:
        return self._run(self._del_blobs(keys, True), self.marker_reply)

    # --- loops of single round trips (one server) ---
    def loop_set(self, items: list) -> int:
        s = self.socks[0]
        if self.proto == "text":
            for k, v in items:
                roundtrip(s, b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v), b"\r\n")
        else:
            for k, v in items:
                roundtrip(s, b"ms %s %d\r\n%s\r\n" % (k.encode(), len(v), v), b"\r\n")
        return 0

    def loop_get(self, items: list) -> int:
        s = self.socks[0]
        bad = 0
        if self.proto == "text":
            for k, v in items:
                if v not in roundtrip(s, b"get " + k.encode() + b"\r\n", b"END\r\n"):
                    bad += 1
        else:
            m, mr = self.marker, self.marker_reply
            for k, v in items:
                if v not in roundtrip(s, b"mg " + k.encode() + b" v f\r\n" + m, mr):
                    bad += 1
        return bad

    def loop_delete(self, keys: list) -> int:
        s = self.socks[0]
        cmd = b"delete " if self.proto == "text" else b"md "
        for k in keys:
            roundtrip(s, cmd + k.encode() + b"\r\n", b"\r\n")
        return 0

    def loop_incr(self, key: str, n: int) -> Any:
        s = self.socks[0]
        if self.proto == "text":
            cmd = b"incr " + key.encode() + b" 1\r\n"
            for _ in range(n):
                roundtrip(s, cmd, b"\r\n")
        else:
            cmd = b"ma " + key.encode() + b" v\r\n" + self.marker
            for _ in range(n):
                roundtrip(s, cmd, self.marker_reply)
        return None

    def loop_set_nr(self, items: list) -> int:
        s = self.socks[0]
        fmt = (
            b"set %s 0 0 %d noreply\r\n%s\r\n" if self.proto == "text" else b"ms %s %d q\r\n%s\r\n"
        )
        for k, v in items:
            s.sendall(fmt % (k.encode(), len(v), v))
        roundtrip(s, self.marker, self.marker_reply)  # the floor waits until all are applied
        return 0

    def loop_delete_nr(self, keys: list) -> int:
        s = self.socks[0]
        pre, post = (b"delete ", b" noreply\r\n") if self.proto == "text" else (b"md ", b" q\r\n")
        for k in keys:
            s.sendall(pre + k.encode() + post)
        roundtrip(s, self.marker, self.marker_reply)
        return 0

    def _sync(self) -> None:
        if not self.multi_server:
            roundtrip(self.socks[0], self.marker, self.marker_reply)
        else:
            drive(
                self.socks, [self.marker] * len(self.socks), [self.marker_reply] * len(self.socks)
            )

    # --- checks (never timed) ---
    def stored_ok(self, res: Any, n: int) -> bool:
        token = b"STORED\r\n" if self.proto == "text" else b"HD\r\n"
        return sum(r.count(token) for r in res) == n

    def deleted_ok(self, res: Any, n: int) -> bool:
        token = b"DELETED\r\n" if self.proto == "text" else b"HD\r\n"
        return sum(r.count(token) for r in res) == n

    def nr_ok(self, res: Any, n: int) -> bool:
        return all(r == self.marker_reply for r in res)

    def decode_get(self, res: Any, keys: list) -> dict:
        parts, replies = res
        out: dict = {}
        for part, buf in zip(parts, replies):
            lines = buf.split(b"\r\n")
            i = 0
            if self.proto == "text":  # VALUE lines, each with its data, between END lines
                while i < len(lines):
                    if lines[i].startswith(b"VALUE "):
                        out[lines[i].split()[1].decode()] = lines[i + 1]
                        i += 1
                    i += 1
            else:  # one reply per command, in order
                for k in part:
                    if lines[i].startswith(b"VA "):
                        out[k] = lines[i + 1]
                        i += 2
                    else:
                        i += 1
        return out

    def read_counter(self, key: str) -> int:
        parts, replies = self._get_m([key])
        v = self.decode_get((parts, replies), [key]).get(key)
        return int(v) if v is not None else -1

    def set_counter(self, key: str) -> None:
        self._set_m({key: b"0"})

    def _threads(self) -> tuple:
        addr, proto = self.addrs[0], self.proto
        marker, marker_reply = self.marker, self.marker_reply

        def per_thread() -> tuple:
            s = _connect(addr)
            if proto == "text":

                def get(k: str) -> bytes:
                    r = roundtrip(s, b"get " + k.encode() + b"\r\n", b"END\r\n")
                    return r[r.index(b"\r\n") + 2 : -7]  # only to let the worker check it

                def set_(k: str, v: bytes) -> bool:
                    return (
                        roundtrip(s, b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v), b"\r\n")
                        == b"STORED\r\n"
                    )
            else:

                def get(k: str) -> bytes:
                    r = roundtrip(s, b"mg " + k.encode() + b" v f\r\n" + marker, marker_reply)
                    return r[r.index(b"\r\n") + 2 : -6]

                def set_(k: str, v: bytes) -> bool:
                    return (
                        roundtrip(s, b"ms %s %d\r\n%s\r\n" % (k.encode(), len(v), v), b"\r\n")
                        == b"HD\r\n"
                    )

            return get, set_

        return per_thread, "one raw socket per thread"

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(Exception):
                s.close()
