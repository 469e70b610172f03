"""The fake server's shell: its brain in Rust (``src/fake/``), served in-process to fastmc and on
a loopback listener to everyone else.

The point of the fake is that the *real* client runs, its protocol encoders and parsers, key
placement, pooling, timeouts and failure handling included. A ``fastmc.Client`` (or
``fastmc.aio.Client``) connecting to the fake's address gets an in-process connection: the
brain answers each write synchronously in the caller's thread and the replies wait in memory,
no socket and no thread in between, and nothing of the client is replaced. Any other client
(pylibmc, a raw socket) talks to the same brain on 127.0.0.1 (a free port), whose one daemon
thread serves every connection with ``selectors``; ``in_process=False`` sends fastmc there too.

The failure switches act on both: ``down()`` closes every connection and refuses new
ones (the port stays reserved for ``up()``), ``slow(seconds)`` holds every reply that long
(``float("inf")``: never answer), ``out_of_memory`` answers every write with memcached's
``SERVER_ERROR out of memory storing object``."""

from __future__ import annotations

import contextlib
import math
import selectors
import socket
import threading
import time
from typing import Any

from fastmc._fastmc import fake_core

from ._store import DEFAULT_ITEM_SIZE_MAX, FakeClock

__all__ = ["FakeServer"]


class _Conn:
    def __init__(self, sock: socket.socket, session: Any) -> None:
        self.sock = sock
        self.session = session
        self.out = bytearray()
        self.held: list[tuple[float, bytes]] = []  # (when to send, reply) while slow
        self.writing = False  # waiting for the socket to take more of `out`


class FakeServer:
    """A fake memcached 1.6 on a free loopback port, in this process: see ``fastmc.testing``.

    ``item_size_max`` is memcached's ``-I`` (bytes); ``clock`` a ``FakeClock`` to share with
    other servers (by default each server has its own, frozen until ``advance``); ``version``
    the memcached release it answers as: 1.6.45's answers by default, 1.6.18's to malformed
    commands for an older one (the two releases it was compared with); ``in_process=False``
    makes fastmc's clients use the loopback socket as any other client does."""

    def __init__(
        self,
        *,
        item_size_max: int = DEFAULT_ITEM_SIZE_MAX,
        clock: FakeClock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        version: str = "1.6.45",
        in_process: bool = True,
    ) -> None:
        self.clock = clock if clock is not None else FakeClock()
        self._core = fake_core(self.clock._core, item_size_max, version)
        self.host = host
        self.delay = 0.0
        self._accepted = 0  # connections accepted on the socket
        self._is_down = False
        self._closed = False
        self._lock = threading.Lock()
        self._sel = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._calls: list[tuple[Any, threading.Event]] = []
        self._holding = False  # some connection has replies held back by slow()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._listener = self._listen(port)
        self.port: int = self._listener.getsockname()[1]
        self.address = "%s:%d" % (host, self.port)
        self.in_process = in_process
        if in_process:
            self._core.register(host, self.port)
        self._thread = threading.Thread(target=self._loop, name="fastmc-fake", daemon=True)
        self._thread.start()

    @property
    def accepted(self) -> int:
        """Connections opened so far, in-process and on the socket."""
        return self._accepted + int(self._core.accepted)

    # -- the test's controls ---------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        """Let `seconds` pass on this server's clock."""
        self.clock.advance(seconds)

    @property
    def out_of_memory(self) -> bool:
        """While True, every write fails as on a memcached out of memory."""
        return bool(self._core.out_of_memory)

    @out_of_memory.setter
    def out_of_memory(self, on: bool) -> None:
        self._core.out_of_memory = on

    def slow(self, seconds: float) -> None:
        """Hold every reply `seconds` before sending it (0: answer at once again; infinity:
        never answer, as a hung server)."""
        self.delay = seconds
        self._core.slow(seconds)
        self._wake()

    def down(self) -> None:
        """Close every connection and refuse new ones, as a stopped server (data is kept)."""
        with self._lock:
            if self._is_down:
                return
            self._is_down = True
        self._core.set_down(True)
        self._call(self._go_down)

    def up(self) -> None:
        """Accept connections again after ``down()``."""
        with self._lock:
            if not self._is_down:
                return
            self._is_down = False
        self._core.set_down(False)
        self._call(self._go_up)

    def drop_connections(self) -> None:
        """Close every client connection, as a restarted server would (data is kept)."""
        self._core.drop_connections()
        self._call(self._close_conns)

    def flush(self) -> None:
        """Forget every item at once."""
        self._core.flush()

    def items(self) -> dict[bytes, tuple[bytes, int, int | None]]:
        """Every live item: key -> (value, flags, seconds left or None for no expiry)."""
        items: dict[bytes, tuple[bytes, int, int | None]] = self._core.items()
        return items

    def client(self, **kwargs: Any) -> Any:
        """A ``fastmc.Client`` for this server (`kwargs` go to the client)."""
        from fastmc import Client

        return Client([self.address], **kwargs)

    def aio_client(self, **kwargs: Any) -> Any:
        """A ``fastmc.aio.Client`` for this server (`kwargs` go to the client)."""
        from fastmc.aio import Client

        return Client([self.address], **kwargs)

    def close(self) -> None:
        """Stop serving: close the listener and every connection, end the thread."""
        if self._closed:
            return
        self._closed = True
        self._core.set_down(True)  # in-process connections close too
        if self.in_process:
            self._core.unregister(self.host, self.port)
        self._wake()
        self._thread.join(5)
        self._close_conns()
        with contextlib.suppress(OSError):
            self._sel.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<FakeServer %s%s>" % (self.address, " down" if self._is_down else "")

    # -- the serving thread ----------------------------------------------------------------------
    def _listen(self, port: int, listen: bool = True) -> socket.socket:
        s = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, port))
        if listen:
            s.listen(128)
            s.setblocking(False)
            self._sel.register(s, selectors.EVENT_READ, "listener")
        return s

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _call(self, fn: Any) -> None:
        """Run `fn` on the serving thread and wait for it (socket state is that thread's)."""
        done = threading.Event()
        self._calls.append((fn, done))
        self._wake()
        done.wait(5)

    def _go_down(self) -> None:
        self._sel.unregister(self._listener)
        self._listener.close()
        self._close_conns()
        # bound but not listening: connects are refused and the port stays ours
        self._listener = self._listen(self.port, listen=False)

    def _go_up(self) -> None:
        self._listener.listen(128)
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, "listener")

    def _close_conns(self) -> None:
        for c in list(self._conns.values()):
            self._drop(c)

    def _drop(self, c: _Conn) -> None:
        self._conns.pop(c.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.unregister(c.sock)
        c.sock.close()

    def _loop(self) -> None:
        while not self._closed:
            timeout = self._next_due()
            for key, mask in self._sel.select(timeout):
                if key.data == "listener":
                    self._accept()
                elif key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif mask & selectors.EVENT_WRITE:
                    self._flush(key.data)
                else:
                    self._serve(key.data)
            while self._calls:
                fn, done = self._calls.pop(0)
                fn()
                done.set()
            if self._holding:
                self._release_held()

    def _next_due(self) -> float | None:
        if not self._holding:
            return None
        held = [c.held[0][0] for c in self._conns.values() if c.held]
        due = min(held, default=math.inf)
        return None if math.isinf(due) else max(0.0, due - time.monotonic())

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = _Conn(sock, self._core.session())
        self._accepted += 1
        self._conns[sock.fileno()] = c
        self._sel.register(sock, selectors.EVENT_READ, c)
        # a client's first request usually follows its connect at once: serving it now keeps
        # it in order with what its other connections sent meanwhile
        self._serve(c)

    def _serve(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(c)
            return
        reply = c.session.feed(data)
        if self.delay > 0 and reply:
            c.held.append((time.monotonic() + self.delay, reply))
            self._holding = True
        elif reply:
            self._send(c, reply)
        if c.session.closing and not c.held:
            self._drop(c)

    def _release_held(self) -> None:
        now = time.monotonic()
        for c in list(self._conns.values()):
            while c.held and (c.held[0][0] <= now or self.delay <= 0):
                self._send(c, c.held.pop(0)[1])
        self._holding = any(c.held for c in self._conns.values())

    def _send(self, c: _Conn, data: bytes) -> None:
        c.out += data
        self._flush(c)

    def _flush(self, c: _Conn) -> None:
        """Send what the socket takes; wait for it to take more while anything is left (the
        connection is not read meanwhile, as memcached stops reading a client that does not
        read its replies)."""
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            n = 0
        except OSError:
            self._drop(c)
            return
        del c.out[:n]
        if bool(c.out) != c.writing:
            c.writing = bool(c.out)
            events = selectors.EVENT_WRITE if c.writing else selectors.EVENT_READ
            with contextlib.suppress(KeyError, ValueError):
                self._sel.modify(c.sock, events, c)
