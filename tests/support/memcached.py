"""Throwaway memcached processes, for the tests and the benchmark alike: one place that picks a
free port (or takes a given port or UNIX socket path), starts the server (stopped at exit, and
killed with this process should it die, for servers started from the main thread), waits until
it accepts connections, restarts it on the same port and stops it; one that requires SASL
authentication (Debian's saslpasswd2 makes its password database); and a SIGSTOP that waits for
every thread."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import ClassVar


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at the moment (the usual race: bind it soon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_listening(host: str, port: int, timeout: float = 10.0) -> bool:
    """Poll until something accepts connections on host:port; False when `timeout` ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def _wait_unix_listening(path: str, timeout: float = 10.0) -> bool:
    """Poll until something accepts connections on the UNIX socket `path` (a file left over by
    an earlier server refuses them); False when `timeout` ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(path)
                return True
            except OSError:
                pass
        time.sleep(0.02)
    return False


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process:
    # start() asks for it only from the main thread
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def memcached_binary() -> str:
    return os.environ.get("MEMCACHED") or shutil.which("memcached") or "/usr/bin/memcached"


def server_answer(address: str, command: bytes) -> bytes:
    """The first line a memcached at `address` (host:port) answers to a raw text `command`."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(command)
        return s.makefile("rb").readline()


def server_quirks(address: str) -> dict[str, bool]:
    """What changed in memcached's text protocol between 1.6.18 and 1.6.45 that pylibmc's
    outcomes follow (it sends these; fastmc never does, or sends them in a form both take):
    ``wide_touch_refused``: a touch time beyond 2**31 - 1 is refused (CLIENT_ERROR) rather than
    cast to 32 bits; ``bad_keys_refused``: a key with a space or a control character is refused
    (ERROR, CLIENT_ERROR) rather than looked up and missed (NOT_FOUND)."""
    return {
        "wide_touch_refused": server_answer(address, b"touch q 2147483648\r\n").startswith(
            b"CLIENT_ERROR"
        ),
        "bad_keys_refused": not server_answer(address, b"delete fastmc-probe x\r\n").startswith(
            b"NOT_FOUND"
        ),
    }


class Memcached:
    """A memcached on a free port of `host` (extra args go to memcached), stopped when this process
    exits (killed should it die, if started from the main thread). ``memory_mb`` and ``threads`` are
    memcached's -m and -t. ``port`` starts it on that port instead (once, no other port tried);
    ``unix_path`` listens on that UNIX socket instead of TCP (``address`` is then the path);
    ``binary`` runs that program instead of `memcached_binary()`."""

    ALL: ClassVar[list[Memcached]] = []

    def __init__(
        self,
        *extra: str,
        host: str = "127.0.0.1",
        memory_mb: int = 64,
        threads: int | None = None,
        connections: int | None = None,
        port: int | None = None,
        unix_path: str | None = None,
        binary: str | None = None,
    ) -> None:
        self.host = host
        self.binary = binary
        self.unix_path = unix_path
        self.extra = extra
        self.args_tail = ["-U", "0", "-m", str(memory_mb)]
        if threads is not None:
            self.args_tail += ["-t", str(threads)]
        if connections is not None:
            self.args_tail += ["-c", str(connections)]
        self.proc: subprocess.Popen[bytes] | None = None
        Memcached.ALL.append(self)
        last_err = ""
        fixed = port is not None or unix_path is not None
        for _attempt in range(1 if fixed else 5):
            self.port = port if fixed else free_port(host)
            if self.start():
                return
            last_err = self._kill()
        raise RuntimeError(f"could not start memcached ({' '.join(self.args)}): {last_err}")

    @property
    def address(self) -> str:
        if self.unix_path is not None:
            return self.unix_path
        return ("[%s]:%d" if ":" in self.host else "%s:%d") % (self.host, self.port)

    @property
    def args(self) -> list[str]:
        user = ["-u", "root"] if os.geteuid() == 0 else []  # memcached refuses root without -u
        if self.unix_path is not None:
            listen = ["-s", self.unix_path]
        else:
            listen = ["-l", self.host, "-p", str(self.port)]
        return [self.binary or memcached_binary(), *user, *listen, *self.args_tail, *self.extra]

    def start(self) -> bool:
        in_main_thread = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent if in_main_thread else None,
        )
        if self.unix_path is not None:
            up = _wait_unix_listening(self.unix_path)
        else:
            up = wait_listening(self.host, self.port)
        return up and self.proc.poll() is None

    def _kill(self) -> str:
        """Kill the process (woken first, should it be SIGSTOPped), reap it and close its stderr
        pipe; returns what it had written there."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        err = b""
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            if self.proc.returncode is not None:  # nothing can write to the pipe any more
                with contextlib.suppress(OSError):
                    err = self.proc.stderr.read() or b""
            self.proc.stderr.close()
        return err.decode(errors="replace")

    def restart(self) -> None:
        self._kill()
        self.start()

    def stop(self) -> None:
        self._kill()

    @classmethod
    def stop_all(cls) -> None:
        for m in cls.ALL:
            with contextlib.suppress(Exception):
                m.stop()


atexit.register(Memcached.stop_all)


@contextlib.contextmanager
def sasl_conf_path(directory: object) -> Iterator[None]:
    """SASL_CONF_PATH set to `directory` for the memcached processes started inside the block
    (they read it at start); the old value is back afterwards."""
    old = os.environ.get("SASL_CONF_PATH")
    os.environ["SASL_CONF_PATH"] = str(directory)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SASL_CONF_PATH"]
        else:
            os.environ["SASL_CONF_PATH"] = old


def sasl_memcached(directory: object, user: str, password: str) -> Memcached:
    """A memcached started with -S whose only account is user/password (mech PLAIN), its SASL
    configuration and password database in `directory`."""
    saslpasswd2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
    if not os.path.exists(saslpasswd2):
        raise RuntimeError("saslpasswd2 missing: install Debian's sasl2-bin (make memcached does)")
    db = os.path.join(str(directory), "sasldb2")
    with open(os.path.join(str(directory), "memcached.conf"), "w") as f:
        f.write("mech_list: plain\nsasldb_path: %s\n" % db)
    subprocess.run(
        [saslpasswd2, "-p", "-a", "memcached", "-c", "-f", db, user],
        input=password.encode(),
        check=True,
    )
    with sasl_conf_path(directory):
        proc = Memcached("-S")
    proc.sasl_dir = str(directory)  # type: ignore[attr-defined]
    return proc


# Behaviors for tests that stall or stop a server: a stalled request times out after 300 ms and
# the server is tried again a second after it failed.
FAST_FAILURE = {"_poll_timeout": 300, "retry_timeout": 1}


def sigstop(pid: int, timeout: float = 2.0) -> None:
    """SIGSTOP a process and wait until every one of its threads has stopped (the signal is
    asynchronous: a call made right after kill() may still be answered)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(s in ("T", "t") for s in states):
            return
        time.sleep(0.005)
    raise AssertionError("process %d did not stop" % pid)
