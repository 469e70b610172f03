"""memcached's meta commands (``mg``, ``ms``, ``md``, ``ma``, ``mn``) over a ``Store``.

The flags fastmc sends are all here (``src/protocol/meta.rs``, ``src/client/lease.rs``): quiet
writes (``ms``/``md`` with ``q`` and ``O``), lease reads (``mg`` with ``v f c N R``), lease
releases and invalidation (``md`` with ``C``, ``I``, ``T``), plus ``t``, ``s``, ``k``, ``T``,
``E`` and ``ma``. Replies follow memcached 1.6.45: the requested return flags in the order they
were asked, then ``Z``, ``X``, ``W``; ``q`` hides only ``HD`` (and ``EN`` for ``mg``). Not
spoken: base64 keys (``b``), ``h``/``l``/``u`` answer 0 and change nothing."""

from __future__ import annotations

from ._store import Item, Store, parse_u64

__all__ = ["meta_command"]

_BAD = b"CLIENT_ERROR bad command line format\r\n"
_BAD_TOKEN = b"CLIENT_ERROR bad token in command line format\r\n"
_MODES = {"S": "set", "E": "add", "R": "replace", "A": "append", "P": "prepend"}


class _Refused(Exception):
    def __init__(self, line: bytes) -> None:
        super().__init__(line)
        self.line = line


class _Flags:
    """A meta command's flags: the letters in order, and each one's token."""

    def __init__(self, tokens: list[bytes]) -> None:
        self.order: list[tuple[str, bytes]] = []
        self.tok: dict[str, bytes] = {}
        for t in tokens:
            c = chr(t[0])
            if c in self.tok:
                raise _Refused(b"CLIENT_ERROR duplicate flag\r\n")
            self.tok[c] = t[1:]
            self.order.append((c, t[1:]))

    def has(self, c: str) -> bool:
        return c in self.tok

    def num(self, c: str, signed32: bool = False) -> int:
        raw = self.tok[c]
        if signed32:
            try:
                n = int(raw)
            except ValueError:
                raise _Refused(_BAD_TOKEN) from None
            if not -(1 << 31) <= n < 1 << 31:
                raise _Refused(_BAD_TOKEN)
            return n
        v = parse_u64(raw)
        if v is None or not raw.isdigit():
            raise _Refused(_BAD_TOKEN)
        return v

    def echo(self, key: bytes) -> bytes:
        """The ``O`` and ``k`` flags copied back, as every reply carries them."""
        out = b""
        for c, tok in self.order:
            if c == "O":
                out += b" O" + tok
            elif c == "k":
                out += b" k" + key
        return out


def meta_command(store: Store, tokens: list[bytes], data: bytes) -> bytes:
    """The reply to one meta command (`data`: an ``ms`` data block with its CRLF)."""
    cmd = tokens[0]
    if cmd == b"mn":
        return b"MN\r\n"
    if len(tokens) < (3 if cmd == b"ms" else 2) or len(tokens[1]) > 250:
        return _BAD
    try:
        if cmd == b"ms":
            return _ms(store, tokens[1], tokens[2], _Flags(tokens[3:]), data)
        f = _Flags(tokens[2:])
        if cmd == b"mg":
            return _mg(store, tokens[1], f)
        if cmd == b"md":
            return _md(store, tokens[1], f)
        return _ma(store, tokens[1], f)
    except _Refused as e:
        return e.line


def _ttl(store: Store, it: Item) -> bytes:
    return b"-1" if it.exptime == 0 else b"%d" % (it.exptime - store.clock.now())


def _mg(store: Store, key: bytes, f: _Flags) -> bytes:
    it = store.get(key)
    store.stats["cmd_get"] += 1
    created = False
    won = False
    if it is None and f.has("N"):
        exp = store.realtime(f.num("N", True))
        it = store.link(key, b"", 0, exp, f.num("E") if f.has("E") else 0)
        created = True
    if it is None:
        store.stats["get_misses"] += 1
        return b"" if f.has("q") else b"EN" + f.echo(key) + b"\r\n"
    store.stats["get_hits"] += 1
    value = f.has("v") and not (f.has("C") and it.cas == f.num("C"))
    head = b"VA %d" % len(it.value) if value else b"HD"
    for c, _tok in f.order:
        if c == "T":
            it.exptime = store.realtime(f.num("T", True))
        elif c == "N" and created:
            won = True
        elif c == "R":
            recache = store.realtime(f.num("R", True))
            if not it.token_sent and not created and it.exptime != 0 and it.exptime < recache:
                won = True
        elif c == "s":
            head += b" s%d" % len(it.value)
        elif c == "t":
            head += b" t" + _ttl(store, it)
        elif c == "c":
            head += b" c%d" % it.cas
        elif c == "f":
            head += b" f%d" % it.flags
        elif c in "hl":
            head += b" " + c.encode() + b"0"
        elif c == "O":
            head += b" O" + _tok
        elif c == "k":
            head += b" k" + key
    if it.token_sent:
        head += b" Z"
    if it.stale:
        head += b" X"
        if not it.token_sent:
            won = True
    if won:
        head += b" W"
        it.token_sent = True
    return head + b"\r\n" + (it.value + b"\r\n" if value else b"")


def _ms(store: Store, key: bytes, size: bytes, f: _Flags, data: bytes) -> bytes:
    try:
        n = int(size)
    except ValueError:
        return _BAD
    if n < 0 or data[n:] != b"\r\n":
        return b"CLIENT_ERROR bad data chunk\r\n"
    value = data[:n]
    mode = _MODES.get(f.tok.get("M", b"S").decode("latin-1").upper())
    if mode is None:
        return b"CLIENT_ERROR invalid mode for ms M token\r\n"
    flags = f.num("F") if f.has("F") else 0
    if flags >= 1 << 32:
        return _BAD_TOKEN
    exptime = f.num("T", True) if f.has("T") else 0
    cas = f.num("C") if f.has("C") else 0
    if f.has("C") and mode in ("set", "replace"):
        mode = "cas"
    old = store.get(key)
    if mode in ("append", "prepend") and old is None and f.has("N"):
        mode, exptime = "set", f.num("N", True)
    elif mode in ("append", "prepend") and old is not None and f.has("C") and old.cas != cas:
        return b"EX" + f.echo(key) + b"\r\n"
    stale = False
    if mode == "cas" and f.has("I") and old is not None and cas < old.cas:
        cas, stale = old.cas, True  # an invalidated write: stored, but marked stale
    status = store.store(mode, key, value, flags, exptime, cas)
    if status == "TOO_LARGE":
        return b"SERVER_ERROR object too large for cache\r\n"
    if status == "NO_MEMORY":
        return b"SERVER_ERROR out of memory storing object\r\n"
    it = store.items.get(key) if status == "STORED" else None
    if it is not None:
        it.stale = stale
        if f.has("E"):
            it.cas = f.num("E")
    code = {"STORED": b"HD", "NOT_STORED": b"NS", "EXISTS": b"EX", "NOT_FOUND": b"NF"}[status]
    if code == b"HD" and f.has("q"):
        return b""
    out = code
    for c, tok in f.order:
        if c == "O":
            out += b" O" + tok
        elif c == "k":
            out += b" k" + key
        elif c == "c":
            out += b" c%d" % (it.cas if it is not None else 0)
        elif c == "s" and it is not None:
            out += b" s%d" % len(it.value)
    return out + b"\r\n"


def _md(store: Store, key: bytes, f: _Flags) -> bytes:
    it = store.get(key)
    if it is None:
        return b"NF" + f.echo(key) + b"\r\n"
    if f.has("C") and it.cas != f.num("C"):
        return b"EX" + f.echo(key) + b"\r\n"
    if f.has("x"):
        flags = f.num("F") if f.has("F") else 0
        it = store.link(key, b"", flags, it.exptime, it.cas)
    if f.has("I"):
        if f.has("T"):
            it.exptime = store.realtime(f.num("T", True))
        it.stale, it.token_sent = True, False
        it.cas = f.num("E") if f.has("E") else store.next_cas()
    elif not f.has("x"):
        del store.items[key]
    return b"" if f.has("q") else b"HD" + f.echo(key) + b"\r\n"


def _ma(store: Store, key: bytes, f: _Flags) -> bytes:
    mode = f.tok.get("M", b"I").decode("latin-1").upper()
    if mode not in ("I", "+", "D", "-"):
        return b"CLIENT_ERROR invalid mode for ma M token\r\n"
    delta = f.num("D") if f.has("D") else 1
    it = store.get(key)
    if it is not None and f.has("C") and it.cas != f.num("C"):
        return b"EX" + f.echo(key) + b"\r\n"
    if it is None and f.has("N"):
        initial = f.num("J") if f.has("J") else 0
        it = store.link(key, b"%d" % initial, 0, store.realtime(f.num("N", True)))
        number = initial
    elif it is None:
        return b"NF" + f.echo(key) + b"\r\n"
    else:
        r = store.delta(key, mode in ("I", "+"), delta)
        if r == "NON_NUMERIC":
            return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        number, it = int(r), store.items[key]
    if f.has("T"):
        it.exptime = store.realtime(f.num("T", True))
    digits = b"%d" % number
    if f.has("q") and not f.has("v"):
        return b""
    out = b"VA %d" % len(digits) if f.has("v") else b"HD"
    for c, tok in f.order:
        if c == "c":
            out += b" c%d" % it.cas
        elif c == "t":
            out += b" t" + _ttl(store, it)
        elif c == "O":
            out += b" O" + tok
        elif c == "k":
            out += b" k" + key
    return out + b"\r\n" + (digits + b"\r\n" if f.has("v") else b"")
