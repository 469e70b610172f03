"""The system calls of the everyday call, counted by strace in a child process: a single get,
set, delete or incr is one send and one recv, a `noreply` set one send. (A pooled connection
idle for over a millisecond is peeked at before a write, by design: those peeks are left out
of the count; docs/failures.md says when they happen.)"""

import collections
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import os, sys
    import fastmc
    mc = fastmc.Client([sys.argv[1]])
    mc.set("k", b"v" * 40)
    mc.set("n", 1)
    calls = {
        "get_hit": lambda: mc.get("k"),
        "get_miss": lambda: mc.get("gone"),
        "set": lambda: mc.set("k", b"v" * 40),
        "delete": lambda: mc.delete("gone"),
        "incr": lambda: mc.incr("n"),
        "set_noreply": lambda: mc.set("k", b"v" * 40, noreply=True),
    }
    f = calls[sys.argv[2]]
    for _ in range(10):
        f()
    os.write(2, b"<calls>\\n")
    for _ in range(int(sys.argv[3])):
        f()
    os.write(2, b"</calls>\\n")
    """
)

N = 200
SYSCALL = re.compile(r"^(?:\d+\s+)?(\w+)\(")


def traced(address, call, tmp_path):
    """The system calls the child made between its two marks, by name (peeks left out)."""
    if shutil.which("strace") is None:
        pytest.fail("strace is missing: run `make memcached`")
    out = tmp_path / "trace"
    subprocess.run(
        ["strace", "-f", "-o", str(out), sys.executable, "-c", CHILD, address, call, str(N)],
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        stderr=subprocess.DEVNULL,
    )
    lines = out.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "<calls>" in line)
    end = next(i for i, line in enumerate(lines) if "</calls>" in line)
    names = collections.Counter()
    for line in lines[start + 1 : end]:
        m = SYSCALL.match(line)
        if m and "MSG_PEEK" not in line:
            names[m.group(1)] += 1
    return names


@pytest.mark.parametrize("call", ["get_hit", "get_miss", "set", "delete", "incr"])
def test_a_single_call_is_one_send_and_one_recv(server, call, tmp_path):
    assert traced(server.address, call, tmp_path) == {"sendto": N, "recvfrom": N}


def test_a_noreply_set_is_one_send(server, tmp_path):
    assert traced(server.address, "set_noreply", tmp_path) == {"sendto": N}
