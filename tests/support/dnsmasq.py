"""Debian's dnsmasq as a DNS server on a free loopback port (UDP and TCP), for the DNS discovery
tests: it answers only for names under `.test` (NXDOMAIN for the others), A and AAAA records
from a hosts file it re-reads on SIGHUP (`set_hosts`), SRV records from its configuration
(`set_srv` restarts it on the same port). `stop()` and `start()` take it down and back."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from memcached import _die_with_parent, free_port

# Where the pods listen (Linux answers on all of 127/8 without configuration).
LOOPBACKS = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]


def dnsmasq_binary() -> str:
    for path in (shutil.which("dnsmasq"), "/usr/sbin/dnsmasq"):
        if path and os.access(path, os.X_OK):
            return path
    raise RuntimeError("dnsmasq is not installed (make memcached installs dnsmasq-base)")


def free_udp_tcp_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free for UDP and TCP")


def port_free_everywhere() -> int:
    """A TCP port free on every address of LOOPBACKS."""
    for _ in range(50):
        port = free_port()
        free = True
        for ip in LOOPBACKS:
            with socket.socket() as s:
                try:
                    s.bind((ip, port))
                except OSError:
                    free = False
        if free:
            return port
    raise RuntimeError("no port free on every loopback address")


class DnsMasq:
    def __init__(self, hosts=(), srv=()):
        self.dir = tempfile.mkdtemp(prefix="fastmc-dns-")
        self.port = free_udp_tcp_port()
        self.proc = None
        self.hosts = list(hosts)
        self.srv = list(srv)
        self._write_hosts()
        self._write_conf()
        self.start()

    @property
    def nameserver(self) -> str:
        return "127.0.0.1:%d" % self.port

    def _write_hosts(self):
        lines = ["127.0.0.1 ready.test"] + ["%s %s" % (ip, name) for name, ip in self.hosts]
        tmp = os.path.join(self.dir, "hosts.new")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(self.dir, "hosts"))

    def _write_conf(self):
        lines = ["srv-host=%s,%s,%d" % (name, target, port) for name, target, port in self.srv]
        with open(os.path.join(self.dir, "conf"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self):
        user = pwd.getpwuid(os.getuid())
        group = user.pw_name if os.getuid() else "root"
        self.proc = subprocess.Popen(
            [
                dnsmasq_binary(),
                "--keep-in-foreground",
                "--port=%d" % self.port,
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                "--no-resolv",
                "--no-hosts",
                "--local=/test/",
                "--addn-hosts=" + os.path.join(self.dir, "hosts"),
                "--conf-file=" + os.path.join(self.dir, "conf"),
                "--pid-file=",
                "--user=" + user.pw_name,
                "--group=" + group,
                "--log-facility=" + os.path.join(self.dir, "log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent
            if threading.current_thread() is threading.main_thread()
            else None,
        )
        self.wait_for("ready.test", {"127.0.0.1"})

    def answers(self, name: str) -> set:
        import dns.nameserver
        import dns.resolver

        r = dns.resolver.Resolver(configure=False)
        r.nameservers = [dns.nameserver.Do53Nameserver("127.0.0.1", port=self.port)]
        r.lifetime = 0.5
        r.cache = None
        try:
            return {a.address for a in r.resolve(name, "A")}
        except Exception:
            return set()

    def wait_for(self, name: str, expected: set, timeout: float = 10.0) -> None:
        """Until the server answers `name` with `expected` (a changed hosts file is read in
        the background after SIGHUP)."""
        deadline = time.monotonic() + timeout
        while self.answers(name) != expected:
            if self.proc.poll() is not None:
                raise RuntimeError("dnsmasq exited: %s" % self.log())
            if time.monotonic() > deadline:
                raise RuntimeError("dnsmasq did not answer %s with %s" % (name, expected))
            time.sleep(0.02)

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def set_hosts(self, hosts, wait=None):
        """New A/AAAA records ((name, ip) pairs), re-read on SIGHUP; `wait`: (name, the set of
        addresses it must answer) before returning."""
        self.hosts = list(hosts)
        self._write_hosts()
        self.proc.send_signal(signal.SIGHUP)
        if wait is not None:
            self.wait_for(*wait)

    def set_srv(self, srv):
        """New SRV records ((name, target, port)): dnsmasq restarts on the same port."""
        self.srv = list(srv)
        self._write_conf()
        self.stop()
        self.start()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
