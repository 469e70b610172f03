"""twemproxy (Debian's `nutcracker`) in front of real memcached servers, on free loopback ports:
the proxy large deployments put between clients and memcached. Started, restarted and stopped
like `memcached.Memcached`."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from typing import ClassVar

from memcached import Memcached, _die_with_parent, free_port, wait_listening


def nutcracker_binary() -> str:
    found = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
    if not os.path.exists(found):
        raise RuntimeError("nutcracker missing: install Debian's nutcracker (make memcached does)")
    return found


class Nutcracker:
    """A twemproxy pool over `backends` (Memcached processes) with the given `distribution`
    (ketama, modula or random) and `hash`. ``auto_eject`` takes a failed backend out of the
    pool after ``failure_limit`` failures for ``retry_ms``."""

    ALL: ClassVar[list[Nutcracker]] = []

    def __init__(
        self,
        backends: list[Memcached],
        distribution: str = "ketama",
        hash: str = "fnv1a_64",
        auto_eject: bool = False,
        failure_limit: int = 1,
        retry_ms: int = 1000,
        timeout_ms: int = 1000,
    ) -> None:
        self.backends = backends
        self.port = free_port()
        self.stats_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="nutcracker-")
        self.conf = os.path.join(self.dir, "pool.yml")
        lines = [
            "pool:",
            f"  listen: 127.0.0.1:{self.port}",
            f"  hash: {hash}",
            f"  distribution: {distribution}",
            f"  timeout: {timeout_ms}",
            f"  auto_eject_hosts: {'true' if auto_eject else 'false'}",
            f"  server_failure_limit: {failure_limit}",
            f"  server_retry_timeout: {retry_ms}",
            "  servers:",
            *[f"   - 127.0.0.1:{b.port}:1 b{i}" for i, b in enumerate(backends)],
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None
        Nutcracker.ALL.append(self)
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            nutcracker_binary(),
            "-c",
            self.conf,
            "-s",
            str(self.stats_port),
            "-o",
            os.path.join(self.dir, "nutcracker.log"),
        ]
        in_main_thread = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if in_main_thread else None,
        )
        if not wait_listening("127.0.0.1", self.port):
            self.stop()
            raise RuntimeError(f"nutcracker did not start ({' '.join(args)})")

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=5)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@atexit.register
def _stop_all() -> None:
    for n in Nutcracker.ALL:
        with contextlib.suppress(Exception):
            n.stop()
