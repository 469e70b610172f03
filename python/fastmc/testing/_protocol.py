"""memcached's text and meta protocols over a ``Store``: bytes in, reply bytes out.

``Session.feed`` takes what a connection received and returns the replies to every complete
command in it, keeping an incomplete one for the next call; ``Session.closing`` says the
connection is to be closed (``quit``). Replies are memcached 1.6's, line for line: a text
command with ``noreply`` gets no reply at all (not even an error line, as in memcached), a meta
command with ``q`` loses only its nominal reply. A connection whose first byte is a binary
request's magic speaks the binary protocol (``_binary.py``). No sockets here (``_server.py``)."""

from __future__ import annotations

from ._binary import HEADER, binary_command
from ._store import Item, Store, parse_u64

__all__ = ["Session"]

KEY_MAX = 250
_BAD_FORMAT = b"CLIENT_ERROR bad command line format\r\n"
# The fewest tokens (the command included) each classic command takes: fewer is a malformed
# line, which memcached 1.6.45 answers with _BAD_FORMAT (1.6.18: ERROR).
_MIN_TOKENS = {
    b"get": 2,
    b"gets": 2,
    b"gat": 3,
    b"gats": 3,
    b"set": 5,
    b"add": 5,
    b"replace": 5,
    b"append": 5,
    b"prepend": 5,
    b"cas": 6,
    b"incr": 3,
    b"decr": 3,
    b"delete": 2,
    b"touch": 3,
    b"verbosity": 2,
}
_STORE_REPLY = {
    "STORED": b"STORED\r\n",
    "NOT_STORED": b"NOT_STORED\r\n",
    "EXISTS": b"EXISTS\r\n",
    "NOT_FOUND": b"NOT_FOUND\r\n",
    "TOO_LARGE": b"SERVER_ERROR object too large for cache\r\n",
    "NO_MEMORY": b"SERVER_ERROR out of memory storing object\r\n",
}
_META_STORE = {"STORED": b"HD", "NOT_STORED": b"NS", "EXISTS": b"EX", "NOT_FOUND": b"NF"}
_STORE_MODES = {b"set", b"add", b"replace", b"append", b"prepend", b"cas"}
_META_MODES = {b"": "set", b"S": "set", b"E": "add", b"R": "replace", b"A": "append"}
_META_MODES[b"P"] = "prepend"


class _BadLine(Exception):
    """A command line memcached would refuse: its error line."""

    def __init__(self, line: bytes) -> None:
        super().__init__(line)
        self.line = line


def _int32(tok: bytes, strict: bool = False) -> int:
    """A signed 32-bit number as memcached reads a time or a length: any 64-bit number, cut
    to 32 bits (``strict``: refused beyond 32 bits, as 1.6.45 refuses a ``touch``/``gat``
    time)."""
    try:
        n = int(tok)
    except ValueError:
        raise _BadLine(_BAD_FORMAT) from None
    if not -(1 << 63) <= n < 1 << 63 or (strict and not -(1 << 31) <= n < 1 << 31):
        raise _BadLine(_BAD_FORMAT)
    n &= (1 << 32) - 1
    return n - (1 << 32) if n >= 1 << 31 else n


def _u32(tok: bytes) -> int:
    """Client flags as memcached 1.6.18 reads them: any 64-bit number, cut to 32 bits."""
    n = parse_u64(tok)
    if n is None:
        raise _BadLine(_BAD_FORMAT)
    return n % (1 << 32)


def _value_block(it: Item, key: bytes, with_cas: bool) -> bytes:
    cas = b" %d" % it.cas if with_cas else b""
    return b"VALUE %s %d %d%s\r\n%s\r\n" % (key, it.flags, len(it.value), cas, it.value)


class Session:
    """One connection's protocol state (a partial command waits in ``buf``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.buf = bytearray()
        self.closing = False
        self.binary = False

    def feed(self, data: bytes) -> bytes:
        """The replies to every complete command after `data` is appended."""
        self.buf += data
        out = bytearray()
        while self.buf and not self.closing:
            if self.binary or self.buf[0] == 0x80:
                self.binary = True  # as memcached, the first byte decides for the connection
                if not self._binary_request(out):
                    break
                continue
            nl = self.buf.find(b"\n")
            if nl < 0:
                if len(self.buf) > 65536:
                    out += b"CLIENT_ERROR line too long\r\n"
                    self.closing = True
                break
            line = bytes(self.buf[:nl]).rstrip(b"\r")
            tokens = [t for t in line.split(b" ") if t]
            need = self._data_length(tokens)
            if need is not None and len(self.buf) < nl + 1 + need + 2:
                break  # the data block is still on its way
            end = nl + 1 + (need + 2 if need is not None else 0)
            data_block = bytes(self.buf[nl + 1 : end])
            del self.buf[:end]
            with self.store.lock:
                try:
                    out += self._command(tokens, data_block)
                except _BadLine as e:
                    out += e.line
        return bytes(out)

    def _binary_request(self, out: bytearray) -> bool:
        """Answer one binary request into `out`; False while it is incomplete."""
        if len(self.buf) < HEADER:
            return False
        if self.buf[0] != 0x80:
            self.closing = True  # not a request: memcached hangs up
            return False
        size = HEADER + int.from_bytes(self.buf[8:12], "big")
        if len(self.buf) < size:
            return False
        packet = bytes(self.buf[:size])
        del self.buf[:size]
        with self.store.lock:
            reply, close = binary_command(self.store, packet, self.version)
        out += reply
        self.closing = close
        return True

    @staticmethod
    def _data_length(tokens: list[bytes]) -> int | None:
        """The length of the data block that follows this command line, if it has one."""
        if not tokens:
            return None
        cmd = tokens[0]
        idx = 4 if cmd in _STORE_MODES else 2 if cmd == b"ms" else 0
        if not idx or len(tokens) <= idx:
            return None
        try:
            n = int(tokens[idx])
        except ValueError:
            return None
        return n if 0 <= n < 1 << 31 else None

    @property
    def version(self) -> bytes:
        return self.store.version

    @property
    def legacy(self) -> bool:
        """Answer malformed commands as memcached before 1.6.45 did (1.6.18 was compared)."""
        return tuple(int(p) for p in self.version.split(b".")[:3]) < (1, 6, 45)

    def _command(self, tokens: list[bytes], data: bytes) -> bytes:
        if not tokens:
            return b"ERROR\r\n"
        cmd = tokens[0]
        if not self.legacy:
            too_few = _MIN_TOKENS.get(cmd)
            if too_few is not None and len(tokens) < too_few:
                # 1.6.45: a known command short of its arguments
                return b"ERROR\r\n" if cmd in _STORE_MODES and len(tokens) < 4 else _BAD_FORMAT
        if cmd in (b"get", b"gets") and len(tokens) > 1:
            return self._get(tokens[1:], cmd == b"gets", None)
        if cmd in (b"gat", b"gats") and len(tokens) > 2 - int(self.legacy):
            if len(tokens) == 2:  # 1.6.18: an exptime and no key finds nothing
                return b"END\r\n"
            try:
                exptime = _int32(tokens[1], strict=True)
            except _BadLine:
                return b"CLIENT_ERROR invalid exptime argument\r\n"
            return self._get(tokens[2:], cmd == b"gats", exptime)
        if cmd in _STORE_MODES:
            return self._store_text(cmd, tokens, data)
        noreply = tokens[-1] == b"noreply"
        reply = self._simple(cmd, tokens, noreply)
        if reply is not None:
            return b"" if noreply else reply
        if cmd in (b"mg", b"ms", b"md", b"ma", b"mn"):
            from ._meta import meta_command

            return meta_command(self.store, tokens, data)
        if cmd == b"quit":
            self.closing = True
            return b""
        return b"ERROR\r\n"

    def _get(self, keys: list[bytes], with_cas: bool, touch: int | None) -> bytes:
        st = self.store
        out = bytearray()
        for k in keys:
            if len(k) > KEY_MAX:
                return bytes(out) + _BAD_FORMAT
            st.stats["cmd_get"] += 1
            it = st.touch(k, touch) if touch is not None else st.get(k)
            if it is None:
                st.stats["get_misses"] += 1
                continue
            st.stats["get_hits"] += 1
            out += _value_block(it, k, with_cas)
        return bytes(out) + b"END\r\n"

    def _store_text(self, cmd: bytes, tokens: list[bytes], data: bytes) -> bytes:
        with_cas = cmd == b"cas"
        n = 6 if with_cas else 5
        noreply = len(tokens) == n + 1 and tokens[-1] == b"noreply"
        if len(tokens) != n + int(noreply):
            return b"ERROR\r\n"
        try:
            key, flags, exptime = tokens[1], _u32(tokens[2]), _int32(tokens[3])
            length = _int32(tokens[4])
            token = parse_u64(tokens[5]) if with_cas else 0
            if len(key) > KEY_MAX or length < 0 or token is None:
                raise _BadLine(_BAD_FORMAT)
        except _BadLine as e:
            return b"" if noreply else e.line
        if data[length:] != b"\r\n":
            return b"" if noreply else b"CLIENT_ERROR bad data chunk\r\n"
        status = self.store.store(cmd.decode(), key, data[:length], flags, exptime, token)
        return b"" if noreply else _STORE_REPLY[status]

    def _simple(self, cmd: bytes, tokens: list[bytes], noreply: bool) -> bytes | None:
        """The classic commands without a data block or values (None: not one of them)."""
        st = self.store
        args = tokens[1 : len(tokens) - int(noreply)]
        if not self.legacy:
            # 1.6.45 reads the arguments it needs and ignores any others
            keep = {b"incr": 2, b"decr": 2, b"touch": 2, b"delete": 1, b"verbosity": 1}
            keep[b"flush_all"] = min(len(args), 1)
            if cmd in keep and len(args) > keep[cmd]:
                args = args[: keep[cmd]]
                tokens = [cmd, *args]
        if cmd in (b"incr", b"decr") and len(args) == 2:
            delta = parse_u64(args[1])
            if len(args[0]) > KEY_MAX:
                return _BAD_FORMAT
            if delta is None:
                return b"CLIENT_ERROR invalid numeric delta argument\r\n"
            if st.out_of_memory and st.get(args[0]) is not None:
                return b"SERVER_ERROR out of memory\r\n"
            r = st.delta(args[0], cmd == b"incr", delta)
            if r == "NON_NUMERIC":
                return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
            return b"NOT_FOUND\r\n" if r == "NOT_FOUND" else b"%d\r\n" % int(r)
        if cmd == b"delete" and len(tokens) > 1:
            if tokens[2:] not in ([], [b"0"], [b"noreply"], [b"0", b"noreply"]):
                return b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            if len(args[0]) > KEY_MAX:
                return _BAD_FORMAT
            return b"DELETED\r\n" if st.delete(args[0]) else b"NOT_FOUND\r\n"
        if cmd == b"touch" and len(args) == 2:
            if len(args[0]) > KEY_MAX:
                return _BAD_FORMAT
            try:
                exptime = _int32(args[1], strict=True)
            except _BadLine:
                return b"CLIENT_ERROR invalid exptime argument\r\n"
            return b"TOUCHED\r\n" if st.touch(args[0], exptime) else b"NOT_FOUND\r\n"
        if cmd == b"flush_all" and len(args) <= 1:
            st.flush_all(_int32(args[0]) if args else 0)
            return b"OK\r\n"
        if cmd == b"verbosity" and len(args) == 1:
            _u32(args[0])
            return b"OK\r\n"
        if cmd == b"version" and not args:
            return b"VERSION " + self.version + b"\r\n"
        if cmd == b"stats" and len(args) <= 1:
            return self._stats(args[0] if args else b"")
        return None

    def _stats(self, group: bytes) -> bytes:
        st = self.store
        now = st.clock.now()
        if group == b"":
            rows: list[tuple[str, object]] = [
                ("pid", 1),
                ("uptime", now - st.started),
                ("time", now),
                ("version", self.version.decode()),
                ("pointer_size", 64),
                ("curr_items", sum(1 for k in list(st.items) if st.get(k) is not None)),
                ("bytes", sum(len(i.value) for i in st.items.values())),
                ("limit_maxbytes", 64 * 1024 * 1024),
                ("threads", 1),
            ]
            rows += sorted(st.stats.items())
        elif group == b"settings":
            rows = [("item_size_max", st.item_size_max), ("cas_enabled", "yes")]
        elif group in (b"items", b"slabs", b"sizes", b"conns"):
            rows = []
        else:
            return b"ERROR\r\n"
        lines = [b"STAT %s %s\r\n" % (k.encode(), str(v).encode()) for k, v in rows]
        return b"".join(lines) + b"END\r\n"
