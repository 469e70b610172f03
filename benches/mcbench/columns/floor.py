"""The floor and the bound: raw sockets from Python, no parsing.

The floor is the practical limit for a batch from Python: one sendall of N commands followed by a
no-op marker command, then recv until the marker's reply comes back, with the requests built in
Python inside the clock from the same str keys and bytes values the clients get. Its text variant
speaks set/get/delete (pylibmc's default protocol), its meta variant ms/mg/md, with `mn` as the
marker (`version` before memcached 1.6).

The bound is a reference, not a target: what the server and the kernel alone cost for a batch.
"""

from __future__ import annotations

import contextlib
import select
import socket
from itertools import islice
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


def push(socks: list, blobs: list) -> None:
    """Send every blob to its socket and read nothing: a piece of quiet writes, whose replies
    (the marker's, or an error line) are read with the last piece's (`drive`)."""
    left = {s.fileno(): [s, memoryview(b)] for s, b in zip(socks, blobs) if b}
    poller = select.poll()
    for fd in left:
        poller.register(fd, select.POLLOUT)
    while left:
        for fd, _ev in poller.poll(10_000):
            s, view = left[fd]
            try:
                n = s.send(view)
            except BlockingIOError:
                n = 0
            if n == len(view):
                poller.unregister(fd)
                del left[fd]
            else:
                left[fd][1] = view[n:]


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

    def _del_blobs(self, keys: list, quiet: bool, start: int = 0) -> list:
        if self.proto == "text":
            pre, post = b"delete ", b" noreply\r\n" if quiet else b"\r\n"
        else:
            pre, post = b"md ", b" q\r\n" if quiet else b"\r\n"
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


class Bound(Floor):
    """A reference, not a target: what the server and the kernel alone cost for a batch. Every
    request is built before the clock starts (`prepare`), writes are quiet (`ms`/`md ... q`, or
    `noreply` before memcached 1.6) with one marker, reads are one `get k1 .. kN` line per server
    (memcached answers it as a single request), and nothing is parsed. A client, which must at
    least turn its arguments into requests and the replies into Python objects, cannot beat it.

    With `as_sent`, the writes go out as fastmc sends them: each quiet `md` carries an opaque
    token (`O<n>`, its place in its server's piece), since a key that is not found answers `NF`
    and only the token says which key that was; and a write of `2 * PIECE` keys or more goes
    out in fastmc's pieces (`PIECE` keys, then each piece twice the last, the rest whole when
    it is less than twice as long), each sent before the next, as a streamed write is. The
    difference between the two bounds is what the tokens and the pieces cost the servers and
    the kernel."""

    kind = "reference"
    PIECE = 1024  # fastmc's STREAM_PIECE (src/client/drive/blocking.rs)

    def __init__(
        self, name: str, tag: str, servers: list, meta_ok: bool, as_sent: bool = False
    ) -> None:
        super().__init__(name, tag, servers, "meta" if meta_ok else "text", meta_ok)
        self.ready: dict = {}
        self.as_sent = as_sent
        self.get_multi, self.set_multi, self.delete_multi = self._b_get, self._b_set, self._b_del

    def prepare(self, op: str, arg: Any) -> None:
        if op == "get_multi":
            self.ready[op] = [[("get " + " ".join(p) + "\r\n").encode() for p in self._parts(arg)]]
            return
        pieces = self._pieces(list(arg.items()) if op == "set_multi" else list(arg))
        blobs = [
            self._set_blobs(dict(p), True, at)
            if op == "set_multi"
            else self._del_blobs_as_sent(p, at)
            for at, p in pieces
        ]
        # The marker closes the last piece only.
        strip = len(self.marker)
        self.ready[op] = [[b[:-strip] for b in piece] for piece in blobs[:-1]] + blobs[-1:]

    def _pieces(self, seq: list) -> list:
        """The pieces a write goes out in, each with its place in `seq`: one, or fastmc's when
        `as_sent`."""
        if not self.as_sent or len(seq) < 2 * self.PIECE:
            return [(0, seq)]
        out, at, piece = [], 0, self.PIECE
        while at < len(seq):
            end = len(seq) if len(seq) - at < 2 * piece else at + piece
            out.append((at, seq[at:end]))
            at, piece = end, piece * 2
        return out

    def _del_blobs_as_sent(self, keys: list, start: int) -> list:
        """Quiet deletes of `keys` (from place `start` of the batch), each with a token when
        `as_sent`."""
        if not self.as_sent or self.proto != "meta":
            return self._del_blobs(keys, True, start)
        return [
            b"".join([b"md %s q O%d\r\n" % (k.encode(), i) for i, k in enumerate(p)]) + self.marker
            for p in self._parts(keys, start)
        ]

    def _take(self, op: str, arg: Any) -> list:
        """The requests `prepare` built for `op` (built now if it was not called)."""
        if op not in self.ready:
            self.prepare(op, arg)
        return self.ready.pop(op)

    def _send(self, pieces: list, suffix: bytes) -> list:
        """Every piece but the last pushed out in turn, then the last one driven to its replies."""
        for piece in pieces[:-1]:
            push(self.socks, piece)
        return self._run(pieces[-1], suffix)

    def _b_set(self, mapping: dict) -> list:
        return self._send(self._take("set_multi", mapping), self.marker_reply)

    def _b_get(self, keys: list) -> tuple:
        return self._parts(keys), self._send(self._take("get_multi", keys), b"END\r\n")

    def _b_del(self, keys: list) -> list:
        return self._send(self._take("delete_multi", keys), self.marker_reply)

    # Quiet writes answer only the marker when every key succeeded (meta); text `noreply`
    # answers nothing either way, and the read-back checks it.
    def stored_ok(self, res: Any, n: int) -> bool:
        return self.nr_ok(res, n)

    def deleted_ok(self, res: Any, n: int) -> bool:
        return self.nr_ok(res, n)

    def decode_get(self, res: Any, keys: list) -> dict:
        _parts, replies = res
        out: dict = {}
        for buf in replies:
            lines = buf.split(b"\r\n")
            for i, line in enumerate(lines):
                if line.startswith(b"VALUE "):
                    out[line.split()[1].decode()] = lines[i + 1]
        return out


class Results(Column):
    """A reference measured alone, beside the bound: what a call must do with Python objects,
    whatever the client, at C speed and with no I/O. It reads the caller's arguments once:
    every key's characters as UTF-8 and, for `set_multi`, every value's bytes, copied into
    buffers of at most `SLICE` keys (`"".join(...).encode()`, `b"".join(...)`: a client must
    put them in its requests; slices, as a client's requests go out in pieces, so that no
    buffer is large enough for the allocator to give back between calls). For `get_multi` it
    also builds the dict of N new bytes values under the caller's keys from one buffer prepared
    before the clock (`dict(zip(keys, blob.split(b"\\r\\n")))`: N bytes objects, a list, N
    dict entries). The bound plus this is the least any client can take for the call."""

    kind = "reference"
    SLICE = 1_000

    def __init__(self, name: str, tag: str) -> None:
        super().__init__(name, tag)
        self.blob = b""
        self.values: dict = {}
        self.get_multi, self.set_multi, self.delete_multi = self._get, self._set, self._delete

    def prepare(self, op: str, arg: Any) -> None:
        if op == "set_multi":
            self.values = dict(arg)
        elif op == "get_multi":
            self.blob = b"\r\n".join(self.values[k] for k in arg)

    def _read(self, items: Any, text: bool) -> None:
        """Every item of `items` copied once, `SLICE` at a time (str ones as UTF-8)."""
        it = iter(items)
        for _ in range(0, len(items), self.SLICE):
            part = islice(it, self.SLICE)
            _ = "".join(part).encode() if text else b"".join(part)

    def _set(self, mapping: dict) -> list:
        self._read(mapping, True)
        self._read(mapping.values(), False)
        return []

    def _get(self, keys: list) -> dict:
        self._read(keys, True)
        return dict(zip(keys, self.blob.split(b"\r\n")))

    def _delete(self, keys: list) -> bool:
        self._read(keys, True)
        return True

    def read_back(self, keys: list) -> dict:
        return {}  # (it stores nothing)
