"""A scriptable in-process fake memcached (classic text protocol only) for fault injection.

It answers the classic commands from an in-memory dict, like a real server, until a rule says
otherwise. Rules are set per key (``fake.rule(key, action)``) and fire whenever a command names
that key:

- ``"hang"``: stop answering (the reply so far is sent, nothing after);
- ``"hang_mid"``: send half of this key's reply, then stop answering;
- ``"close_mid"``: send half of this key's reply, then close the connection;
- ``"long"``: a VALUE block longer than its header announces;
- ``"short"``: a VALUE block shorter than its header announces;
- ``"garbage"``: bytes that are not the protocol instead of the reply;
- ``"wrong_key"``: a VALUE block for another key;
- ``"extra"``: the right reply followed by an unsolicited one;
- ``"delay:<seconds>"``: answer normally after a pause;
- ``"line:<text>"``: answer this one line instead (``SERVER_ERROR out of memory ...``,
  ``CLIENT_ERROR ...``), after reading the whole command, so the stream stays in sync;
- ``"line_close:<text>"``: answer this one line, then close the connection (as a proxy may
  after a backend error);
- ``"early:<text>"``: for a storage command, answer this line as soon as the command line is
  read, then swallow the data block (memcached does this for a too-large value);
- ``"close_before_apply"``: close the connection without executing the command;
- ``"close_after_apply"``: execute the command, then close without answering.

Server-wide options: ``trickle`` sends every reply one byte at a time; ``delay`` pauses before
every reply; ``read=False`` accepts connections but never reads (a stalled peer for send timeouts;
``rcvbuf`` shrinks its receive buffer so that it stalls at once).
``drop_connections()`` closes every client connection as a restarted server would; ``commands``
records every command line received with the id of its connection.
"""

import socket
import threading
import time

STORAGE = {b"set", b"add", b"replace", b"append", b"prepend", b"cas"}


class _Stop(Exception):
    """Stop serving this connection (``close`` says whether to close it or to hang)."""

    def __init__(self, close):
        super().__init__()
        self.close = close


class FakeMemcached:
    def __init__(self, *, trickle=False, delay=0.0, read=True, host="127.0.0.1", port=0, rcvbuf=None):
        self.trickle = trickle
        self.delay = delay
        self.read = read
        self.rules = {}
        self.data = {}  # key -> (flags, bytes, cas)
        self.cas_counter = 0
        self.commands = []  # (connection id, command line)
        self.times = []  # when each command arrived
        self.accepted = 0
        self.closed_by_client = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.conns = []
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf:
            # inherited by accepted sockets: a non-reading fake stops taking bytes at once
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind((host, port))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.address = "%s:%d" % (host, self.port)
        threading.Thread(target=self._accept, daemon=True).start()

    # -- scripting --------------------------------------------------------------------------
    def rule(self, key, action):
        if isinstance(key, str):
            key = key.encode()
        if action is None:
            self.rules.pop(key, None)
        else:
            self.rules[key] = action
        return self

    def put(self, key, value, flags=0):
        """Store a raw value, as if a client had set it."""
        if isinstance(key, str):
            key = key.encode()
        if isinstance(value, str):
            value = value.encode()
        with self.lock:
            self.cas_counter += 1
            self.data[key] = (flags, value, self.cas_counter)

    def command_names(self):
        with self.lock:
            return [line.split(b" ", 1)[0] for _, line in self.commands]

    def drop_connections(self, forget=True):
        """Close every client connection (a restart); ``forget`` also empties the data."""
        with self.lock:
            conns, self.conns = self.conns, []
            if forget:
                self.data.clear()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self):
        self.stopping.set()
        try:
            # wakes the accept() in _accept; a bare close() would leave the socket listening
            # until that accept() returns
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.drop_connections()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- serving ----------------------------------------------------------------------------
    def _accept(self):
        cid = 0
        while not self.stopping.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.accepted += 1
                self.conns.append(c)
                cid += 1
            threading.Thread(target=self._serve, args=(c, cid), daemon=True).start()

    def _hang(self, c):
        """Answer nothing more; notice when the client gives up on the connection."""
        c.settimeout(0.05)
        while not self.stopping.is_set():
            try:
                if c.recv(65536) == b"":
                    with self.lock:
                        self.closed_by_client += 1
                    return
            except socket.timeout:
                continue
            except OSError:
                return

    def _send(self, c, data):
        if not data:
            return
        if self.trickle:
            for i in range(len(data)):
                c.sendall(data[i : i + 1])
                time.sleep(0.0003)
        else:
            c.sendall(data)

    def _serve(self, c, cid):
        if not self.read:
            self.stopping.wait()
            return
        buf = bytearray()

        def need(n):
            while len(buf) < n:
                chunk = c.recv(65536)
                if not chunk:
                    raise EOFError
                buf.extend(chunk)

        try:
            while not self.stopping.is_set():
                while b"\r\n" not in buf:
                    chunk = c.recv(65536)
                    if not chunk:
                        with self.lock:
                            self.closed_by_client += 1
                        return
                    buf.extend(chunk)
                end = buf.index(b"\r\n")
                line = bytes(buf[:end])
                del buf[: end + 2]
                parts = line.split()
                data = None
                early = self.rules.get(parts[1]) if len(parts) > 1 else None
                if early and early.startswith("early:") and parts[0] in STORAGE:
                    # like memcached for a too-large value: answer at once, then swallow (with a
                    # small `rcvbuf` the client is still writing the block when the reply comes)
                    with self.lock:
                        self.commands.append((cid, line))
                        self.times.append(time.monotonic())
                    self._send(c, early[6:].encode() + b"\r\n")
                    left = int(parts[4]) + 2
                    while left > 0:
                        if not buf:
                            chunk = c.recv(65536)
                            if not chunk:
                                raise EOFError
                            buf.extend(chunk)
                        n = min(left, len(buf))
                        del buf[:n]
                        left -= n
                    continue
                if parts and parts[0] in STORAGE and len(parts) >= 5:
                    n = int(parts[4])
                    need(n + 2)
                    data = bytes(buf[:n])
                    del buf[: n + 2]
                with self.lock:
                    self.commands.append((cid, line))
                    self.times.append(time.monotonic())
                if self.delay:
                    time.sleep(self.delay)
                self._handle(c, parts, data)
        except _Stop as s:
            if s.close:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            else:
                self._hang(c)
        except (EOFError, OSError, ValueError, IndexError):
            pass

    def _action(self, key):
        act = self.rules.get(key)
        if act and act.startswith("delay:"):
            time.sleep(float(act[6:]))
            return None
        return act

    def _out_fault(self, c, act, normal):
        """Send `normal` (this key's reply) damaged as `act` says; raise _Stop where it ends."""
        half = normal[: max(1, len(normal) // 2)]
        if act == "hang":
            raise _Stop(close=False)
        if act == "hang_mid":
            self._send(c, half)
            raise _Stop(close=False)
        if act == "close_mid":
            self._send(c, half)
            raise _Stop(close=True)
        if act == "garbage":
            self._send(c, b"\x00\xff\xfeNOT MEMCACHED AT ALL\r\n")
            raise _Stop(close=False)
        if act.startswith("line:"):
            self._send(c, act[5:].encode() + b"\r\n")
            return
        if act.startswith("line_close:"):
            # corked, the line and the FIN leave in one segment: the client never sees the
            # line without the close
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            c.sendall(act[11:].encode() + b"\r\n")
            c.shutdown(socket.SHUT_WR)
            raise _Stop(close=True)
        if act in ("close_before_apply", "close_after_apply"):
            raise _Stop(close=True)
        raise AssertionError("unknown rule %r" % act)

    def _handle(self, c, parts, data):
        if not parts:
            self._send(c, b"ERROR\r\n")
            return
        cmd = parts[0]
        noreply = parts[-1] == b"noreply"
        if cmd in (b"get", b"gets"):
            out = bytearray()
            for key in parts[1:]:
                act = self._action(key)
                with self.lock:
                    item = self.data.get(key)
                flags, value, cas = item if item else (0, b"", 0)
                head = b"VALUE %s %d %d" % (key, flags, len(value))
                if cmd == b"gets":
                    head += b" %d" % cas
                block = head + b"\r\n" + value + b"\r\n" if item else b""
                if act is None:
                    out += block
                    continue
                if act == "long":
                    out += head + b"\r\n" + value + b"EXTRA-BYTES\r\n"
                elif act == "short":
                    out += b"VALUE %s %d %d\r\n" % (key, flags, len(value) + 7) + value + b"\r\n"
                elif act == "wrong_key":
                    out += b"VALUE zz%s %d %d\r\n%s\r\n" % (key, flags, len(value), value)
                elif act == "extra":
                    out += block
                else:
                    self._send(c, bytes(out))
                    self._out_fault(c, act, block or b"END\r\n")
                    out = bytearray()
            out += b"END\r\n"
            if any(self.rules.get(k) == "extra" for k in parts[1:]):
                out += b"VALUE unasked 0 1\r\nx\r\nEND\r\n"
            self._send(c, bytes(out))
            return
        key = parts[1] if len(parts) > 1 else b""
        act = self._action(key)
        if act in ("long", "short", "wrong_key"):
            # no data block to damage here: answer with a reply of the wrong kind
            self._send(c, b"VALUE %s 0 1\r\nx\r\nEND\r\n" % key)
            return
        if act == "extra":
            reply = self._execute(cmd, parts, data)
            self._send(c, reply + reply)
            return
        if act is not None and act != "close_after_apply":
            self._out_fault(c, act, b"STORED\r\n")
            return
        reply = self._execute(cmd, parts, data)
        if act == "close_after_apply":
            raise _Stop(close=True)
        if not noreply:
            self._send(c, reply)

    def _execute(self, cmd, parts, data):
        with self.lock:
            if cmd in STORAGE:
                key, flags = parts[1], int(parts[2])
                have = key in self.data
                if cmd == b"add" and have or cmd in (b"replace", b"append", b"prepend") and not have:
                    return b"NOT_STORED\r\n"
                if cmd == b"cas":
                    if not have:
                        return b"NOT_FOUND\r\n"
                    if self.data[key][2] != int(parts[5]):
                        return b"EXISTS\r\n"
                if cmd == b"append":
                    flags, data = self.data[key][0], self.data[key][1] + data
                elif cmd == b"prepend":
                    flags, data = self.data[key][0], data + self.data[key][1]
                self.cas_counter += 1
                self.data[key] = (flags, data, self.cas_counter)
                return b"STORED\r\n"
            if cmd == b"delete":
                return b"DELETED\r\n" if self.data.pop(parts[1], None) else b"NOT_FOUND\r\n"
            if cmd in (b"incr", b"decr"):
                item = self.data.get(parts[1])
                if item is None:
                    return b"NOT_FOUND\r\n"
                if not item[1].isdigit():
                    return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
                n, d = int(item[1]), int(parts[2])
                n = (n + d) % (1 << 64) if cmd == b"incr" else max(0, n - d)
                self.cas_counter += 1
                self.data[parts[1]] = (item[0], b"%d" % n, self.cas_counter)
                return b"%d\r\n" % n
            if cmd == b"touch":
                return b"TOUCHED\r\n" if parts[1] in self.data else b"NOT_FOUND\r\n"
            if cmd == b"version":
                return b"VERSION 1.6.0-fake\r\n"
            if cmd == b"flush_all":
                self.data.clear()
                return b"OK\r\n"
            if cmd == b"stats":
                return b"STAT pid 1\r\nSTAT curr_items %d\r\nEND\r\n" % len(self.data)
            return b"ERROR\r\n"


def stalled_listener():
    """A loopback listening socket whose accept queue is full: a connect to it gets no answer
    (the kernel drops the SYN), which is how a connect timeout is provoked without leaving
    127.0.0.1. Returns (address, [sockets to close])."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    fillers = []
    # Fill the accept queue (never accepted); stop when a connect no longer completes.
    for _ in range(8):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
        time.sleep(0.02)
    return "127.0.0.1:%d" % port, [lsock, *fillers]
