#!/usr/bin/env python3
"""fastmc benchmark suite: fastmc side by side with the floor and the peers, in one run.

    python benches/bench.py [--servers host:port,...] [--quick] [--scenarios a,b,...]
                            [--out results] [--strict]

Every figure is measured in this run, with the clients interleaved round by round, and quoted as
a median. Every result is also quoted as fastmc's ratio to the floor (a raw pipelined socket batch
from Python, no parsing) and to each peer (pylibmc, pylibmc binary, pymemcache with acknowledged
writes, libmc, python-memcached). Every scenario checks what it reads back. The Markdown tables and
the speed-up chart are written under ``--out``; a summary marks each target PASS or FAIL.

Exit status: 0 when everything ran and verified; 1 when fastmc could not be imported (the other
columns are still measured); 2 when a client read back a wrong or missing value or raised; with
``--strict`` also 3 when a target failed.

Development aid: ``FASTMC_BENCH_MODULE=pylibmc`` fills the fastmc column with another module that
has pylibmc's API (marked as a stand-in everywhere), to exercise the suite before fastmc builds.

See benches/README.md for what each scenario measures.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime
import functools
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

perf_counter = time.perf_counter
process_time = time.process_time

VALUE_SIZE = 40  # bytes, as in benchmarks.md
FASTMC_MODULE_ENV = "FASTMC_BENCH_MODULE"
PEERS = ("pylibmc", "pylibmc binary", "pymemcache", "libmc", "python-memcached")
SCENARIOS = ("single", "multi", "simple_vs_multi", "speedup", "noreply", "bulk", "threads", "memory")
MULTI_SIZES = (100, 1_000, 10_000)
SPEEDUP_SIZES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000)
BANNER = "!" * 78


# ---------------------------------------------------------------------------------------------
# Settings: --quick versus the full run
# ---------------------------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool
    single_ops: int  # single operations per timed loop
    single_rounds: int
    multi_rounds: dict  # keys -> rounds
    simple_keys: int
    simple_rounds: int
    speedup_rounds: int
    noreply_keys: int
    noreply_rounds: int
    bulk_keys: int
    bulk_batch: int
    bulk_peer_budget: float  # seconds per phase for a peer too slow to load everything
    threads: int
    thread_ops: int  # operations per thread per round
    thread_rounds: int
    memory_rounds: int
    memory_keys: int

    @classmethod
    def make(cls, quick: bool) -> "Settings":
        if quick:
            return cls(True, 1_000, 3, {100: 25, 1_000: 9, 10_000: 3}, 10_000, 1, 2,
                       1_000, 2, 200_000, 1_000, 1.5, 8, 500, 3, 20, 2_000)
        return cls(False, 3_000, 7, {100: 101, 1_000: 41, 10_000: 11}, 10_000, 3, 5,
                   1_000, 5, 2_000_000, 1_000, 6.0, 8, 1_000, 5, 40, 2_000)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


class Failures:
    """Wrong or missing read-backs and client errors: printed loudly at once and at the end."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, client: str, what: str) -> None:
        msg = f"{where}: {client}: {what}"
        self.items.append(msg)
        print(f"\n{BANNER}\nVERIFICATION FAILURE  {msg}\n{BANNER}\n", file=sys.stderr, flush=True)


FAILURES = Failures()


def median(xs: list[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def rotated(seq: list, r: int) -> list:
    """The clients in a different order each round, so no client always runs first."""
    if not seq:
        return []
    r %= len(seq)
    return seq[r:] + seq[:r]


def values_for(keys: list[str], salt: str) -> list[bytes]:
    """Distinct 40-byte values that name their key and round: a mix-up cannot go unnoticed."""
    return [(k + salt).encode().ljust(VALUE_SIZE, b"-")[:VALUE_SIZE] for k in keys]


def timed(fn: Callable, *args: Any) -> tuple[float, Any]:
    """Wall time of one call, garbage collector off as in timeit."""
    gc.disable()
    try:
        t0 = perf_counter()
        res = fn(*args)
        t1 = perf_counter()
    finally:
        gc.enable()
    return t1 - t0, res


def timed_cpu(fn: Callable, *args: Any) -> tuple[float, float, Any]:
    """Wall and client CPU (time.process_time: all threads of this process) of one call."""
    gc.disable()
    try:
        c0 = process_time()
        t0 = perf_counter()
        res = fn(*args)
        t1 = perf_counter()
        c1 = process_time()
    finally:
        gc.enable()
    return t1 - t0, c1 - c0, res


def fmt_num(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_ratio(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def read_rss() -> int:
    """Resident set size of this process in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _tasks(pid: str) -> list:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(ctx: "Ctx"):
    """Run this process (all its threads) and the servers bench.py started on one CPU.

    On a small VM a loopback round trip costs ~7 µs when client and server share a CPU and
    ~80 µs when the server must be woken on another (idle) vCPU; the scheduler flips between the
    two every few milliseconds, so unpinned measurements record placement luck, in wall time and
    in client CPU alike (the wake-up is charged to the client). On one CPU every client pays for
    the server's work the same way and the medians repeat from run to run."""
    pids = ctx.pin_pids
    if not pids or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    cpu = max(os.sched_getaffinity(0))
    saved = []
    try:
        for pid in ["self"] + [str(p) for p in pids]:
            for tid in _tasks(pid):
                with contextlib.suppress(OSError):
                    saved.append((tid, os.sched_getaffinity(tid)))
                    os.sched_setaffinity(tid, {cpu})
        yield True
    finally:
        for tid, cpus in saved:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


def pkg_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ---------------------------------------------------------------------------------------------
# Throwaway memcached servers
# ---------------------------------------------------------------------------------------------


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Memcached:
    """One memcached process on a free port of 127.0.0.1, killed at exit."""

    ALL: list["Memcached"] = []

    def __init__(self, memory_mb: int = 1024, threads: int = 2) -> None:
        binary = os.environ.get("MEMCACHED") or shutil.which("memcached") or "/usr/bin/memcached"
        last_err = ""
        for _attempt in range(5):
            self.port = free_port()
            self.args = [binary, "-l", "127.0.0.1", "-p", str(self.port), "-U", "0",
                         "-m", str(memory_mb), "-t", str(threads), "-c", "4096"]
            if os.geteuid() == 0:
                self.args += ["-u", "root"]  # memcached refuses to run as root without -u
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
            Memcached.ALL.append(self)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                    return
                except OSError:
                    time.sleep(0.02)
            self.stop()
            last_err = (self.proc.stderr.read() or b"").decode(errors="replace")
        raise RuntimeError(f"could not start memcached ({' '.join(self.args)}): {last_err}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=5)

    @classmethod
    def stop_all(cls) -> None:
        for m in cls.ALL:
            with contextlib.suppress(Exception):
                m.stop()


atexit.register(Memcached.stop_all)


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "127.0.0.1", int(port)


def server_command(addr: str, line: bytes) -> bytes:
    """One command on a fresh connection; returns the reply up to END/MN/VERSION or an error."""
    with socket.create_connection(split_addr(addr), timeout=5) as s:
        s.sendall(line)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return buf
            buf += chunk
            if buf.endswith((b"END\r\n", b"MN\r\n", b"ERROR\r\n")) or buf.startswith(b"VERSION "):
                return buf


def server_info(addr: str) -> dict:
    info: dict = {"address": addr}
    info["version"] = server_command(addr, b"version\r\n").decode().strip()
    info["meta"] = server_command(addr, b"mn\r\n") == b"MN\r\n"
    stats = server_command(addr, b"stats\r\n").decode(errors="replace")
    for line in stats.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT" and parts[1] in ("limit_maxbytes", "threads"):
            info[parts[1]] = int(parts[2])
    return info


# ---------------------------------------------------------------------------------------------
# The clients: one column each. Operations are the libraries' own bound methods (no wrapper
# layer on the hot path); loops are timed as a whole.
# ---------------------------------------------------------------------------------------------


class Column:
    """A client library configured one way: its operations as plain callables."""

    kind = "peer"

    def __init__(self, name: str, tag: str) -> None:
        self.name = name
        self.tag = tag  # short, fixed-length key prefix: every client has its own keys
        self.get = self.set = self.delete = self.incr = None
        self.get_multi = self.set_multi = self.delete_multi = None
        self.set_nr = self.delete_nr = self.set_multi_nr = self.delete_multi_nr = None
        self.sync_nr: Optional[Callable] = None  # after noreply calls: wait until all applied
        self.threads_factory: Optional[Callable] = None  # -> (per-thread (get, set) maker, note)
        self.note = ""

    def keys(self, scope: str, n: int, start: int = 0) -> list[str]:
        return [f"{self.tag}:{scope}:{i:07d}" for i in range(start, start + n)]

    # --- loops of single operations (timed as a whole) ---
    def loop_set(self, items: list) -> int:
        f = self.set
        bad = 0
        for k, v in items:
            if not f(k, v):
                bad += 1
        return bad

    def loop_get(self, items: list) -> int:
        f = self.get
        bad = 0
        for k, v in items:
            if f(k) != v:
                bad += 1
        return bad

    def loop_delete(self, keys: list) -> int:
        f = self.delete
        bad = 0
        for k in keys:
            if not f(k):
                bad += 1
        return bad

    def loop_incr(self, key: str, n: int) -> Any:
        f = self.incr
        r = None
        for _ in range(n):
            r = f(key, 1)
        return r

    def loop_set_nr(self, items: list) -> int:
        f = self.set_nr
        for k, v in items:
            f(k, v)
        return 0

    def loop_delete_nr(self, keys: list) -> int:
        f = self.delete_nr
        for k in keys:
            f(k)
        return 0

    # --- checks of results (never timed) ---
    def stored_ok(self, res: Any, n: int) -> bool:
        return res is True or (isinstance(res, (list, tuple, set)) and not res)

    def deleted_ok(self, res: Any, n: int) -> bool:
        return bool(res)

    def nr_ok(self, res: Any, n: int) -> bool:
        return True  # noreply writes are checked by reading back

    def decode_get(self, res: Any, keys: list) -> dict:
        return res

    def read_back(self, keys: list) -> dict:
        return self.decode_get(self.get_multi(keys), keys)

    def read_counter(self, key: str) -> int:
        v = self.get(key)
        return int(v) if v is not None else -1

    def set_counter(self, key: str) -> None:
        self.set(key, b"0")


# --- the floor: raw sockets, no parsing -------------------------------------------------------


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
    """Raw pipelined socket batch from Python, as ../shared/benchmarks.md defines the floor: one
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

    def _parts(self, seq: list) -> list:
        n = len(self.socks)
        return [seq] if n == 1 else [seq[i::n] for i in range(n)]

    # Each batch: the requests for every server (built in Python), then one _run.
    def _set_blobs(self, mapping: dict, quiet: bool) -> list:
        if self.proto == "text":
            fmt = b"set %s 0 0 %d noreply\r\n%s\r\n" if quiet else b"set %s 0 0 %d\r\n%s\r\n"
        else:
            fmt = b"ms %s %d q\r\n%s\r\n" if quiet else b"ms %s %d\r\n%s\r\n"
        return [b"".join([fmt % (k.encode(), len(v), v) for k, v in part]) + self.marker
                for part in self._parts(list(mapping.items()))]

    def _get_blobs(self, keys: list) -> list:
        cmd, opts = (b"get ", b"\r\n") if self.proto == "text" else (b"mg ", b" v f\r\n")
        return [b"".join([cmd + k.encode() + opts for k in p]) + self.marker
                for p in self._parts(keys)]

    def _del_blobs(self, keys: list, quiet: bool) -> list:
        if self.proto == "text":
            pre, post = b"delete ", b" noreply\r\n" if quiet else b"\r\n"
        else:
            pre, post = b"md ", b" q\r\n" if quiet else b"\r\n"
        return [b"".join([pre + k.encode() + post for k in p]) + self.marker
                for p in self._parts(keys)]

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
        fmt = b"set %s 0 0 %d noreply\r\n%s\r\n" if self.proto == "text" else b"ms %s %d q\r\n%s\r\n"
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
            drive(self.socks, [self.marker] * len(self.socks),
                  [self.marker_reply] * len(self.socks))

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
                    return r[r.index(b"\r\n") + 2:-7]  # only to let the worker check it

                def set_(k: str, v: bytes) -> bool:
                    return roundtrip(s, b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v), v),
                                     b"\r\n") == b"STORED\r\n"
            else:
                def get(k: str) -> bytes:
                    r = roundtrip(s, b"mg " + k.encode() + b" v f\r\n" + marker, marker_reply)
                    return r[r.index(b"\r\n") + 2:-6]

                def set_(k: str, v: bytes) -> bool:
                    return roundtrip(s, b"ms %s %d\r\n%s\r\n" % (k.encode(), len(v), v),
                                     b"\r\n") == b"HD\r\n"
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
    least turn its arguments into requests and the replies into Python objects, cannot beat it."""

    kind = "reference"

    def __init__(self, name: str, tag: str, servers: list, meta_ok: bool) -> None:
        super().__init__(name, tag, servers, "meta" if meta_ok else "text", meta_ok)
        self.ready: dict = {}
        self.get_multi, self.set_multi, self.delete_multi = self._b_get, self._b_set, self._b_del

    def prepare(self, op: str, arg: Any) -> None:
        if op == "set_multi":
            self.ready[op] = self._set_blobs(arg, True)
        elif op == "get_multi":
            self.ready[op] = [("get " + " ".join(p) + "\r\n").encode() for p in self._parts(arg)]
        else:
            self.ready[op] = self._del_blobs(arg, True)

    def _take(self, op: str, arg: Any) -> list:
        """The requests `prepare` built for `op` (built now if it was not called)."""
        if op not in self.ready:
            self.prepare(op, arg)
        return self.ready.pop(op)

    def _b_set(self, mapping: dict) -> list:
        return self._run(self._take("set_multi", mapping), self.marker_reply)

    def _b_get(self, keys: list) -> tuple:
        return self._parts(keys), self._run(self._take("get_multi", keys), b"END\r\n")

    def _b_del(self, keys: list) -> list:
        return self._run(self._take("delete_multi", keys), self.marker_reply)

    # Quiet writes answer only the marker when every key succeeded (meta); text `noreply`
    # answers nothing either way, and the read-back checks it.
    def stored_ok(self, res: Any, n: int) -> bool:
        return self.nr_ok(res, n)

    def deleted_ok(self, res: Any, n: int) -> bool:
        return self.nr_ok(res, n)

    def decode_get(self, res: Any, keys: list) -> dict:
        parts, replies = res
        out: dict = {}
        for buf in replies:
            lines = buf.split(b"\r\n")
            for i, line in enumerate(lines):
                if line.startswith(b"VALUE "):
                    out[line.split()[1].decode()] = lines[i + 1]
        return out


# --- fastmc and the peers ----------------------------------------------------------------------


def _accepts_noreply(fn: Callable, *args: Any) -> bool:
    try:
        fn(*args, noreply=True)
        return True
    except TypeError:
        return False


def make_fastmc(mod: Any, modname: str, servers: list, tag: str, binary: bool = False) -> Column:
    label = "fastmc" if modname == "fastmc" else f"fastmc [stand-in: {modname}]"
    c = Column(label + (" binary" if binary else ""), tag)
    c.kind = "fastmc binary" if binary else "fastmc"
    mc = mod.Client(servers, binary=binary)
    c.mc = mc
    c.get, c.set, c.delete, c.incr = mc.get, mc.set, mc.delete, mc.incr
    c.get_multi, c.set_multi, c.delete_multi = mc.get_multi, mc.set_multi, mc.delete_multi
    probe = f"{tag}:probe"
    if _accepts_noreply(mc.set, probe, b"x"):
        c.set_nr = functools.partial(mc.set, noreply=True)
    if _accepts_noreply(mc.delete, probe):
        c.delete_nr = functools.partial(mc.delete, noreply=True)
    if _accepts_noreply(mc.set_multi, {probe: b"x"}):
        c.set_multi_nr = functools.partial(mc.set_multi, noreply=True)
    if _accepts_noreply(mc.delete_multi, [probe]):
        c.delete_multi_nr = functools.partial(mc.delete_multi, noreply=True)
    c.sync_nr = functools.partial(mc.get, probe)

    def threads() -> tuple:
        if modname == "fastmc":
            return (lambda: (mc.get, mc.set)), "one Client shared by all threads"
        # A stand-in such as pylibmc is not thread-safe: give each thread its own clone.
        lock = threading.Lock()

        def per_thread() -> tuple:
            with lock:
                cl = mc.clone() if hasattr(mc, "clone") else mod.Client(servers)
            return cl.get, cl.set
        return per_thread, "stand-in: one clone per thread (not thread-safe)"

    c.threads_factory = threads
    return c


def make_pylibmc(servers: list, tag: str, binary: bool) -> Column:
    import pylibmc

    c = Column("pylibmc binary" if binary else "pylibmc", tag)
    mc = pylibmc.Client(servers, binary=binary)
    nr = pylibmc.Client(servers, binary=binary, behaviors={"_noreply": True})
    c.get, c.set, c.delete, c.incr = mc.get, mc.set, mc.delete, mc.incr
    c.get_multi, c.set_multi, c.delete_multi = mc.get_multi, mc.set_multi, mc.delete_multi
    c.set_nr, c.delete_nr = nr.set, nr.delete
    c.set_multi_nr, c.delete_multi_nr = nr.set_multi, nr.delete_multi
    c.sync_nr = functools.partial(nr.get, f"{tag}:probe")
    if binary:
        # With libmemcached's defaults (no TCP_NODELAY) a binary get_multi in which every key
        # misses waits ~40 ms for a delayed ACK: Nagle holds back the closing NOOP. Timed calls
        # keep that cost, it is pylibmc's. The read-back after a delete (untimed, every key
        # missing) would leave the CPU idle for 40 ms per round, and whichever client is timed
        # next would pay for it (a VM's CPU and a sleeping server come back slowly: 100 keys
        # set in 135 µs instead of 41 µs after 20 ms idle). The check reads the same servers
        # through a text client instead.
        checker = pylibmc.Client(servers)
        c.read_back = lambda keys: c.decode_get(checker.get_multi(keys), keys)

    def threads() -> tuple:
        pool = pylibmc.ClientPool(mc, 8)

        def per_thread() -> tuple:
            def get(k: str) -> Any:
                with pool.reserve(block=True) as cl:
                    return cl.get(k)

            def set_(k: str, v: bytes) -> Any:
                with pool.reserve(block=True) as cl:
                    return cl.set(k, v)
            return get, set_
        return per_thread, "ClientPool(mc, 8), reserve(block=True) per operation"

    c.threads_factory = threads
    return c


def make_pymemcache(servers: list, tag: str) -> Column:
    from pymemcache.client.base import Client as PmClient
    from pymemcache.client.base import PooledClient
    from pymemcache.client.hash import HashClient

    addrs = [split_addr(a) for a in servers]
    if len(addrs) == 1:
        mc = PmClient(addrs[0], default_noreply=False)
        nr = PmClient(addrs[0])  # the library's default: noreply for set/delete
        name = "pymemcache"
    else:
        mc = HashClient(addrs, default_noreply=False)
        nr = HashClient(addrs)
        name = "pymemcache"
    c = Column(name, tag)
    if len(addrs) > 1:
        c.note = "HashClient"
    c.get, c.set, c.delete, c.incr = mc.get, mc.set, mc.delete, mc.incr
    c.get_multi, c.set_multi, c.delete_multi = mc.get_many, mc.set_many, mc.delete_many
    c.set_nr, c.delete_nr = nr.set, nr.delete
    c.set_multi_nr, c.delete_multi_nr = nr.set_many, nr.delete_many
    c.sync_nr = functools.partial(nr.get, f"{tag}:probe")

    def threads() -> tuple:
        pc = PooledClient(addrs[0], max_pool_size=8, default_noreply=False)
        return (lambda: (pc.get, pc.set)), "PooledClient(max_pool_size=8) shared"

    c.threads_factory = threads
    return c


def make_libmc(servers: list, tag: str) -> Column:
    import libmc

    c = Column("libmc", tag)
    mc = libmc.Client(servers)
    nr = libmc.Client(servers, noreply=True)
    c.get, c.set, c.delete, c.incr = mc.get, mc.set, mc.delete, mc.incr
    c.get_multi, c.set_multi, c.delete_multi = mc.get_multi, mc.set_multi, mc.delete_multi
    c.set_nr, c.delete_nr = nr.set, nr.delete
    c.set_multi_nr, c.delete_multi_nr = nr.set_multi, nr.delete_multi
    c.sync_nr = functools.partial(nr.get, f"{tag}:probe")

    def threads() -> tuple:
        tc = libmc.ThreadedClient(servers)
        return (lambda: (tc.get, tc.set)), "ThreadedClient shared"

    c.threads_factory = threads
    return c


def make_python_memcached(servers: list, tag: str) -> Column:
    import memcache

    c = Column("python-memcached", tag)
    mc = memcache.Client(servers)
    c.get, c.set, c.delete, c.incr = mc.get, mc.set, mc.delete, mc.incr
    c.get_multi, c.set_multi, c.delete_multi = mc.get_multi, mc.set_multi, mc.delete_multi
    c.set_nr = functools.partial(mc.set, noreply=True)
    c.delete_nr = functools.partial(mc.delete, noreply=True)
    c.set_multi_nr = functools.partial(mc.set_multi, noreply=True)
    c.delete_multi_nr = functools.partial(mc.delete_multi, noreply=True)
    c.sync_nr = functools.partial(mc.get, f"{tag}:probe")

    def threads() -> tuple:
        shared = memcache.Client(servers)  # a threading.local: one connection per thread
        return (lambda: (shared.get, shared.set)), "Client shared (threading.local)"

    c.threads_factory = threads
    return c


PEER_MAKERS = {
    "pylibmc": lambda s, t: make_pylibmc(s, t, False),
    "pylibmc binary": lambda s, t: make_pylibmc(s, t, True),
    "pymemcache": make_pymemcache,
    "libmc": make_libmc,
    "python-memcached": make_python_memcached,
}


# ---------------------------------------------------------------------------------------------
# Run context: servers, columns, collected tables and targets
# ---------------------------------------------------------------------------------------------


@dataclass
class Target:
    scenario: str
    target: str
    measured: str
    ok: Optional[bool]  # None: not measurable in this run


@dataclass
class Ctx:
    s: Settings
    servers1: list
    servers3: Optional[list]
    meta_ok: bool
    fastmc_mod: Any
    fastmc_name: str
    fastmc_error: Optional[str]
    run_id: str
    pin_pids: list = field(default_factory=list)  # servers pinned with us to one CPU
    pinned_now: bool = False
    sections: list = field(default_factory=list)
    targets: list = field(default_factory=list)
    data: dict = field(default_factory=dict)
    _columns: dict = field(default_factory=dict)

    @property
    def has_fastmc(self) -> bool:
        return self.fastmc_mod is not None

    @property
    def standin(self) -> bool:
        return self.has_fastmc and self.fastmc_name != "fastmc"

    def columns(self, servers: list) -> list:
        """floor text, floor meta, fastmc, then the peers; created once per server set."""
        key = tuple(servers)
        if key in self._columns:
            return self._columns[key]
        cols: list = []
        n = 0

        def tag() -> str:
            nonlocal n
            n += 1
            return f"{self.run_id}{n - 1}"

        cols.append(Floor("floor text", tag(), servers, "text", self.meta_ok))
        if self.meta_ok:
            cols.append(Floor("floor meta", tag(), servers, "meta", True))
        if self.has_fastmc:
            try:
                cols.append(make_fastmc(self.fastmc_mod, self.fastmc_name, servers, tag()))
            except Exception as e:  # noqa: BLE001 - reported loudly, run continues
                FAILURES.add("setup", "fastmc", f"Client({servers}) raised {e!r}")
        for name in PEERS:
            try:
                cols.append(PEER_MAKERS[name](servers, tag()))
            except Exception as e:  # noqa: BLE001
                FAILURES.add("setup", name, f"could not create client: {e!r}")
        self._columns[key] = cols
        return cols

    def emit(self, title: str, body: str) -> None:
        text = f"## {title}\n\n{body}\n"
        self.sections.append(text)
        print("\n" + text, flush=True)

    def target(self, scenario: str, target: str, measured: str, ok: Optional[bool]) -> None:
        self.targets.append(Target(scenario, target, measured, ok))


def floors(cols: list) -> list:
    return [c for c in cols if c.kind == "floor"]


def fastmc_col(cols: list) -> Optional[Column]:
    return next((c for c in cols if c.kind == "fastmc"), None)


def peers(cols: list) -> list:
    return [c for c in cols if c.kind == "peer"]


def best_floor(meds: dict, cols: list) -> tuple:
    """The floor is the lower of the raw variants measured in this run."""
    cands = [(meds.get(c.name), c.name) for c in floors(cols) if meds.get(c.name) is not None]
    if not cands:
        return None, ""
    v, name = min(cands)
    return v, name.split()[-1]


def ratio_row(meds: dict, cols: list, fmt: Callable = fmt_num, lower_is_better: bool = True
              ) -> tuple:
    """Cells for: floor, fastmc, fastmc/floor, each peer (with fastmc/peer), fastmc/best peer."""
    fl, fl_name = best_floor(meds, cols)
    fc = fastmc_col(cols)
    f = meds.get(fc.name) if fc else None
    cells = [f"{fmt(fl)} {fl_name}" if fl is not None else "n/a",
             fmt(f) if fc else "missing",
             fmt_ratio(ratio(f, fl))]
    best = None
    for p in peers(cols):
        v = meds.get(p.name)
        if v is None:
            cells.append("n/a")
            continue
        if best is None or (v < best if lower_is_better else v > best):
            best = v
        cells.append(f"{fmt(v)} ({fmt_ratio(ratio(f, v))})" if f is not None else fmt(v))
    cells.append(fmt_ratio(ratio(f, best)))
    return cells, f, fl, best


def ratio_headers(cols: list, unit: str) -> list:
    return ([f"floor ({unit})", f"fastmc ({unit})", "fastmc ÷ floor"] +
            [p.name + (f" [{p.note}]" if p.note else "") for p in peers(cols)] +
            ["fastmc ÷ best peer"])


LEGEND = ("Each peer cell: the peer's median, then (fastmc ÷ peer): below 1 means fastmc is "
          "faster. The floor is the lower of the raw text and meta batches (`text`/`meta`): "
          "N commands and a marker, as ../shared/benchmarks.md defines it.")
REF_NOTE = ("Last column, a reference and not a target: the **bound**, what the server and the "
            "kernel alone cost. Its requests are built before the clock starts, writes are quiet "
            "(`ms`/`md ... q` and one `mn`), reads are one `get k1 … kN` line per server (one "
            "request for memcached; fastmc sends such lines, 100 keys each), and nothing is "
            "parsed. A client must also build its requests and the Python results, so the bound "
            "is close to a lower limit; a client only goes under it where memcached is slow on "
            "the bound's one huge `get` line (10,000 keys) or where the bound's Python poll "
            "loop (batches over 16 KiB, or three servers) costs more than the client's.")


def pin_note(ctx: "Ctx") -> str:
    if ctx.pinned_now:
        return ("Client and servers pinned to one CPU (`--pin auto`; see the README: on a small "
                "VM an unpinned loopback round trip flips between ~7 and ~80 µs).")
    return "Not pinned: round trips may be noisy."


def check(where: str, col: Column, ok: bool, what: str) -> bool:
    if not ok:
        FAILURES.add(where, col.name, what)
    return ok


def safe(where: str, col: Column, fn: Callable, *args: Any) -> Any:
    """Run one measurement; a client that raises is reported and its cell left empty."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - reported loudly, the run goes on
        FAILURES.add(where, col.name, f"raised {e!r}")
        return None


# ---------------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------------


def scenario_single(ctx: Ctx) -> None:
    """get/set/delete/incr on one key at a time: wall and client CPU per operation."""
    cols = ctx.columns(ctx.servers1)
    n, rounds = ctx.s.single_ops, ctx.s.single_rounds
    ops = ("get", "set", "delete", "incr")
    wall: dict = {(op, c.name): [] for op in ops for c in cols}
    cpu: dict = {(op, c.name): [] for op in ops for c in cols}

    def one(c: Column, r: int) -> None:
        keys = c.keys("s", n)
        items = list(zip(keys, values_for(keys, f"|s{r}")))
        w, p, bad = timed_cpu(c.loop_set, items)
        check("single set", c, bad == 0, f"{bad} of {n} sets not acknowledged")
        wall["set", c.name].append(w / n)
        cpu["set", c.name].append(p / n)
        w, p, bad = timed_cpu(c.loop_get, items)
        check("single get", c, bad == 0, f"{bad} of {n} gets returned a wrong value")
        wall["get", c.name].append(w / n)
        cpu["get", c.name].append(p / n)
        w, p, bad = timed_cpu(c.loop_delete, keys)
        check("single delete", c, bad == 0, f"{bad} of {n} deletes not acknowledged")
        left = c.read_back(keys)
        check("single delete", c, not left, f"{len(left)} keys still there after delete")
        wall["delete", c.name].append(w / n)
        cpu["delete", c.name].append(p / n)
        ck = f"{c.tag}:counter:{r:03d}"
        c.set_counter(ck)
        w, p, last = timed_cpu(c.loop_incr, ck, n)
        got = c.read_counter(ck)
        check("single incr", c, got == n and (last is None or last == n),
              f"counter is {got} (last incr returned {last!r}), expected {n}")
        wall["incr", c.name].append(w / n)
        cpu["incr", c.name].append(p / n)

    for c in cols:  # warm-up: connections open, code paths hot
        safe("single warm-up", c, c.loop_set, [(f"{c.tag}:warm", b"w" * VALUE_SIZE)])
    for r in range(rounds):
        for c in rotated(cols, r):
            safe("single", c, one, c, r)

    headers_w = ["op"] + ratio_headers(cols, "µs")
    rows_w, rows_c = [], []
    res: dict = {}
    for op in ops:
        mw = {c.name: (median(wall[op, c.name]) or 0) * 1e6 or None for c in cols}
        mc = {c.name: (median(cpu[op, c.name]) or 0) * 1e6 or None for c in cols}
        res[op] = {"wall_us": mw, "cpu_us": mc}
        cells, f, _, _ = ratio_row(mw, cols)
        rows_w.append([op] + cells)
        cells_c, fc_cpu, _, _ = ratio_row(mc, cols)
        rows_c.append([op] + cells_c)
        pw, pc = mw.get("pylibmc"), mc.get("pylibmc")
        if ctx.has_fastmc:
            rc = ratio(fc_cpu, pc)
            ctx.target("single", f"{op}: client CPU/op below pylibmc's",
                       f"{fmt_num(fc_cpu)} vs {fmt_num(pc)} µs (×{fmt_ratio(rc)})",
                       rc is not None and rc < 1.0)
            rw = ratio(f, pw)
            ctx.target("single", f"{op}: wall/op not above pylibmc's (5% noise allowance)",
                       f"{fmt_num(f)} vs {fmt_num(pw)} µs (×{fmt_ratio(rw)})",
                       rw is not None and rw <= 1.05)
        else:
            ctx.target("single", f"{op}: CPU and wall per op vs pylibmc", "fastmc missing", False)
    ctx.data["single"] = res
    note = (f"{n:,} operations per loop, {rounds} rounds, median per operation. One loopback "
            "round trip per operation, so wall times are close; client CPU "
            "(time.process_time over the loop) shows what each client costs. The floor does one "
            "raw round trip per operation. " + pin_note(ctx))
    ctx.emit("Single operations: wall time per operation (µs)",
             note + "\n\n" + LEGEND + "\n\n" + md_table(headers_w, rows_w))
    ctx.emit("Single operations: client CPU per operation (µs)",
             md_table(["op"] + ratio_headers(cols, "µs"), rows_c))


def scenario_multi(ctx: Ctx) -> None:
    """get/set/delete multi with 100, 1,000, 10,000 keys on one server and on three."""
    configs = [("one server", ctx.servers1)]
    if ctx.servers3:
        configs.append(("three servers", ctx.servers3))
    else:
        ctx.emit("Multi operations, three servers", "_Skipped: fewer than three servers._")
        ctx.target("multi", "three-server rows", "skipped (fewer than three servers)", None)
    ctx.data["multi"] = {}
    for label, servers in configs:
        cols = ctx.columns(servers)
        # fastmc with binary=True runs in the same rounds; its table follows the main one.
        bcols = []
        if ctx.has_fastmc:
            try:
                bcols = [make_fastmc(ctx.fastmc_mod, ctx.fastmc_name, servers,
                                     f"{ctx.run_id}b{len(ctx.data['multi'])}", binary=True)]
            except Exception as e:  # noqa: BLE001 - reported loudly, run continues
                FAILURES.add("setup", "fastmc binary", f"Client({servers}, binary=True) raised {e!r}")
        # The reference (not a target): prebuilt quiet batches, nothing parsed.
        ref = Bound("bound", f"{ctx.run_id}r{len(ctx.data['multi'])}", servers, ctx.meta_ok)
        samples: dict = {}
        for n in MULTI_SIZES:
            for r in range(ctx.s.multi_rounds[n]):
                for c in rotated(cols + bcols + [ref], r):
                    safe(f"multi {label}", c, _multi_round, c, n, r, samples, f"multi {label}")
        headers = (["op", "keys"] + ratio_headers(cols, "µs") + ["target"] +
                   ["bound (µs) (fastmc ÷ it)"])
        rows = []
        res: dict = {}
        per_key: dict = {}
        for op in ("set_multi", "get_multi", "delete_multi"):
            for n in MULTI_SIZES:
                meds = {c.name: _med_us(samples.get((op, n, c.name))) for c in cols}
                res[f"{op} {n}"] = meds
                cells, f, fl, best = ratio_row(meds, cols)
                rf, rb = ratio(f, fl), ratio(f, best)
                ok = rf is not None and rb is not None and rf <= 1.0 and rb <= 0.5
                rl = _med_us(samples.get((op, n, ref.name)))
                if rl is not None:
                    res[f"{op} {n}"][ref.name] = rl
                rows.append([op, f"{n:,}"] + cells + [("PASS" if ok else "FAIL")
                                                      if f is not None else "n/a"] +
                            [f"{fmt_num(rl)} ({fmt_ratio(ratio(f, rl))})" if rl else "n/a"])
                per_key[op, n] = f
                per_key[op, n, "bound"] = rl
                ctx.target("multi", f"{label}: {op} {n:,} keys ≤ floor",
                           f"×{fmt_ratio(rf)} ({fmt_num(f)} vs {fmt_num(fl)} µs)",
                           rf is not None and rf <= 1.0)
                half = best / 2 if best is not None else None
                below = (f"; ½ best peer is under the bound, {fmt_num(rl)} µs: what server "
                         f"and kernel alone take" if half is not None and rl is not None
                         and half < rl else "")
                ctx.target("multi", f"{label}: {op} {n:,} keys ≤ ½ best peer",
                           f"×{fmt_ratio(rb)} ({fmt_num(f)} vs {fmt_num(best)} µs{below})",
                           rb is not None and rb <= 0.5)
        for op in ("set_multi", "delete_multi"):
            for n in MULTI_SIZES:
                rr = ratio(per_key[op, n], per_key["get_multi", n])
                rbound = ratio(per_key[op, n, "bound"], per_key["get_multi", n, "bound"])
                ctx.target("multi", f"{label}: {op} per key ≤ 1.5× get_multi's, {n:,} keys",
                           f"×{fmt_ratio(rr)} (the bound's own: ×{fmt_ratio(rbound)})",
                           rr is not None and rr <= 1.5)
        ctx.data["multi"][label] = res
        rounds = ", ".join(f"{n:,} keys: {r}" for n, r in ctx.s.multi_rounds.items())
        ctx.emit(f"Multi operations, {label} (µs per call)",
                 f"Rounds: {rounds}; set_multi, then get_multi (checked), then delete_multi "
                 f"(checked), {VALUE_SIZE}-byte values. Target: fastmc ≤ floor and ≤ ½ the best "
                 f"peer. {pin_note(ctx)}\n\n{LEGEND} {REF_NOTE}\n\n" + md_table(headers, rows))
        ref.close()
        if bcols:
            _binary_table(ctx, label, cols, bcols[0], samples)


def _binary_table(ctx: Ctx, label: str, cols: list, bcol: Column, samples: dict) -> None:
    """fastmc binary=True next to pylibmc binary=True and fastmc's text protocol."""
    fc = fastmc_col(cols)
    pb = next((c for c in peers(cols) if c.name == "pylibmc binary"), None)
    rows = []
    for op in ("set_multi", "get_multi", "delete_multi"):
        for n in MULTI_SIZES:
            b = _med_us(samples.get((op, n, bcol.name)))
            t = _med_us(samples.get((op, n, fc.name))) if fc else None
            p = _med_us(samples.get((op, n, pb.name))) if pb else None
            rows.append([op, f"{n:,}", fmt_num(b), fmt_num(t), fmt_ratio(ratio(b, t)),
                         fmt_num(p), fmt_ratio(ratio(b, p))])
    headers = ["op", "keys", "fastmc binary (µs)", "fastmc text (µs)", "binary ÷ text",
               "pylibmc binary (µs)", "fastmc binary ÷ pylibmc binary"]
    ctx.emit(f"Multi operations, {label}, binary protocol (µs per call)",
             "The same rounds with `binary=True` (quiet opcodes and one NOOP per server).\n\n"
             + md_table(headers, rows))


def _med_us(xs: Optional[list]) -> Optional[float]:
    m = median(xs or [])
    return m * 1e6 if m is not None else None


def _multi_round(c: Column, n: int, r: int, samples: dict, where: str) -> None:
    keys = c.keys("m", n)
    vals = values_for(keys, f"|m{r}")
    mapping = dict(zip(keys, vals))
    prepare = getattr(c, "prepare", lambda op, arg: None)  # the bound builds ahead, untimed
    prepare("set_multi", mapping)
    t, res = timed(c.set_multi, mapping)
    if check(where, c, c.stored_ok(res, n), f"set_multi({n}) returned {str(res)[:100]}"):
        samples.setdefault(("set_multi", n, c.name), []).append(t)
    prepare("get_multi", keys)
    t, res = timed(c.get_multi, keys)
    got = c.decode_get(res, keys)
    if check(where, c, got == mapping, f"get_multi({n}) read back {_diff(got, mapping)}"):
        samples.setdefault(("get_multi", n, c.name), []).append(t)
    prepare("delete_multi", keys)
    t, res = timed(c.delete_multi, keys)
    left = c.read_back(keys)
    if check(where, c, c.deleted_ok(res, n) and not left,
             f"delete_multi({n}) returned {str(res)[:80]}, {len(left)} keys left"):
        samples.setdefault(("delete_multi", n, c.name), []).append(t)


def _diff(got: dict, want: dict) -> str:
    missing = [k for k in want if k not in got]
    wrong = [k for k in want if k in got and got[k] != want[k]]
    extra = [k for k in got if k not in want]
    out = f"{len(missing)} missing, {len(wrong)} wrong, {len(extra)} unexpected"
    if wrong:
        k = wrong[0]
        out += f" (e.g. {k!r}: {got[k]!r} instead of {want[k]!r})"
    return out


def scenario_simple_vs_multi(ctx: Ctx) -> None:
    """10,000 keys: a loop of single calls against one multi call, for set/get/delete."""
    cols = ctx.columns(ctx.servers1)
    n, rounds = ctx.s.simple_keys, ctx.s.simple_rounds
    samples: dict = {}

    def one(c: Column, r: int) -> None:
        keys = c.keys("v", n)
        items = list(zip(keys, values_for(keys, f"|v{r}")))
        mapping = dict(items)
        t, bad = timed(c.loop_set, items)
        if check("simple set", c, bad == 0, f"{bad} sets not acknowledged"):
            samples.setdefault(("set", "loop", c.name), []).append(t)
        t, bad = timed(c.loop_get, items)
        if check("simple get", c, bad == 0, f"{bad} gets returned a wrong value"):
            samples.setdefault(("get", "loop", c.name), []).append(t)
        t, bad = timed(c.loop_delete, keys)
        left = c.read_back(keys)
        if check("simple delete", c, bad == 0 and not left, f"{bad} deletes failed, "
                 f"{len(left)} keys left"):
            samples.setdefault(("delete", "loop", c.name), []).append(t)
        t, res = timed(c.set_multi, mapping)
        if check("multi set", c, c.stored_ok(res, n), f"set_multi returned {str(res)[:80]}"):
            samples.setdefault(("set", "multi", c.name), []).append(t)
        t, res = timed(c.get_multi, keys)
        got = c.decode_get(res, keys)
        if check("multi get", c, got == mapping, _diff(got, mapping)):
            samples.setdefault(("get", "multi", c.name), []).append(t)
        t, res = timed(c.delete_multi, keys)
        left = c.read_back(keys)
        if check("multi delete", c, c.deleted_ok(res, n) and not left, f"{len(left)} left"):
            samples.setdefault(("delete", "multi", c.name), []).append(t)

    for r in range(rounds):
        for c in rotated(cols, r):
            safe("simple_vs_multi", c, one, c, r)
    rows, res = [], {}
    for op in ("set", "get", "delete"):
        meds = {}
        for how in ("loop", "multi"):
            meds[how] = {c.name: _med_us(samples.get((op, how, c.name))) for c in cols}
            res[f"{op} {how}"] = meds[how]
            ms = {k: (v / 1000 if v is not None else None) for k, v in meds[how].items()}
            cells, _, _, _ = ratio_row(ms, cols)
            label = f"{n:,} × {op}" if how == "loop" else f"{op}_multi({n:,})"
            rows.append([label] + cells)
        sp = {c.name: ratio(meds["loop"][c.name], meds["multi"][c.name]) for c in cols}
        res[f"{op} speed-up"] = sp
        fl_loop, _ = best_floor(meds["loop"], cols)
        fl_multi, _ = best_floor(meds["multi"], cols)
        fc = fastmc_col(cols)
        rows.append([f"{op}: multi speed-up", f"×{fmt_ratio(ratio(fl_loop, fl_multi))}",
                     f"×{fmt_ratio(sp.get(fc.name))}" if fc else "missing", ""] +
                    [f"×{fmt_ratio(sp.get(p.name))}" for p in peers(cols)] + [""])
    ctx.data["simple_vs_multi"] = res
    ctx.emit(f"Simple vs multi, {n:,} keys (ms per {n:,} keys)",
             f"{rounds} round(s). Rows: a loop of {n:,} single calls, then one multi call, then "
             f"the speed-up of multi over the loop. {pin_note(ctx)}\n\n{LEGEND}\n\n" +
             md_table(["what"] + ratio_headers(cols, "ms"), rows))


def scenario_speedup(ctx: Ctx) -> None:
    """Speed-up of one multi call over a loop of singles as keys grow from 1 to 1,000."""
    cols = ctx.columns(ctx.servers1)
    rounds = ctx.s.speedup_rounds
    samples: dict = {}

    def one(c: Column, n: int, r: int) -> None:
        reps = max(1, 64 // n)
        for rep in range(reps):
            keys = c.keys(f"u{n}", n)
            items = list(zip(keys, values_for(keys, f"|u{r}.{rep}")))
            mapping = dict(items)
            rec = samples.setdefault
            t, bad = timed(c.loop_set, items)
            if check("speedup set loop", c, bad == 0, f"{bad} sets failed"):
                rec(("set", "loop", n, c.name), []).append(t)
            t, bad = timed(c.loop_get, items)
            if check("speedup get loop", c, bad == 0, f"{bad} wrong values"):
                rec(("get", "loop", n, c.name), []).append(t)
            t, bad = timed(c.loop_delete, keys)
            if check("speedup delete loop", c, bad == 0, f"{bad} deletes failed"):
                rec(("delete", "loop", n, c.name), []).append(t)
            t, res = timed(c.set_multi, mapping)
            if check("speedup set_multi", c, c.stored_ok(res, n), str(res)[:80]):
                rec(("set", "multi", n, c.name), []).append(t)
            t, res = timed(c.get_multi, keys)
            got = c.decode_get(res, keys)
            if check("speedup get_multi", c, got == mapping, _diff(got, mapping)):
                rec(("get", "multi", n, c.name), []).append(t)
            t, res = timed(c.delete_multi, keys)
            left = c.read_back(keys)
            if check("speedup delete_multi", c, c.deleted_ok(res, n) and not left,
                     f"{len(left)} left"):
                rec(("delete", "multi", n, c.name), []).append(t)

    for c in cols:
        safe("speedup warm-up", c, one, c, 10, -1)
    samples.clear()
    for r in range(rounds):
        for n in SPEEDUP_SIZES:
            for c in rotated(cols, r + n):
                safe("speedup", c, one, c, n, r)

    fc = fastmc_col(cols)
    curves: dict = {}
    res: dict = {}
    for op in ("get", "set", "delete"):
        rows = []
        for n in SPEEDUP_SIZES:
            loop = {c.name: _med_us(samples.get((op, "loop", n, c.name))) for c in cols}
            multi = {c.name: _med_us(samples.get((op, "multi", n, c.name))) for c in cols}
            fl_loop, _ = best_floor(loop, cols)
            fl_multi, _ = best_floor(multi, cols)
            sp = {c.name: ratio(loop[c.name], multi[c.name]) for c in cols}
            sp["floor"] = ratio(fl_loop, fl_multi)
            res[f"{op} {n}"] = {"loop_us": loop, "multi_us": multi, "speedup": sp}
            for name, v in sp.items():
                curves.setdefault(op, {}).setdefault(name, []).append(v)
            f = multi.get(fc.name) if fc else None
            best = min((multi[p.name] for p in peers(cols) if multi[p.name] is not None),
                       default=None)
            rows.append([f"{n:,}", f"×{fmt_ratio(sp['floor'])}",
                         f"×{fmt_ratio(sp.get(fc.name))}" if fc else "missing"] +
                        [f"×{fmt_ratio(sp[p.name])}" for p in peers(cols)] +
                        [fmt_ratio(ratio(f, fl_multi)), fmt_ratio(ratio(f, best))])
        headers = (["keys", "floor", "fastmc"] + [p.name for p in peers(cols)] +
                   ["fastmc multi ÷ floor multi", "fastmc multi ÷ best peer multi"])
        ctx.emit(f"Speed-up of {op}_multi over a loop of single {op}s",
                 f"{rounds} rounds (more repetitions for small key counts); speed-up = median "
                 f"time of the loop ÷ median time of the multi call. {pin_note(ctx)}\n\n" +
                 md_table(headers, rows))
    ctx.data["speedup"] = res
    ctx.speedup_curves = curves  # type: ignore[attr-defined]
    draw_speedup(ctx, curves, cols)


def draw_speedup(ctx: Ctx, curves: dict, cols: list) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"WARNING: matplotlib unavailable, no chart: {e!r}", file=sys.stderr)
        return
    names = ["floor"] + [c.name for c in cols if c.kind != "floor"]
    styles = {"floor": dict(color="black", linestyle="--", linewidth=1.5)}
    palette = ["#d62728", "#1f77b4", "#8c564b", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5), sharey=True)
    titles = {"get": "reads: get_multi vs loop of get",
              "set": "writes: set_multi vs loop of set",
              "delete": "writes: delete_multi vs loop of delete"}
    for ax, op in zip(axes, ("get", "set", "delete")):
        for i, name in enumerate(names):
            ys = curves.get(op, {}).get(name)
            if not ys:
                continue
            pts = [(x, y) for x, y in zip(SPEEDUP_SIZES, ys) if y is not None]
            if not pts:
                continue
            st = styles.get(name) or dict(color=palette[(i - 1) % len(palette)], linewidth=1.5)
            if name.startswith("fastmc"):
                st = dict(color=palette[0], linewidth=3)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5,
                    label=name, **st)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(titles[op])
        ax.set_xlabel("keys per call")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("speed-up of one multi call (×)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    mode = "quick" if ctx.s.quick else "full"
    fig.suptitle(f"Multi over a loop of singles, one server, medians ({mode} run, "
                 f"{datetime.date.today().isoformat()})")
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    path = os.path.join(ctx.data["_out"], "multi_speedup.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")


def scenario_noreply(ctx: Ctx) -> None:
    """set/get/delete with and without noreply, as loops of singles and as multi calls."""
    cols = ctx.columns(ctx.servers1)
    n, rounds = ctx.s.noreply_keys, ctx.s.noreply_rounds
    samples: dict = {}

    def rec(key: tuple, t: float) -> None:
        samples.setdefault(key, []).append(t)

    def one(c: Column, r: int) -> None:
        keys = c.keys("n", n)
        items = list(zip(keys, values_for(keys, f"|n{r}")))
        mapping = dict(items)
        # acknowledged loops
        t, bad = timed(c.loop_set, items)
        if check("noreply: set loop", c, bad == 0, f"{bad} failed"):
            rec(("set", "acked", c.name), t)
        t, bad = timed(c.loop_get, items)
        if check("noreply: get loop", c, bad == 0, f"{bad} wrong"):
            rec(("get", "acked", c.name), t)
        t, bad = timed(c.loop_delete, keys)
        left = c.read_back(keys)
        if check("noreply: delete loop", c, bad == 0 and not left, f"{len(left)} left"):
            rec(("delete", "acked", c.name), t)
        # noreply loops, read back afterwards
        if c.set_nr is not None:
            t, _ = timed(c.loop_set_nr, items)
            c.sync_nr()
            got = c.read_back(keys)
            if check("noreply: set loop noreply", c, got == mapping, _diff(got, mapping)):
                rec(("set", "noreply", c.name), t)
        else:
            c.set_multi(mapping)
        if c.delete_nr is not None:
            t, _ = timed(c.loop_delete_nr, keys)
            c.sync_nr()
            left = c.read_back(keys)
            if check("noreply: delete loop noreply", c, not left, f"{len(left)} left"):
                rec(("delete", "noreply", c.name), t)
        else:
            c.delete_multi(keys)
        # multi calls
        t, res = timed(c.set_multi, mapping)
        if check("noreply: set_multi", c, c.stored_ok(res, n), str(res)[:80]):
            rec(("set_multi", "acked", c.name), t)
        t, res = timed(c.get_multi, keys)
        got = c.decode_get(res, keys)
        if check("noreply: get_multi", c, got == mapping, _diff(got, mapping)):
            rec(("get_multi", "acked", c.name), t)
        t, res = timed(c.delete_multi, keys)
        left = c.read_back(keys)
        if check("noreply: delete_multi", c, c.deleted_ok(res, n) and not left,
                 f"{len(left)} left"):
            rec(("delete_multi", "acked", c.name), t)
        if c.set_multi_nr is not None:
            t, res = timed(c.set_multi_nr, mapping)
            c.sync_nr()
            got = c.read_back(keys)
            if check("noreply: set_multi noreply", c, c.nr_ok(res, n) and got == mapping,
                     _diff(got, mapping)):
                rec(("set_multi", "noreply", c.name), t)
        else:
            c.set_multi(mapping)
        if c.delete_multi_nr is not None:
            t, res = timed(c.delete_multi_nr, keys)
            c.sync_nr()
            left = c.read_back(keys)
            if check("noreply: delete_multi noreply", c, c.nr_ok(res, n) and not left,
                     f"{len(left)} left"):
                rec(("delete_multi", "noreply", c.name), t)
        else:
            c.delete_multi(keys)

    for r in range(rounds):
        for c in rotated(cols, r):
            safe("noreply", c, one, c, r)
    rows, res = [], {}
    plan = [("set", "acked"), ("set", "noreply"), ("get", "acked"), ("delete", "acked"),
            ("delete", "noreply"), ("set_multi", "acked"), ("set_multi", "noreply"),
            ("get_multi", "acked"), ("delete_multi", "acked"), ("delete_multi", "noreply")]
    for op, mode in plan:
        meds = {c.name: _med_us(samples.get((op, mode, c.name))) for c in cols}
        meds = {k: (v / 1000 if v is not None else None) for k, v in meds.items()}
        res[f"{op} {mode}"] = meds
        cells, _, _, _ = ratio_row(meds, cols)
        what = f"{n:,} × {op}" if "_" not in op else f"{op}({n:,})"
        rows.append([what, mode] + cells)
    ctx.data["noreply"] = res
    ctx.emit(f"With and without noreply, {n:,} keys (ms per {n:,} keys)",
             f"{rounds} rounds. `acked` waits for every reply (pymemcache with "
             "default_noreply=False); `noreply` is fastmc's noreply=True, pylibmc's _noreply "
             "behavior, pymemcache's default, libmc's noreply=True, python-memcached's "
             "noreply=True. The noreply floor sends the noreply/quiet commands (text "
             "`noreply`, meta `q`) and waits for one marker, so it includes the time the server "
             "needs to apply them; the clients' noreply calls return without waiting. Every "
             "noreply write is read back afterwards. " + pin_note(ctx) + "\n\n" + LEGEND + "\n\n" +
             md_table(["what", "mode"] + ratio_headers(cols, "ms"), rows))


def scenario_bulk(ctx: Ctx) -> None:
    """2,000,000 distinct keys in batches of 1,000: written, then read back and checked."""
    cols = ctx.columns(ctx.servers1)
    total, batch = ctx.s.bulk_keys, ctx.s.bulk_batch
    limit = ctx.data.get("_limit_maxbytes")
    need = total * 160  # ~item size for 40-byte values and 15-byte keys, with slack
    note = ""
    if limit and limit < need:
        total = max(batch, int(limit / 160) // batch * batch)
        note = (f" Server memory ({limit >> 20} MiB) is too small for {ctx.s.bulk_keys:,} keys; "
                f"loaded {total:,} instead.")
    nb = total // batch
    budget = ctx.s.bulk_peer_budget
    rows = []
    res: dict = {}
    # Warm-up, not timed: the server allocates its memory for this many items once, so the first
    # client measured does not pay for it (deleted items leave their slab pages for reuse).
    w = floors(cols)[-1]
    for b in range(nb):
        keys = [f"{w.tag}:w:{i:08d}" for i in range(b * batch, (b + 1) * batch)]
        check("bulk warm-up", w, w.stored_ok(w.set_multi(dict(zip(keys, values_for(keys, "|w")))),
                                             batch), f"batch {b} not stored")
    for b in range(nb):
        w.delete_multi([f"{w.tag}:w:{i:08d}" for i in range(b * batch, (b + 1) * batch)])
    for c in cols:
        unlimited = c.kind != "peer"
        wr_t = rd_t = 0.0
        done = 0
        ok = True
        try:
            for b in range(nb):
                keys = [f"{c.tag}:b:{i:08d}" for i in range(b * batch, (b + 1) * batch)]
                mapping = dict(zip(keys, values_for(keys, "|b")))
                t, r = timed(c.set_multi, mapping)
                wr_t += t
                if not c.stored_ok(r, batch):
                    ok = check("bulk write", c, False, f"batch {b}: {str(r)[:80]}")
                    break
                done += 1
                if not unlimited and wr_t > budget:
                    break
            for b in range(done if ok else 0):
                keys = [f"{c.tag}:b:{i:08d}" for i in range(b * batch, (b + 1) * batch)]
                t, r = timed(c.get_multi, keys)
                rd_t += t
                got = c.decode_get(r, keys)
                if len(got) != batch or any(got.get(k) != v for k, v in
                                            zip(keys, values_for(keys, "|b"))):
                    ok = check("bulk read", c, False, f"batch {b}: "
                               f"{_diff(got, dict(zip(keys, values_for(keys, '|b'))))}")
                    break
                if not unlimited and rd_t > budget:
                    done_r = b + 1
                    break
            else:
                done_r = done
            # free the server's memory for the next client (not timed)
            for b in range(done):
                c.delete_multi([f"{c.tag}:b:{i:08d}" for i in range(b * batch, (b + 1) * batch)])
        except Exception as e:  # noqa: BLE001
            FAILURES.add("bulk", c.name, f"raised {e!r}")
            ok = False
        if not ok:
            rows.append([c.name, "failed", "", "failed", ""])
            res[c.name] = None
            continue
        w_rate = done * batch / wr_t if wr_t else None
        r_rate = done_r * batch / rd_t if rd_t else None
        partial = "" if done == nb else f" ({done * batch:,} keys in the time budget)"
        partial_r = "" if done_r == nb else f" ({done_r * batch:,} keys)"
        res[c.name] = {"write_keys_per_s": w_rate, "read_keys_per_s": r_rate,
                       "keys_written": done * batch, "keys_read": done_r * batch}
        rows.append([c.name, f"{w_rate:,.0f}{partial}" if w_rate else "n/a",
                     f"{wr_t:.2f}", f"{r_rate:,.0f}{partial_r}" if r_rate else "n/a",
                     f"{rd_t:.2f}"])
        print(f"  bulk {c.name}: write {w_rate or 0:,.0f} keys/s, read {r_rate or 0:,.0f} keys/s",
              flush=True)
    fc = fastmc_col(cols)
    fr = res.get(fc.name) if fc else None
    fl_w = max((res[c.name]["write_keys_per_s"] for c in floors(cols) if res.get(c.name)),
               default=None)
    fl_r = max((res[c.name]["read_keys_per_s"] for c in floors(cols) if res.get(c.name)),
               default=None)
    ratios = []
    if fr:
        ratios.append(f"fastmc ÷ floor (keys/s, higher is better): write "
                      f"×{fmt_ratio(ratio(fr['write_keys_per_s'], fl_w))}, read "
                      f"×{fmt_ratio(ratio(fr['read_keys_per_s'], fl_r))}")
        for p in peers(cols):
            pr = res.get(p.name)
            if pr:
                rw = ratio(fr["write_keys_per_s"], pr["write_keys_per_s"])
                rr = ratio(fr["read_keys_per_s"], pr["read_keys_per_s"])
                ratios.append(f"fastmc ÷ {p.name}: write ×{fmt_ratio(rw)}, "
                              f"read ×{fmt_ratio(rr)}")
    full = total == 2_000_000
    for what, key in (("written", "write_keys_per_s"), ("read back", "read_keys_per_s")):
        v = fr[key] if fr else None
        ctx.target("bulk", f"bulk load: ≥ 1,000,000 keys/s {what}"
                   + ("" if full else f" (on {total:,} keys)"),
                   f"{v:,.0f} keys/s" if v else ("fastmc missing" if not fc else "failed"),
                   bool(v and v >= 1_000_000))
    ctx.data["bulk"] = {"keys": total, "batch": batch, "rates": res}
    ctx.emit(f"Bulk load: {total:,} distinct keys in batches of {batch:,}",
             f"set_multi of every batch, then get_multi of every batch (checked); time is the "
             f"sum of the calls. Peers that cannot load everything in {budget:g} s per phase "
             f"are measured on the keys they did load (rate = keys ÷ time). An untimed warm-up load "
             f"first makes the server allocate its memory, so no client pays for that.{note} "
             f"{pin_note(ctx)}\n\n" +
             md_table(["client", "write (keys/s)", "write (s)", "read (keys/s)", "read (s)"],
                      rows) + ("\n\n" + "\n".join(f"- {x}" for x in ratios) if ratios else ""))


def scenario_threads(ctx: Ctx) -> None:
    """8 threads doing single gets and sets: one shared fastmc Client vs pools."""
    cols = ctx.columns(ctx.servers1)
    T, n, rounds = ctx.s.threads, ctx.s.thread_ops, ctx.s.thread_rounds
    samples: dict = {}
    notes = {}
    factories = {}
    for c in cols:
        if c.threads_factory is None:
            continue
        try:
            factories[c.name], notes[c.name] = c.threads_factory()
        except Exception as e:  # noqa: BLE001
            FAILURES.add("threads setup", c.name, f"raised {e!r}")

    def run(c: Column, op: str, r: int) -> Optional[float]:
        maker = factories[c.name]
        per_items = []
        for tid in range(T):
            keys = [f"{c.tag}:t{tid}:{i:06d}" for i in range(n)]
            per_items.append(list(zip(keys, values_for(keys, f"|t{r}"))))
        if op == "get":  # preload (not timed)
            for items in per_items:
                c.set_multi(dict(items))
        barrier = threading.Barrier(T + 1)
        bad = [0] * T
        errors: list = []

        def worker(tid: int) -> None:
            try:
                get, set_ = maker()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                barrier.abort()
                return
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                return
            b = 0
            try:
                if op == "get":
                    for k, v in per_items[tid]:
                        if get(k) != v:
                            b += 1
                else:
                    for k, v in per_items[tid]:
                        if not set_(k, v):
                            b += 1
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            bad[tid] = b

        ths = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(T)]
        for th in ths:
            th.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        t0 = perf_counter()
        for th in ths:
            th.join()
        dt = perf_counter() - t0
        if errors:
            FAILURES.add(f"threads {op}", c.name, f"raised {errors[0]!r}")
            return None
        if not check(f"threads {op}", c, sum(bad) == 0, f"{sum(bad)} of {T * n} failed/wrong"):
            return None
        if op == "set":
            for items in per_items:
                got = c.read_back([k for k, _ in items])
                if not check("threads set", c, got == dict(items), _diff(got, dict(items))):
                    return None
        for items in per_items:
            c.delete_multi([k for k, _ in items])
        return T * n / dt

    for r in range(-1, rounds):  # round -1 warms up pools and connections
        for c in rotated([c for c in cols if c.name in factories], r):
            for op in ("get", "set"):
                v = safe("threads", c, run, c, op, r)
                if v is not None and r >= 0:
                    samples.setdefault((op, c.name), []).append(v)
    rows, res = [], {}
    fc = fastmc_col(cols)
    for op in ("get", "set"):
        meds = {c.name: median(samples.get((op, c.name), [])) for c in cols}
        res[op] = meds
        fl, fl_name = max(((meds[c.name], c.name) for c in floors(cols)
                           if meds.get(c.name) is not None), default=(None, ""))
        f = meds.get(fc.name) if fc else None
        cells = [f"{op}s", f"{fmt_num(fl)} {fl_name.split()[-1] if fl_name else ''}",
                 fmt_num(f) if fc else "missing", fmt_ratio(ratio(f, fl))]
        for p in peers(cols):
            v = meds.get(p.name)
            cells.append(f"{fmt_num(v)} ({fmt_ratio(ratio(f, v))})" if v and f else fmt_num(v))
        rows.append(cells)
        pool = meds.get("pylibmc")
        rr = ratio(f, pool)
        ctx.target("threads", f"8 threads, single {op}s: ≥ 1.5× pylibmc ClientPool ops/s",
                   f"×{fmt_ratio(rr)} ({fmt_num(f)} vs {fmt_num(pool)} ops/s)"
                   if fc else "fastmc missing", rr is not None and rr >= 1.5)
    ctx.data["threads"] = res
    how = "\n".join(f"- {k}: {v}" for k, v in notes.items())
    ctx.emit(f"{T} threads, single operations (operations per second, higher is better)",
             f"{T} threads × {n:,} operations each, {rounds} rounds after a warm-up round, "
             "median of total operations ÷ wall time. Each peer cell: ops/s, then "
             f"(fastmc ÷ peer): above 1 means fastmc is faster. How each client is shared:\n"
             f"{how}\n\n" +
             md_table(["op", "floor (ops/s)", "fastmc (ops/s)", "fastmc ÷ floor"] +
                      [p.name for p in peers(cols)], rows))


def memory_workload(c: Column, rounds: int, n: int) -> list:
    """Repeated rounds of mixed operations; RSS after each (garbage collected) round."""
    rss = []
    for r in range(rounds):
        keys = c.keys("r", n)
        mapping = dict(zip(keys, values_for(keys, f"|r{r}")))
        check("memory", c, c.stored_ok(c.set_multi(mapping), n), "set_multi failed")
        got = c.get_multi(keys)
        check("memory", c, got == mapping, _diff(got, mapping))
        misses = c.get_multi(c.keys("x", 100))
        check("memory", c, not misses, f"{len(misses)} unexpected hits")
        items = list(mapping.items())[:500]
        check("memory", c, c.loop_get(items) == 0, "wrong single get")
        check("memory", c, c.loop_set(items) == 0, "single set failed")
        check("memory", c, c.get(c.keys("x", 1)[0]) is None, "hit on a missing key")
        c.set_counter(f"{c.tag}:rc")
        c.loop_incr(f"{c.tag}:rc", 500)
        check("memory", c, c.read_counter(f"{c.tag}:rc") == 500, "wrong counter")
        check("memory", c, c.deleted_ok(c.delete_multi(keys), n), "delete_multi failed")
        del got, misses, items, mapping, keys
        gc.collect()
        rss.append(read_rss())
    return rss


def memory_child(name: str, server: str, rounds: int, n: int, tag: str) -> int:
    """Entry point of the fresh process that measures one client (see scenario_memory)."""
    out: dict = {"rss": None}
    try:
        if name == "fastmc":
            mod, modname, err = load_fastmc()
            if mod is None:
                raise RuntimeError(f"import failed: {err}")
            c = make_fastmc(mod, modname, [server], tag)
        else:
            c = PEER_MAKERS[name]([server], tag)
        out["rss"] = memory_workload(c, rounds, n)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        FAILURES.items.append(f"memory: {name}: raised {e!r}")
    out["failures"] = FAILURES.items
    print("MEMORY-RESULT " + json.dumps(out), flush=True)
    return 0


def scenario_memory(ctx: Ctx) -> None:
    """Resident memory across repeated rounds of mixed operations: a fresh process per client,
    so the RSS is the client's own and not what earlier scenarios left in the heap."""
    R, n = ctx.s.memory_rounds, ctx.s.memory_keys
    names = (["fastmc"] if ctx.has_fastmc else []) + list(PEERS)
    rows, res = [], {}
    warm = min(2, R - 1)
    for i, name in enumerate(names):
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", name,
               "--servers", ctx.servers1[0], "--memory-rounds", str(R),
               "--memory-keys", str(n), "--memory-tag", f"{ctx.run_id}m{i}"]
        label = name
        if name == "fastmc" and ctx.standin:
            label = f"fastmc [stand-in: {ctx.fastmc_name}]"
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            line = next((ln for ln in proc.stdout.splitlines()
                         if ln.startswith("MEMORY-RESULT ")), None)
            if line is None:
                raise RuntimeError(f"child exited {proc.returncode}: {proc.stderr[-500:]}")
            out = json.loads(line.split(" ", 1)[1])
        except Exception as e:  # noqa: BLE001
            FAILURES.add("memory", label, f"child process failed: {e!r}")
            rows.append([label, "failed", "", "", ""])
            continue
        for msg in out["failures"]:
            FAILURES.add("memory (child)", label, msg)
        rss = out["rss"]
        if not rss:
            rows.append([label, "failed", "", "", ""])
            continue
        growth = rss[-1] - rss[warm]
        res[label] = {"rss": rss, "growth_bytes": growth}
        rows.append([label, f"{rss[0] / 2**20:.1f}", f"{rss[warm] / 2**20:.1f}",
                     f"{rss[-1] / 2**20:.1f}", f"{growth / 2**10:+,.0f}"])
        if name == "fastmc":
            ctx.target("memory", f"resident memory does not grow over {R} rounds (≤ 1 MiB after "
                       f"round {warm + 1})", f"{growth / 2**10:+,.0f} KiB",
                       growth <= 2**20 and not out["failures"])
    if not ctx.has_fastmc:
        ctx.target("memory", "resident memory does not grow", "fastmc missing", False)
    ctx.data["memory"] = res
    ctx.emit("Resident memory across repeated rounds",
             f"A fresh Python process per client, {R} rounds each: set_multi/get_multi/"
             f"delete_multi of {n:,} keys, get_multi of 100 missing keys, 500 single get and "
             f"set, a miss, 500 incr (all checked); gc.collect() then the process's RSS after "
             f"each round. Growth = RSS after the last round − after round {warm + 1}.\n\n" +
             md_table(["client", "RSS after round 1 (MiB)", f"after round {warm + 1} (MiB)",
                       f"after round {R} (MiB)", "growth (KiB)"], rows))


UNPINNED = ("threads", "memory")  # threads need every CPU; memory times nothing
SCENARIO_FUNCS = {
    "single": scenario_single,
    "multi": scenario_multi,
    "simple_vs_multi": scenario_simple_vs_multi,
    "speedup": scenario_speedup,
    "noreply": scenario_noreply,
    "bulk": scenario_bulk,
    "threads": scenario_threads,
    "memory": scenario_memory,
}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def load_fastmc() -> tuple:
    name = os.environ.get(FASTMC_MODULE_ENV, "fastmc")
    try:
        return importlib.import_module(name), name, None
    except Exception as e:  # noqa: BLE001 - any import failure means the column is missing
        return None, name, f"{type(e).__name__}: {e}"


def environment(ctx: Ctx, args: argparse.Namespace, spawned: bool, infos: list) -> dict:
    cpu = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       "")
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    fastmc_v = "not importable"
    if ctx.has_fastmc:
        fastmc_v = getattr(ctx.fastmc_mod, "__version__", None) or pkg_version(ctx.fastmc_name)
        if ctx.standin:
            fastmc_v = (f"STAND-IN {ctx.fastmc_name} "
                        f"({getattr(ctx.fastmc_mod, '__file__', '?')})")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if ctx.s.quick else "full",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "python": sys.version.split()[0] + " " + platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "memcached": "; ".join(f"{i['address']} {i['version']} (threads={i.get('threads')}, "
                               f"memory={i.get('limit_maxbytes', 0) >> 20} MiB)" for i in infos),
        "servers": "started by bench.py" if spawned else "given with --servers",
        "pinning": ("client and servers on one CPU, except threads and memory" if ctx.pin_pids
                    else "off"),
        "fastmc": fastmc_v,
        "pylibmc": pkg_version("pylibmc"),
        "pymemcache": pkg_version("pymemcache"),
        "libmc": pkg_version("libmc"),
        "python-memcached": pkg_version("python-memcached"),
        "matplotlib": pkg_version("matplotlib"),
        "value size": f"{VALUE_SIZE} bytes",
    }


def summary(ctx: Ctx) -> str:
    rows = []
    for t in ctx.targets:
        mark = "PASS" if t.ok else ("n/a" if t.ok is None else "FAIL")
        rows.append([t.scenario, t.target, t.measured, mark])
    npass = sum(1 for t in ctx.targets if t.ok)
    nfail = sum(1 for t in ctx.targets if t.ok is False)
    head = f"{npass} PASS, {nfail} FAIL."
    if not ctx.has_fastmc:
        head += f" **fastmc could not be imported ({ctx.fastmc_error}): every target FAILS.**"
    elif ctx.standin:
        head += (f" **The fastmc column is a stand-in ({ctx.fastmc_name}, via "
                 f"{FASTMC_MODULE_ENV}); these are not fastmc's results.**")
    return head + "\n\n" + md_table(["scenario", "target", "measured", "result"], rows)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="scenarios: " + ", ".join(SCENARIOS))
    ap.add_argument("--servers", help="host:port,... of running memcached servers (default: "
                    "start throwaway servers; three-server scenarios need three)")
    ap.add_argument("--quick", action="store_true", help="fewer rounds, smaller bulk load")
    ap.add_argument("--scenarios", help="comma-separated subset (default: all)")
    ap.add_argument("--out", default="results", help="folder for the Markdown and the chart")
    ap.add_argument("--strict", action="store_true", help="exit 3 when a target fails")
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)  # internal: scenario memory
    ap.add_argument("--memory-rounds", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--memory-keys", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--memory-tag", default="m", help=argparse.SUPPRESS)
    ap.add_argument("--pin", choices=("auto", "off"), default="auto",
                    help="auto (default): when bench.py started the servers, pin this process "
                    "and the servers to one CPU for every scenario but threads and memory; off: "
                    "let the scheduler place them")
    args = ap.parse_args(argv)
    if args.memory_child:
        return memory_child(args.memory_child, args.servers, args.memory_rounds,
                            args.memory_keys, args.memory_tag)
    signal.signal(signal.SIGTERM, _sigterm)
    started = perf_counter()

    wanted = list(SCENARIOS)
    if args.scenarios:
        wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in SCENARIO_FUNCS]
        if unknown:
            ap.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    settings = Settings.make(args.quick)

    mod, modname, err = load_fastmc()
    if mod is None:
        print(f"\n{BANNER}\nWARNING: `import {modname}` failed: {err}\nThe fastmc column will be "
              f"MISSING; the peers are still measured, and the run exits non-zero.\n{BANNER}\n",
              file=sys.stderr, flush=True)
    elif modname != "fastmc":
        print(f"\nNOTE: the fastmc column is a STAND-IN: module {modname!r} "
              f"({FASTMC_MODULE_ENV}).\n", file=sys.stderr, flush=True)

    spawned = not args.servers
    if args.servers:
        addrs = [a.strip() for a in args.servers.split(",") if a.strip()]
        servers1 = addrs[:1]
        servers3 = addrs[:3] if len(addrs) >= 3 else None
    else:
        need3 = "multi" in wanted
        procs = [Memcached() for _ in range(4 if need3 else 1)]
        servers1 = [procs[0].address]
        servers3 = [p.address for p in procs[1:]] if need3 else None
    infos = [server_info(a) for a in servers1 + (servers3 or [])]
    meta_ok = all(i["meta"] for i in infos)

    ctx = Ctx(settings, servers1, servers3, meta_ok, mod, modname, err,
              run_id=f"{random.randrange(16**3):03x}")
    if spawned and args.pin == "auto" and hasattr(os, "sched_setaffinity"):
        ctx.pin_pids = [p.proc.pid for p in procs]
    os.makedirs(args.out, exist_ok=True)
    ctx.data["_out"] = args.out
    ctx.data["_limit_maxbytes"] = infos[0].get("limit_maxbytes")
    env = environment(ctx, args, spawned, infos)
    print("environment:\n" + "\n".join(f"  {k}: {v}" for k, v in env.items()), flush=True)

    interrupted = False
    try:
        for name in wanted:
            t0 = perf_counter()
            print(f"\n=== scenario {name} ===", flush=True)
            try:
                pin = pinned(ctx) if name not in UNPINNED else contextlib.nullcontext(False)
                with pin as ctx.pinned_now:
                    SCENARIO_FUNCS[name](ctx)
            except Exception as e:  # noqa: BLE001 - one broken scenario must not hide the rest
                import traceback

                traceback.print_exc()
                FAILURES.add(name, "bench.py", f"scenario crashed: {e!r}")
            print(f"=== {name}: {perf_counter() - t0:.1f} s ===", flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: writing what was measured so far", file=sys.stderr)

    elapsed = perf_counter() - started
    env["runtime"] = f"{elapsed:.1f} s"
    mode = "quick" if settings.quick else "full"
    parts = [f"# fastmc benchmarks ({mode} run)\n",
             "Generated by `benches/bench.py`; see `benches/README.md`. All figures are from "
             "this one run: medians, clients interleaved round by round.\n"]
    if not ctx.has_fastmc:
        parts.append(f"> **WARNING: fastmc could not be imported ({err}). Its column is "
                     "missing.**\n")
    elif ctx.standin:
        parts.append(f"> **The fastmc column is a stand-in: {modname} via {FASTMC_MODULE_ENV} "
                     "(development aid). These are not fastmc's results.**\n")
    if FAILURES.items:
        parts.append("> **VERIFICATION FAILURES:**\n" +
                     "\n".join(f"> - {m}" for m in FAILURES.items) + "\n")
    parts.append("## Environment\n\n" + md_table(["", ""], [[k, str(v)] for k, v in env.items()])
                 + "\n")
    parts += ctx.sections
    summ = summary(ctx)
    parts.append("## Summary: targets\n\n" + summ + "\n")
    md_path = os.path.join(args.out, f"bench-{mode}.md")
    with open(md_path, "w") as f:
        f.write("\n".join(parts))
    data = {k: v for k, v in ctx.data.items() if not k.startswith("_")}
    data["environment"] = env
    data["targets"] = [t.__dict__ for t in ctx.targets]
    data["failures"] = FAILURES.items
    with open(os.path.join(args.out, f"bench-{mode}.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
    print("\n## Summary: targets\n\n" + summ)
    print(f"\nwrote {md_path} (+ .json{', multi_speedup.png' if 'speedup' in wanted else ''}); "
          f"runtime {elapsed:.1f} s")

    code = 0
    if args.strict and any(t.ok is False for t in ctx.targets):
        code = 3
    if FAILURES.items:
        print(f"\n{BANNER}\n{len(FAILURES.items)} VERIFICATION FAILURE(S):\n" +
              "\n".join(f"  - {m}" for m in FAILURES.items) + f"\n{BANNER}", file=sys.stderr)
        code = 2
    if mod is None:
        print(f"\n{BANNER}\nfastmc WAS NOT MEASURED: `import {modname}` failed: {err}\n{BANNER}",
              file=sys.stderr)
        code = code or 1
    if interrupted:
        code = code or 130
    return code


if __name__ == "__main__":
    sys.exit(main())
