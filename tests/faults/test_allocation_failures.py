"""When memory runs out while a large value is read, the call raises AllocationError (a
``fastmc.Error``), never another class, a panic or an abort, and the client keeps working: a
child process caps its own address space (RLIMIT_AS) at a range of margins above what it uses,
from too little for the read buffer to enough for every copy, and reads a large value at each,
through each kind of value (and, in the text protocol, both read paths)."""

import json
import subprocess
import sys

import pytest
from memcached import Memcached

CHILD = r"""
import json, resource, sys, zlib
import fastmc

server, binary = sys.argv[1], sys.argv[2] == "1"
size = 16 << 20
mc = fastmc.Client([server], binary=binary)
values = {
    "bytes": b"b" * size,
    "str": "s" * size,
    "zlib": b"z" * size,  # stored compressed: inflated on the way in
}
assert mc.set("bytes", values["bytes"]) and mc.set("str", values["str"])
assert mc.set("zlib", values["zlib"], min_compress_len=1)
reads = {"get": lambda k: mc.get(k)}
if not binary:
    reads["get_multi"] = lambda k: mc.get_multi([k, "missing"])[k]

def vm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

outcomes = []
for margin_mib in range(0, 60, 6):
    for kind, expected in values.items():
        for name, read in reads.items():
            resource.setrlimit(resource.RLIMIT_AS, (vm() + (margin_mib << 20), resource.RLIM_INFINITY))
            try:
                got = read(kind)
                what = "ok" if got == expected else "WRONG VALUE"
            except BaseException as e:
                what = type(e).__name__
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
            outcomes.append([margin_mib, kind, name, what])
print(json.dumps({"outcomes": outcomes, "after": mc.get("bytes") == values["bytes"]}))
"""


@pytest.fixture(scope="module")
def big_server():
    m = Memcached("-I", "32m", memory_mb=512)
    yield m
    m.stop()


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_out_of_memory_while_reading_raises_allocation_error(big_server, binary):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, big_server.address, "1" if binary else "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    outcomes = report["outcomes"]
    seen = {what for _, _, _, what in outcomes}
    assert seen <= {"ok", "AllocationError"}, [
        o for o in outcomes if o[3] not in ("ok", "AllocationError")
    ]
    # the margins span both: too little memory, then enough
    assert "AllocationError" in seen and "ok" in seen, outcomes
    assert report["after"]
