"""Throwaway memcached processes for the tests: one place that picks a free port, starts the
server, waits until it accepts connections, restarts it on the same port and stops it; and one
that requires SASL authentication (Debian's saslpasswd2 makes its password database)."""

import os
import shutil
import signal
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(host, port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)


class Memcached:
    """A memcached on a free port of `host` (extra args go to memcached)."""

    def __init__(self, *extra, host="127.0.0.1"):
        self.host = host
        self.port = free_port()
        self.extra = extra
        self.address = ("[%s]:%d" if ":" in host else "%s:%d") % (host, self.port)
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["memcached", "-u", "root", "-l", self.host, "-p", str(self.port), "-U", "0", "-m", "64", *self.extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.host, self.port)

    def restart(self):
        self.proc.kill()
        self.proc.wait()
        self.start()

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def sasl_memcached(directory, user, password):
    """A memcached started with -S whose only account is user/password (mech PLAIN), its SASL
    configuration and password database in `directory`."""
    saslpasswd2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
    if not os.path.exists(saslpasswd2):
        raise RuntimeError("saslpasswd2 missing: install Debian's sasl2-bin (make memcached does)")
    db = os.path.join(str(directory), "sasldb2")
    with open(os.path.join(str(directory), "memcached.conf"), "w") as f:
        f.write("mech_list: plain\nsasldb_path: %s\n" % db)
    subprocess.run([saslpasswd2, "-p", "-a", "memcached", "-c", "-f", db, user],
                   input=password.encode(), check=True)
    old = os.environ.get("SASL_CONF_PATH")
    os.environ["SASL_CONF_PATH"] = str(directory)
    try:
        proc = Memcached("-S")
    finally:
        if old is None:
            del os.environ["SASL_CONF_PATH"]
        else:
            os.environ["SASL_CONF_PATH"] = old
    proc.sasl_dir = str(directory)
    return proc


def sigstop(pid, timeout=2.0):
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
