"""pytest-benchmark versions of the key scenarios: `pytest benches/` (not part of `make test`).

Each benchmark checks what it read back; compare the groups side by side in pytest-benchmark's
table (fastmc, pylibmc and the raw-socket floor share a group per operation)."""

import socket
import subprocess
import time

import pylibmc
import pytest

import fastmc

KEYS = ["bench%d" % i for i in range(1000)]
DATA = {k: "v" * 40 for k in KEYS}


@pytest.fixture(scope="module")
def address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "256"])
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.02)
    yield "127.0.0.1:%d" % port
    proc.kill()
    proc.wait()


@pytest.fixture(params=["fastmc", "pylibmc"])
def mc(request, address):
    mod = fastmc if request.param == "fastmc" else pylibmc
    return mod.Client([address])


class Floor:
    """One raw pipelined batch: sendall, then recv until the terminator; no parsing."""

    def __init__(self, address):
        host, port = address.split(":")
        self.s = socket.create_connection((host, int(port)))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def batch(self, payload, end):
        self.s.sendall(payload)
        buf = b""
        while not buf.endswith(end):
            buf += self.s.recv(1 << 20)
        return buf


@pytest.mark.benchmark(group="single get")
def test_single_get(benchmark, mc):
    mc.set("one", "value")
    assert benchmark(mc.get, "one") == "value"


@pytest.mark.benchmark(group="single set")
def test_single_set(benchmark, mc):
    assert benchmark(mc.set, "one", "value") is True


@pytest.mark.benchmark(group="set_multi 1000")
def test_set_multi(benchmark, mc):
    assert benchmark(mc.set_multi, DATA) == []


@pytest.mark.benchmark(group="get_multi 1000")
def test_get_multi(benchmark, mc):
    mc.set_multi(DATA)
    assert benchmark(mc.get_multi, KEYS) == DATA


@pytest.mark.benchmark(group="delete_multi 1000")
def test_delete_multi(benchmark, mc):
    def run():
        mc.set_multi(DATA)
        return mc.delete_multi(KEYS)

    assert benchmark(run) is True


@pytest.mark.benchmark(group="set_multi 1000")
def test_floor_set(benchmark, address):
    f = Floor(address)

    def run():
        payload = b"".join(b"set %s 0 0 40\r\n%s\r\n" % (k.encode(), b"v" * 40) for k in KEYS) + b"mn\r\n"
        return f.batch(payload, b"MN\r\n")

    assert benchmark(run).count(b"STORED") == len(KEYS)


@pytest.mark.benchmark(group="get_multi 1000")
def test_floor_get(benchmark, address):
    fastmc.Client([address]).set_multi(DATA)
    f = Floor(address)

    def run():
        return f.batch(("get " + " ".join(KEYS) + "\r\n").encode(), b"END\r\n")

    assert benchmark(run).count(b"VALUE ") == len(KEYS)
