"""The references beside the floor, not targets: the bound, what the server and the kernel alone
cost for a batch (as the floor sends it, or as fastmc does), and the arguments and results alone,
what any client must do with the caller's Python objects."""

from __future__ import annotations

import select
from itertools import islice
from typing import Any

from .base import Column
from .floor import Floor


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
            else self._del_blobs(p, True, at, tokens=self.as_sent)
            for at, p in pieces
        ]
        # The marker closes the last piece only.
        strip = len(self.marker)
        self.ready[op] = [[b[:-strip] for b in piece] for piece in blobs[:-1]] + blobs[-1:]

    @classmethod
    def as_sent_differs(cls, op: str, n: int) -> bool:
        """Whether fastmc's requests for `op` of `n` keys differ from the bound's: a delete (its
        tokens) or a write in pieces."""
        return op == "delete_multi" or (op == "set_multi" and n >= 2 * cls.PIECE)

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
