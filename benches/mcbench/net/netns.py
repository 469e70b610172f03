"""The simulated network: a client namespace and a server namespace joined by a veth pair, with
every packet that crosses it held by `netdelay` (benches/netdelay), the NFQUEUE program that adds
the delay, the loss and the reordering.

    client ns  fmcnet<pid>c   10.77.0.1/24  veth-c ─── veth-s  10.77.0.2/24  fmcnet<pid>s  server ns
                                                         iptables (mangle): PREROUTING -i veth-s and
                                                         OUTPUT -o veth-s -j NFQUEUE; netdelay holds
                                                         each packet, then accepts or drops it

The memcached servers listen on 10.77.0.2 only, inside the server namespace. Nothing touches the
root namespace: both ends of the veth pair are created inside the namespaces. `Net.down()` kills
what was started and deletes both namespaces; `clean_stale()` does it for the namespaces of an
earlier run whose process is gone (crashed, `kill -9`). The names carry the owner's pid, so runs
side by side on one machine do not collide.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import time

PREFIX = "fmcnet"
CLIENT_IP, SERVER_IP = "10.77.0.1", "10.77.0.2"
QUEUE = 0
_NAME = re.compile(rf"^{PREFIX}(\d+)[cs]$")
CLONE_NEWNET = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _die_with_parent() -> None:  # in the child, between fork and exec (survives `ip netns exec`)
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_in(ns: str) -> None:
    """Kill every process still in namespace `ns` (only namespaces this tool created)."""
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        if int(pid) == os.getpid():  # this process, once it has moved into the client namespace
            continue
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale() -> list[str]:
    """Delete the namespaces left by runs whose process is gone; returns their names."""
    gone = []
    for ns in _namespaces():
        m = _NAME.match(ns)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            _kill_in(ns)
            _ip("netns", "del", ns, check=False)
            gone.append(ns)
    return gone


def setns(ns: str) -> None:
    """Move the calling thread (and the threads and sockets it creates later) into `ns`."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    with open(f"/run/netns/{ns}") as f:
        if libc.setns(f.fileno(), CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({ns})")


class Holder:
    """The running netdelay: its settings are changed through its stdin."""

    name = "netdelay"

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def command(self, line: str) -> str:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().strip()
        if not reply or reply.startswith("error"):
            raise RuntimeError(f"netdelay: {line!r}: {reply or 'exited'}")
        return reply

    def set(self, **settings: float) -> None:
        for k, v in settings.items():
            self.command(f"{k} {v}")

    def stats(self) -> dict:
        words = self.command("stats").split()
        return {k: float(v) for k, v in zip(words[::2], words[1::2])}


class Netem:
    """The delay, loss and reordering by sch_netem on both ends of the link, where the kernel
    has it: the same `set` and `stats` as Holder. netem reorders by sending a packet at once
    (the others wait the delay), so `reorder_extra_us` does not apply."""

    name = "netem"

    def __init__(self, net: Net) -> None:
        self.links = ((net.client_ns, "veth-c"), (net.server_ns, "veth-s"))
        self.settings = {"delay_us": 0.0, "loss": 0.0, "reorder": 0.0}

    def set(self, **settings: float) -> None:
        self.settings.update((k, v) for k, v in settings.items() if k in self.settings)
        s = self.settings
        opts = f"delay {s['delay_us']:.0f}us"
        if s["loss"] > 0:
            opts += f" loss {s['loss'] * 100:g}%"
        if s["reorder"] > 0:
            opts += f" reorder {s['reorder'] * 100:g}%"
        for ns, dev in self.links:
            tc = ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "netem", *opts.split()]
            subprocess.run(tc, check=True, capture_output=True)

    def stats(self) -> dict:
        """packets (sent and dropped), dropped, reordered (not counted by netem: 0)."""
        sent = dropped = 0
        for ns, dev in self.links:
            out = subprocess.run(
                ["tc", "-s", "-n", ns, "qdisc", "show", "dev", dev],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            m = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out)
            if m:
                sent += int(m.group(1))
                dropped += int(m.group(2))
        return {"packets": sent + dropped, "dropped": dropped, "reordered": 0.0}


class Net:
    """Two namespaces, the veth pair, the NFQUEUE rules, netdelay, and the servers."""

    def __init__(self, holder_bin: str, slow_start_after_idle: bool = False) -> None:
        self.holder_bin = holder_bin
        self.slow_start_after_idle = slow_start_after_idle
        self.client_ns = f"{PREFIX}{os.getpid()}c"
        self.server_ns = f"{PREFIX}{os.getpid()}s"
        self.procs: list[subprocess.Popen] = []
        self.holder: Holder | None = None
        self.servers: list[str] = []

    def up(self) -> None:
        for ns in (self.client_ns, self.server_ns):
            _ip("netns", "add", ns)
        # Both ends are created inside the namespaces: nothing in the root namespace.
        c, s = self.client_ns, self.server_ns
        _ip(*f"link add veth-c netns {c} type veth peer name veth-s netns {s}".split())
        for ns, dev, ip in (
            (self.client_ns, "veth-c", CLIENT_IP),
            (self.server_ns, "veth-s", SERVER_IP),
        ):
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # Linux shrinks an idle connection's congestion window back to 10 segments (after
            # an RTO's worth of silence). Between a client's timed calls, the other clients
            # run for up to a second, so a 1,000-key reply would pay an extra round trip or
            # not depending on the order of the round: off unless asked for.
            flag = int(self.slow_start_after_idle)
            self.run(ns, ["sysctl", "-qw", f"net.ipv4.tcp_slow_start_after_idle={flag}"])

    def run(self, ns: str, args: list) -> None:
        subprocess.run(["ip", "netns", "exec", ns, *args], check=True, capture_output=True)

    def spawn(self, ns: str, args: list, **kw: object) -> subprocess.Popen:
        """A process in namespace `ns`, killed at down() (and with this process, should it die)."""
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, *args],
            preexec_fn=_die_with_parent,
            start_new_session=True,  # Ctrl-C reaches this process alone; down() stops them
            **kw,  # type: ignore[arg-type]
        )
        self.procs.append(p)
        return p

    def has_netem(self) -> bool:
        """Whether this kernel has sch_netem (tried on the client's end of the link)."""
        r = _ip("-n", self.client_ns, "link", "show", "veth-c", check=False)  # the link exists
        tc = ["tc", "-n", self.client_ns, "qdisc", "add", "dev", "veth-c", "root", "netem"]
        ok = r.returncode == 0 and subprocess.run(tc, capture_output=True).returncode == 0
        if ok:
            subprocess.run([*tc[:4], "del", *tc[5:7], "root"], capture_output=True)
        return ok

    def start_delay(self, mechanism: str = "auto", **settings: float) -> Holder | Netem:
        """netem where the kernel has it (unless `mechanism` is "netdelay"), else netdelay."""
        if mechanism == "netem" or (mechanism == "auto" and self.has_netem()):
            netem = Netem(self)
            netem.set(**settings)
            return netem
        return self.start_holder(**settings)

    def start_holder(self, **settings: float) -> Holder:
        if not os.access(self.holder_bin, os.X_OK):
            raise RuntimeError(f"no netdelay at {self.holder_bin}: `make bench-net` builds it")
        for chain, way in (("PREROUTING", "-i"), ("OUTPUT", "-o")):
            rule = f"-t mangle -A {chain} {way} veth-s -j NFQUEUE --queue-num {QUEUE}"
            self.run(self.server_ns, ["iptables", *rule.split()])
        args = [self.holder_bin, "--queue", str(QUEUE)]
        for k, v in settings.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        p = self.spawn(
            self.server_ns, args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.holder = Holder(p)
        self.holder.stats()  # it answers once it has bound the queue
        return self.holder

    def start_memcached(self, count: int, base_port: int = 11211) -> list[str]:
        user = ["-u", "root"] if os.geteuid() == 0 else []
        for i in range(count):
            port = base_port + i
            args = ["memcached", *user, "-l", SERVER_IP, "-p", str(port), "-U", "0"]
            self.spawn(
                self.server_ns,
                [*args, "-m", "256", "-t", "2", "-c", "4096"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.servers.append(f"{SERVER_IP}:{port}")
        return self.servers

    def wait_listening(self, addr: str, timeout: float = 10.0) -> None:
        """From the client namespace (this thread must be in it): until addr accepts."""
        host, _, port = addr.rpartition(":")
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def down(self) -> None:
        """Stop everything this run started and delete both namespaces (idempotent)."""
        for p in self.procs:
            with contextlib.suppress(Exception):
                if p.stdin:
                    p.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # its own session: `ip` and what it exec'd
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        self.procs.clear()
        for ns in (self.client_ns, self.server_ns):
            if ns in _namespaces():
                _kill_in(ns)
                _ip("netns", "del", ns, check=False)
