"""The smoke test of an installed fastmc, run by `make wheels` (release/wheels.py) with the python
of a fresh virtualenv that has only fastmc installed (`python -I`, so nothing of the repository
is importable, and a PATH holding only the venv's bin, so no compiler):

    python -I smoke.py VERSION SERVER TLS_SERVER CA_FILE [emulated]

against a plain memcached at SERVER and one speaking TLS (-Z) at TLS_SERVER with a certificate
signed by CA_FILE. Any failure is an AssertionError or exception (exit status 1). Runs on
CPython 3.9 to 3.15. `emulated`: the interpreter runs under qemu-user, which cannot start
another foreign program, so the console script is checked but not run.
"""

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path


def main(version: str, server: str, tls_server: str, ca_file: str, *flags: str) -> None:
    compilers = [c for c in ("cc", "gcc", "clang", "zig", "cargo", "rustc") if shutil.which(c)]
    assert not compilers, f"a compiler is on the PATH: {compilers}"

    import fastmc

    here = Path(fastmc.__file__).resolve().parent
    assert Path(sys.prefix).resolve() in here.parents, f"fastmc imported from {here}"
    assert fastmc.__version__ == version, (fastmc.__version__, version)
    assert importlib.metadata.version("fastmc") == version
    assert (here / "py.typed").is_file() and (here / "_fastmc.pyi").is_file()

    # The text protocol: single keys, 100-key batches, a compressed value, a prefix.
    mc = fastmc.Client([server], behaviors={"ketama": True, "tcp_nodelay": True})
    assert mc.set("smoke:str", "v") and mc.get("smoke:str") == "v"
    big = "x" * 200_000
    assert mc.set("smoke:big", big, min_compress_len=1) and mc.get("smoke:big") == big
    batch = {f"smoke:{i}": i for i in range(100)}
    assert mc.set_multi(batch) == []
    assert mc.get_multi(list(batch)) == batch
    assert mc.get_multi(["1", "2", "nope"], key_prefix="smoke:") == {"1": 1, "2": 2}
    assert mc.delete_multi(list(batch)) and mc.get_multi(list(batch)) == {}
    # fastmc's own methods: the class's second method table (PyO3's multiple-pymethods).
    assert mc.touch_multi(["smoke:str"], 60) == [] and mc.hot_keys() == {server: []}

    # The binary protocol, and TLS (rustls with ring's C and assembly, linked into the wheel).
    binary = fastmc.Client([server], binary=True)
    assert binary.set("smoke:bin", b"\x00\xff") and binary.get("smoke:bin") == b"\x00\xff"
    tls = fastmc.Client([tls_server], tls_ca_file=ca_file)
    value = b"t" * 100_000
    assert tls.set("smoke:tls", value) and tls.get("smoke:tls") == value
    assert tls.get_multi(["smoke:tls", "smoke:none"]) == {"smoke:tls": value}

    # Code written for pylibmc gets fastmc (docs/migration.md): `pylibmc` is a module of its
    # own that reads fastmc's names through, with the pylibmc API version; the other names are
    # fastmc's modules.
    fastmc.install_as_pylibmc()
    import _pylibmc
    import pylibmc
    import pylibmc.client
    import pylibmc.pools

    assert pylibmc is not fastmc and pylibmc.__name__ == "pylibmc", pylibmc
    assert pylibmc.__version__ == "1.6.3", pylibmc.__version__
    assert pylibmc.Client is fastmc.Client and pylibmc.Error is fastmc.Error
    assert _pylibmc is fastmc._fastmc and pylibmc.pools is fastmc.pools
    assert pylibmc.client.Client is fastmc.Client
    with pylibmc.pools.ClientPool(pylibmc.Client([server]), 2).reserve() as pooled:
        assert pooled.get("smoke:str") == "v"

    # The console script the wheel declares.
    cli = Path(sys.executable).parent / "fastmc"
    script = cli.read_text()
    assert sys.executable in script and "fastmc.__main__" in script, script[:300]
    if "emulated" in flags:
        print(f"ok {sys.version.split()[0]} (emulated): {fastmc.build_info()}")
        return
    out = subprocess.run(
        [str(cli), "--servers", server, "get", "--decode", "smoke:str"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "v", (out.returncode, out.stderr)
    print(f"ok {sys.version.split()[0]}: {fastmc.build_info()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
