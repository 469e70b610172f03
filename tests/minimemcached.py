"""A tiny in-process memcached for the tests that a real server cannot serve: one that knows only
the classic text commands (like memcached before 1.6, or a proxy), one that closes the
connection on a command it does not know, one that fails chosen keys with a server error. It
records every byte it receives. It speaks enough of the protocol for the multi-key operations:
get/gets, set/add/replace, delete, version, and (with ``meta=True``) ms/md/mn with the q and O
flags. Also a pass-through relay to a real server that records what the client sends."""

import socket
import threading
import time

from testkit import listener


class MiniMemcached:
    def __init__(self, meta=False, unknown="error", server_error_keys=(), loud_errors=False):
        self.meta = meta
        # loud_errors: answer a failing noreply command anyway (as memcached does for a
        # CLIENT_ERROR), to test that such an answer is never taken for another reply
        self.loud_errors = loud_errors
        self.unknown = unknown  # "error": answer ERROR; "close": hang up
        self.server_error_keys = set(server_error_keys)
        self.data = {}
        self.received = bytearray()
        self.cmds = []
        self.lock = threading.Lock()
        self.sock, self.address = listener(64)
        self.conns = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def commands(self):
        """The command words received, in order."""
        with self.lock:
            return list(self.cmds)

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        while True:
            try:
                chunk = c.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            with self.lock:
                self.received += chunk
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
                if reply is None:
                    if out:
                        c.sendall(b"".join(out))
                    c.close()
                    return
                out.append(reply)
            if out:
                c.sendall(b"".join(out))

    def _handle(self, cmd, parts, data):
        d = self.data
        if cmd in (b"get", b"gets"):
            out = []
            for k in parts[1:]:
                if k in d:
                    flags, v = d[k]
                    cas = b" 1" if cmd == b"gets" else b""
                    out.append(b"VALUE %s %d %d%s\r\n%s\r\n" % (k, flags, len(v), cas, v))
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
        if self.unknown == "close":
            return None
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

    def close(self):
        self.closed = True
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


class Relay:
    """Forwards connections to a real server and records what the client sends."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.sent = bytearray()
        self.lock = threading.Lock()
        self.sock, self.address = listener(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def take(self):
        """What the client sent since the last call."""
        with self.lock:
            out = bytes(self.sent)
            self.sent.clear()
        return out

    def take_until(self, done, timeout=5.0):
        """What the client sent since the last call, once `done(bytes)` holds (writes that are
        not waited for may still be on their way through the relay)."""
        deadline = time.monotonic() + timeout
        got = b""
        while True:
            got += self.take()
            if done(got) or time.monotonic() > deadline:
                return got
            time.sleep(0.01)

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(c, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, c, False), daemon=True).start()

    def _pump(self, src, dst, record):
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            if record:
                with self.lock:
                    self.sent += chunk
            dst.sendall(chunk)

    def close(self):
        self.sock.close()
