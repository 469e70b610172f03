"""memcached's binary protocol over a ``Store``: the requests fastmc sends with ``binary=True``.

GET/GETK/GETQ/GETKQ, GAT/GATK/GATQ/GATKQ, TOUCH, SET/ADD/REPLACE (a CAS makes them a ``cas``),
APPEND/PREPEND, their quiet forms, DELETE(Q), INCREMENT/DECREMENT(Q) (created from ``initial``
unless the expiry is 0xffffffff), FLUSH(Q), NOOP, VERSION, STAT, QUIT(Q); anything else is
``Unknown command``. Answers are memcached 1.6's: status, error text, the CAS of the item, quiet
requests answered only when they fail (a quiet get: only on a hit). Binary expiry times are
unsigned, so one that a text client would send as negative is a Unix time in 2106, as memcached
reads it. SASL is not spoken."""

from __future__ import annotations

import struct

from ._store import Item, Store

__all__ = ["HEADER", "binary_command"]

HEADER = 24
_REQ = struct.Struct(">BBHBBHIIQ")
_ERRORS = {
    0x01: b"Not found",
    0x02: b"Data exists for key.",
    0x03: b"Too large.",
    0x04: b"Invalid arguments",
    0x05: b"Not stored.",
    0x06: b"Non-numeric server-side value for incr or decr",
    0x81: b"Unknown command",
    0x82: b"Out of memory",
}
# quiet opcode -> the opcode it is a quiet form of
_QUIET = {0x09: 0x00, 0x0D: 0x0C, 0x11: 0x01, 0x12: 0x02, 0x13: 0x03, 0x14: 0x04, 0x15: 0x05}
_QUIET.update({0x16: 0x06, 0x17: 0x07, 0x18: 0x08, 0x19: 0x0E, 0x1A: 0x0F, 0x1E: 0x1D, 0x24: 0x23})
_STORE = {0x01: "set", 0x02: "add", 0x03: "replace", 0x0E: "append", 0x0F: "prepend"}


def _response(
    op: int,
    opaque: int,
    status: int = 0,
    *,
    extras: bytes = b"",
    key: bytes = b"",
    value: bytes = b"",
    cas: int = 0,
) -> bytes:
    body = extras + key + value
    head = _REQ.pack(0x81, op, len(key), len(extras), 0, status, len(body), opaque, cas)
    return head + body


def _error(op: int, opaque: int, status: int) -> bytes:
    return _response(op, opaque, status, value=_ERRORS[status])


def binary_command(store: Store, packet: bytes, version: bytes) -> tuple[bytes, bool]:
    """The reply to one complete request `packet` (header and body), and whether to close."""
    _, op, keylen, extlen, _, _, bodylen, opaque, cas = _REQ.unpack_from(packet)
    extras = packet[HEADER : HEADER + extlen]
    key = packet[HEADER + extlen : HEADER + extlen + keylen]
    value = packet[HEADER + extlen + keylen : HEADER + bodylen]
    quiet = op in _QUIET
    cmd = _QUIET.get(op, op)
    if keylen > 250 or keylen + extlen > bodylen:
        return _error(op, opaque, 0x04), True
    if cmd in (0x00, 0x0C, 0x1D, 0x23, 0x1C):
        return _get(store, op, cmd, key, extras, opaque, quiet), False
    if cmd in _STORE:
        return _store(store, op, cmd, key, extras, value, cas, opaque, quiet), False
    if cmd == 0x04:
        it = store.get(key)
        if it is None:
            return _error(op, opaque, 0x01), False
        if cas and cas != it.cas:
            return _error(op, opaque, 0x02), False
        del store.items[key]
        return (b"" if quiet else _response(op, opaque)), False
    if cmd in (0x05, 0x06) and extlen == 20:
        return _arith(store, op, cmd == 0x05, key, extras, opaque, quiet), False
    if cmd == 0x08:
        delay = struct.unpack(">I", extras)[0] if extlen == 4 else 0
        store.flush_all(delay)
        return (b"" if quiet else _response(op, opaque)), False
    if cmd == 0x0A:
        return _response(op, opaque), False
    if cmd == 0x0B:
        return _response(op, opaque, value=version), False
    if cmd == 0x07:
        return (b"" if quiet else _response(op, opaque)), True
    if cmd == 0x10:
        return _stats(store, op, key, opaque, version), False
    return _error(op, opaque, 0x81), False


def _get(
    store: Store, op: int, cmd: int, key: bytes, extras: bytes, opaque: int, quiet: bool
) -> bytes:
    if cmd in (0x1C, 0x1D, 0x23):  # TOUCH, GAT, GATK: the expiry in the extras
        it: Item | None = store.touch(key, struct.unpack(">I", extras)[0])
    else:
        it = store.get(key)
    with_key = cmd in (0x0C, 0x23)
    if it is None:
        if quiet:
            return b""
        if with_key:
            return _response(op, opaque, 0x01, key=key)
        return _error(op, opaque, 0x01)
    flags = struct.pack(">I", it.flags)
    value = b"" if cmd == 0x1C else it.value
    return _response(
        op, opaque, extras=flags, key=key if with_key else b"", value=value, cas=it.cas
    )


def _store(
    store: Store,
    op: int,
    cmd: int,
    key: bytes,
    extras: bytes,
    value: bytes,
    cas: int,
    opaque: int,
    quiet: bool,
) -> bytes:
    mode = _STORE[cmd]
    flags, exptime = struct.unpack(">II", extras) if len(extras) == 8 else (0, 0)
    if cas and mode in ("set", "replace"):
        mode = "cas"
    status = store.store(mode, key, value, flags, exptime, cas)
    if status == "STORED":
        it = store.items[key]
        return b"" if quiet else _response(op, opaque, cas=it.cas)
    if status == "TOO_LARGE":
        return _error(op, opaque, 0x03)
    if status == "NO_MEMORY":
        return _error(op, opaque, 0x82)
    if status == "EXISTS":
        return _error(op, opaque, 0x02)
    if status == "NOT_FOUND":
        return _error(op, opaque, 0x01)
    # NOT_STORED: add finds the key, replace misses it, append/prepend either
    return _error(op, opaque, {"add": 0x02, "replace": 0x01}.get(mode, 0x05))


def _arith(
    store: Store, op: int, incr: bool, key: bytes, extras: bytes, opaque: int, quiet: bool
) -> bytes:
    delta, initial, exptime = struct.unpack(">QQI", extras)
    r = store.delta(key, incr, delta)
    if r == "NON_NUMERIC":
        return _error(op, opaque, 0x06)
    if r == "NOT_FOUND":
        if exptime == 0xFFFFFFFF:
            return _error(op, opaque, 0x01)
        store.link(key, b"%d" % initial, 0, store.realtime(exptime))
        r = initial
    it = store.items[key]
    if quiet:
        return b""
    return _response(op, opaque, value=struct.pack(">Q", int(r)), cas=it.cas)


def _stats(store: Store, op: int, group: bytes, opaque: int, version: bytes) -> bytes:
    if group:
        return _error(op, opaque, 0x01)
    now = store.clock.now()
    rows = [
        (b"pid", b"1"),
        (b"uptime", b"%d" % (now - store.started)),
        (b"time", b"%d" % now),
        (b"version", version),
        (b"curr_items", b"%d" % sum(1 for k in list(store.items) if store.get(k))),
    ]
    rows += [(k.encode(), b"%d" % v) for k, v in sorted(store.stats.items())]
    out = b"".join(_response(op, opaque, key=k, value=v) for k, v in rows)
    return out + _response(op, opaque)
