"""The smoke test on the oldest and the newest CPython that this machine runs as it is
(pyenv's 3.9 and 3.13), run by `make test` (`make ends`): an import, a round trip or
`install_as_pylibmc()` that breaks on either fails the tests, not a release.

    python release/ends.py [3.9 3.13]

For each version: a debug wheel of the tree for that CPython (maturin, this machine's own
platform tag, no zig), a fresh virtualenv that installs it as a user's pip would (no index, no
compiler on the PATH), and release/smoke.py against a plain and a TLS memcached, as `make
wheels` runs it on the release wheels. CPython 3.14 and 3.15 are Debian's, in a root of their
own (`make test-sid`, slow). Exit status 0 when every version passed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wheels import ROOT, Servers, find_python, fresh_venv, pip_install, say, smoke

ENDS = ("3.9", "3.13")


def build(python: Path, out: Path) -> str:
    """A debug wheel of the tree for `python` in `out`; returns fastmc's version."""
    cmd = ["maturin", "build", "-q", "--locked", "-i", str(python), "-o", str(out)]
    cmd += ["--compatibility", "linux"]
    built = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"maturin failed:\n{built.stdout}{built.stderr}")
    (wheel,) = out.glob("fastmc-*.whl")
    m = re.match(r"fastmc-([^-]+)-", wheel.name)
    assert m, wheel.name
    return m.group(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("versions", nargs="*", default=list(ENDS))
    args = ap.parse_args()
    problems = []
    with tempfile.TemporaryDirectory(prefix="fastmc-ends-") as tmpdir:
        tmp = Path(tmpdir)
        servers = Servers(tmp)
        try:
            for minor in args.versions:
                python = find_python(minor)
                if python is None:
                    problems.append(f"CPython {minor} not found (pyenv install it)")
                    continue
                t0 = time.monotonic()
                out = tmp / f"wheel{minor}"
                try:
                    version = build(python, out)
                    venv_python, env = fresh_venv(python, tmp / f"venv{minor}")
                    chosen = pip_install(venv_python, env, out, version, tmp)
                    line = smoke(venv_python, env, version, servers, tmp)
                except (RuntimeError, subprocess.CalledProcessError) as e:
                    problems.append(f"Python {minor}: {e}")
                    continue
                say(f"Python {minor}: {chosen}; {line} ({time.monotonic() - t0:.0f} s)")
        finally:
            servers.stop()
    for p in problems:
        say(f"FAILED: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
