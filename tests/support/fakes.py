"""In-process fake servers, for what a real memcached cannot be made to do.

``ScriptedServer`` is the one socket skeleton they all share: a listener on a free loopback port,
an accept thread, a thread per connection, a record of every byte received (``received``,
``take()``), the count and list of connections accepted, and ``close()``, which stops listening
and closes every connection. On its own it answers every read with the same bytes
(``ScriptedServer(b"HELLO\\r\\n")``), or with nothing (``ScriptedServer()``: a server that
reads and never answers). Each subclass only says how a connection is served:

- ``FakeMemcached``: the classic text protocol from a dict, with per-key fault rules (the fault
  suite's server: adding a fault means adding a rule there);
- ``MiniMemcached``: a classic server (like memcached before 1.6, or a proxy) that can also speak
  the meta commands of quiet batches, close on unknown commands or fail chosen keys;
- ``Relay``: a pass-through to a real memcached;
- ``PacedRelay``: a relay that holds the server's replies until the client has been quiet a
  moment, and counts those rounds;
- ``AuthRecorder``: a binary-protocol server that records what reaches it around SASL
  authentication.

``stalled_listener()`` is not a server at all: a port whose connects never complete.
"""

import contextlib
import socket
import struct
import threading
import time


class ScriptedServer:
    """A fake server on a free port of `host` (or on `port`): see the module docstring.
    ``rcvbuf`` shrinks the receive buffer of every accepted connection."""

    def __init__(self, reply=b"", *, host="127.0.0.1", port=0, rcvbuf=None):
        self.reply = reply
        self.received = bytearray()  # every byte read from any connection, in order
        self.accepted = 0
        self.conns = []  # the accepted connections (and a relay's upstream ones)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._serving = []  # one thread per accepted connection
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf:
            # inherited by accepted sockets: a peer that does not read stops taking bytes at once
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind((host, port))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.address = "%s:%d" % (host, self.port)
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    # -- for subclasses and tests ----------------------------------------------------------------
    def serve(self, conn, cid):
        """Serve one connection (`cid` counts them from 1) until it ends; EOFError and OSError
        end it quietly. Here: answer every read with ``reply``."""
        while self.recv(conn):
            if self.reply:
                conn.sendall(self.reply)

    def recv(self, conn, n=65536):
        """One read from `conn`, recorded in ``received``; b"" when the peer has closed."""
        chunk = conn.recv(n)
        with self.lock:
            self.received += chunk
        return chunk

    def take(self):
        """What was received since the last call."""
        with self.lock:
            out = bytes(self.received)
            self.received.clear()
        return out

    def take_until(self, done, timeout=5.0):
        """What was received since the last call, once `done(bytes)` holds (bytes the client did
        not wait for may still be on their way)."""
        deadline = time.monotonic() + timeout
        got = b""
        while True:
            got += self.take()
            if done(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.01)

    def join(self, timeout=5.0):
        """Wait until every connection accepted so far has been served to its end."""
        deadline = time.monotonic() + timeout
        with self.lock:
            threads = list(self._serving)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def drop_connections(self):
        """Close every connection, as a restarted server would."""
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading it
            c.close()

    def close(self):
        self.stopping.set()
        with contextlib.suppress(OSError):
            # wakes the accept(); a bare close() would leave the socket listening until then
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._acceptor.join(5)
        self.drop_connections()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the skeleton ----------------------------------------------------------------------------
    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.stopping.is_set():
                c.close()
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.accepted += 1
                self.conns.append(c)
                t = threading.Thread(target=self._run, args=(c, self.accepted), daemon=True)
                self._serving.append(t)
            t.start()

    def _run(self, conn, cid):
        try:
            self.serve(conn, cid)
        except (EOFError, OSError):
            pass  # the peer, or close(), ended the connection
        finally:
            conn.close()


# -- FakeMemcached: per-key fault rules --------------------------------------------------------

STORAGE = {b"set", b"add", b"replace", b"append", b"prepend", b"cas"}


class LineServer(ScriptedServer):
    """Answers each request line with ``answer(line)`` (b"" for none: a data block's line, say)."""

    def answer(self, line):
        return b"ERROR\r\n"

    def serve(self, conn, cid):
        buf = b""
        while True:
            chunk = self.recv(conn)
            if not chunk:
                return
            buf += chunk
            while b"\r\n" in buf:
                line, buf = buf.split(b"\r\n", 1)
                reply = self.answer(line)
                if reply:
                    conn.sendall(reply)


class _Stop(Exception):
    """Stop serving this connection (``close`` says whether to close it or to hang)."""

    def __init__(self, close):
        super().__init__()
        self.close = close


class FakeMemcached(ScriptedServer):
    """A scriptable fake memcached (classic text protocol only) for fault injection.

    It answers the classic commands from an in-memory dict, like a real server, until a rule
    says otherwise. Rules are set per key (``fake.rule(key, action)``) and fire whenever a
    command names that key:

    - ``"hang"``: stop answering (the reply so far is sent, nothing after);
    - ``"hang_once"``: ``"hang"`` this once, then the rule is gone: the connection stalls as a
      lossy link stalls it, and the next connection is served (a write is not executed);
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

    Server-wide options: ``trickle`` sends every reply one byte at a time; ``delay`` pauses
    before every reply; ``read=False`` accepts connections but never reads (a stalled peer for
    send timeouts; ``rcvbuf`` shrinks its receive buffer so that it stalls at once).
    ``drop_connections()`` closes every client connection as a restarted server would;
    ``commands`` records every command line received with the id of its connection, ``times``
    when each arrived, ``closed_by_client`` how many connections the client closed.
    """

    def __init__(
        self, *, trickle=False, delay=0.0, read=True, host="127.0.0.1", port=0, rcvbuf=None
    ):
        self.trickle = trickle
        self.delay = delay
        self.read = read
        self.rules = {}
        self.data = {}  # key -> (flags, bytes, cas)
        self.cas_counter = 0
        self.commands = []  # (connection id, command line)
        self.times = []  # when each command arrived
        self.closed_by_client = 0
        super().__init__(host=host, port=port, rcvbuf=rcvbuf)

    # -- scripting -------------------------------------------------------------------------------
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
        if forget:
            with self.lock:
                self.data.clear()
        super().drop_connections()

    # -- serving ---------------------------------------------------------------------------------
    def _client_closed(self):
        with self.lock:
            self.closed_by_client += 1

    def _hang(self, c):
        """Answer nothing more; notice when the client gives up on the connection."""
        c.settimeout(0.05)
        while not self.stopping.is_set():
            try:
                if self.recv(c) == b"":
                    self._client_closed()
                    return
            except socket.timeout:
                continue

    def _send(self, c, data):
        if not data:
            return
        if self.trickle:
            for i in range(len(data)):
                c.sendall(data[i : i + 1])
                time.sleep(0.0003)
        else:
            c.sendall(data)

    def _log(self, cid, line):
        with self.lock:
            self.commands.append((cid, line))
            self.times.append(time.monotonic())

    def serve(self, c, cid):
        if not self.read:
            self.stopping.wait()
            return
        buf = bytearray()

        def need(n):
            while len(buf) < n:
                chunk = self.recv(c)
                if not chunk:
                    raise EOFError
                buf.extend(chunk)

        try:
            while not self.stopping.is_set():
                while b"\r\n" not in buf:
                    chunk = self.recv(c)
                    if not chunk:
                        self._client_closed()
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
                    self._log(cid, line)
                    self._send(c, early[6:].encode() + b"\r\n")
                    left = int(parts[4]) + 2
                    while left > 0:
                        if not buf:
                            need(1)
                        n = min(left, len(buf))
                        del buf[:n]
                        left -= n
                    continue
                if parts and parts[0] in STORAGE and len(parts) >= 5:
                    n = int(parts[4])
                    need(n + 2)
                    data = bytes(buf[:n])
                    del buf[: n + 2]
                self._log(cid, line)
                if self.delay:
                    time.sleep(self.delay)
                self._handle(c, parts, data)
        except _Stop as s:
            if s.close:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
            else:
                self._hang(c)
        except (ValueError, IndexError):
            pass  # a command line this fake does not parse: hang up

    def _action(self, key):
        with self.lock:
            act = self.rules.get(key)
            if act == "hang_once":
                del self.rules[key]
                act = "hang"
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
                if (cmd == b"add" and have) or (
                    cmd in (b"replace", b"append", b"prepend") and not have
                ):
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


# -- MiniMemcached: classic or meta, for the multi-key write paths ----------------------------


class MiniMemcached(ScriptedServer):
    """A tiny memcached for the multi-key operations: get/gets, set/add/replace, delete,
    version, and (with ``meta=True``) ms/md/mn with the q and O flags. ``unknown`` says what it
    does with any other command: "error" answers ERROR, "close" hangs up (what was answered
    before is sent first), "drop" hangs up dropping every answer not yet sent (as twemproxy
    does), "ignore" never answers it. Keys in ``server_error_keys`` fail with a SERVER_ERROR;
    ``loud_errors`` answers that error even to a noreply command (as memcached does for a
    CLIENT_ERROR), to test that such an answer is never taken for another reply.

    Proxies: keys in ``backend_errors`` are answered in a multi-key get by a ``SERVER_ERROR
    backend failure`` line in place of their value, and alone in a get by that line only (as
    memcached's proxy answers keys whose backend failed); ``reorder`` answers the hits of a
    multi-key get in reverse order (as twemproxy may). ``commands()`` lists the command words
    received."""

    def __init__(
        self,
        meta=False,
        unknown="error",
        server_error_keys=(),
        loud_errors=False,
        backend_errors=(),
        reorder=False,
    ):
        self.meta = meta
        self.loud_errors = loud_errors
        self.unknown = unknown
        self.server_error_keys = set(server_error_keys)
        self.backend_errors = {k.encode() if isinstance(k, str) else k for k in backend_errors}
        self.reorder = reorder
        self.data = {}
        self.cmds = []
        super().__init__()

    def commands(self):
        """The command words received, in order."""
        with self.lock:
            return list(self.cmds)

    def serve(self, c, cid):
        buf = b""
        while True:
            chunk = self.recv(c)
            if not chunk:
                return
            buf += chunk
            out = []
            while True:
                nl = buf.find(b"\r\n")
                if nl < 0:
                    break
                line = buf[:nl]
                parts = line.split(b" ")
                cmd = parts[0]
                need = 0
                if cmd in (b"set", b"add", b"replace"):
                    need = int(parts[4]) + 2
                elif cmd == b"ms" and self.meta:
                    need = int(parts[2]) + 2
                if len(buf) < nl + 2 + need:
                    break
                with self.lock:
                    self.cmds.append(cmd)
                data = buf[nl + 2 : nl + 2 + need - 2]
                buf = buf[nl + 2 + need :]
                reply = self._handle(cmd, parts, data)
                if reply is None:  # hang up (what was answered so far is sent first)
                    if out and self.unknown != "drop":
                        c.sendall(b"".join(out))
                    return
                out.append(reply)
            if out:
                c.sendall(b"".join(out))

    def _handle(self, cmd, parts, data):
        d = self.data
        if cmd in (b"get", b"gets"):
            keys = parts[1:]
            if len(keys) == 1 and keys[0] in self.backend_errors:
                return b"SERVER_ERROR backend failure\r\n"
            out = []
            for k in keys:
                if k in self.backend_errors:
                    out.append(b"SERVER_ERROR backend failure\r\n")
                elif k in d:
                    flags, v = d[k]
                    cas = b" 1" if cmd == b"gets" else b""
                    out.append(b"VALUE %s %d %d%s\r\n%s\r\n" % (k, flags, len(v), cas, v))
            if self.reorder:
                out.reverse()
            return b"".join(out) + b"END\r\n"
        if cmd in (b"set", b"add", b"replace"):
            k, flags = parts[1], int(parts[2])
            noreply = parts[-1] == b"noreply"
            if k in self.server_error_keys:
                quiet = noreply and not self.loud_errors
                return b"" if quiet else b"SERVER_ERROR out of memory storing object\r\n"
            if (cmd == b"add" and k in d) or (cmd == b"replace" and k not in d):
                return b"" if noreply else b"NOT_STORED\r\n"
            d[k] = (flags, data)
            return b"" if noreply else b"STORED\r\n"
        if cmd == b"delete":
            found = d.pop(parts[1], None) is not None
            if parts[-1] == b"noreply":
                return b""
            return b"DELETED\r\n" if found else b"NOT_FOUND\r\n"
        if cmd == b"version":
            return b"VERSION 1.4.25\r\n"
        if self.meta and cmd in (b"ms", b"md", b"mn"):
            return self._meta(cmd, parts, data)
        if self.unknown in ("close", "drop"):
            return None
        if self.unknown == "ignore":
            return b""
        return b"ERROR\r\n"

    def _meta(self, cmd, parts, data):
        if cmd == b"mn":
            return b"MN\r\n"
        d = self.data
        flags = {p[:1]: p[1:] for p in parts[2:]}
        quiet = b"q" in flags
        opaque = b" O" + flags[b"O"] if b"O" in flags else b""
        k = parts[1]
        if cmd == b"md":
            found = d.pop(k, None) is not None
            if found:
                return b"" if quiet else b"HD" + opaque + b"\r\n"
            return b"NF" + opaque + b"\r\n"
        if k in self.server_error_keys:
            return b"SERVER_ERROR out of memory storing object\r\n"
        mode = flags.get(b"M", b"S")
        if (mode == b"E" and k in d) or (mode == b"R" and k not in d):
            return b"NS" + opaque + b"\r\n"
        d[k] = (int(flags.get(b"F", b"0")), data)
        return b"" if quiet else b"HD" + opaque + b"\r\n"


# -- Relay, AuthRecorder ----------------------------------------------------------------------


class Relay(ScriptedServer):
    """Forwards every connection to a real server on `target_port` of 127.0.0.1; what the
    client sends is recorded (``take()``, ``take_until()``). ``lose = n`` drops the next `n`
    reads from clients instead of forwarding them (requests lost on the way: their connections
    stall, any other connection is served)."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.lose = 0
        super().__init__()

    def _lost(self):
        with self.lock:
            if self.lose > 0:
                self.lose -= 1
                return True
            return False

    def upstream(self, c):
        """A connection to the target for client connection `c`, and the thread that sends its
        replies back to `c`."""
        up = socket.create_connection(("127.0.0.1", self.target_port))
        with self.lock:
            self.conns.append(up)
        back = threading.Thread(target=self._pump_back, args=(up, c), daemon=True)
        back.start()
        return up, back

    def serve(self, c, cid):
        up, back = self.upstream(c)
        try:
            while True:
                chunk = self.recv(c)  # recorded before it is forwarded
                if not chunk:
                    return
                if not self._lost():
                    up.sendall(chunk)
        finally:
            self._hang_up(c, up)
            back.join(5)
            up.close()

    def _pump_back(self, up, c):
        """The server's replies to the client, unrecorded."""
        try:
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    return
                self.deliver(c, chunk)
        except OSError:
            pass
        finally:
            self._hang_up(c, up)

    def deliver(self, c, chunk):
        """Hand a reply from the server to client connection `c`."""
        c.sendall(chunk)

    @staticmethod
    def _hang_up(*socks):
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


class PacedRelay(Relay):
    """A relay that holds the server's replies until no client has sent anything for `quiet`
    seconds, then lets them all go: ``rounds`` counts those releases. Requests that are in
    flight together take one round; requests that each wait for the one before take one each."""

    def __init__(self, target_port, quiet=0.05):
        self.quiet = quiet
        self.held = []  # (client connection, reply bytes)
        self.rounds = 0
        self.last_in = time.monotonic()
        super().__init__(target_port)
        self._pacer = threading.Thread(target=self._pace, daemon=True)
        self._pacer.start()

    def recv(self, conn, n=65536):
        chunk = super().recv(conn, n)
        with self.lock:
            self.last_in = time.monotonic()
        return chunk

    def deliver(self, c, chunk):
        with self.lock:
            self.held.append((c, chunk))

    def _pace(self):
        while not self.stopping.is_set():
            time.sleep(self.quiet / 5)
            with self.lock:
                if not self.held or time.monotonic() - self.last_in < self.quiet:
                    continue
                held, self.held = self.held, []
                self.rounds += 1
            for c, chunk in held:
                with contextlib.suppress(OSError):
                    c.sendall(chunk)


def binary_header(opcode, status=0, opaque=0, body_len=0):
    """A binary-protocol response header (magic 0x81) with no key and no extras."""
    return struct.pack(">BBHBBHIIQ", 0x81, opcode, 0, 0, 0, status, body_len, opaque, 0)


class AuthRecorder(ScriptedServer):
    """A binary-protocol server that records every request as (opcode, body) in ``requests``:
    it answers SASL_AUTH with success when `ok` (else with an auth error), NOOP with an empty
    answer (so gets end as misses), and nothing else. Shows what reaches a server before
    authentication."""

    def __init__(self, ok):
        self.ok = ok
        self.requests = []
        super().__init__()

    def _read(self, c, n):
        buf = b""
        while len(buf) < n:
            chunk = self.recv(c, n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def serve(self, c, cid):
        c.settimeout(5)
        while True:
            head = self._read(c, 24)
            body = self._read(c, struct.unpack(">I", head[8:12])[0])
            opcode = head[1]
            with self.lock:
                self.requests.append((opcode, body))
            if opcode == 0x21:  # SASL_AUTH
                msg = b"Authenticated." if self.ok else b"Auth failure."
                status = 0 if self.ok else 0x20
                c.sendall(binary_header(0x21, status=status, body_len=len(msg)) + msg)
            elif opcode == 0x0A:  # NOOP
                c.sendall(binary_header(0x0A, opaque=struct.unpack(">I", head[12:16])[0]))


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
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        fillers.append(s)
        time.sleep(0.02)
    return "127.0.0.1:%d" % port, [lsock, *fillers]
