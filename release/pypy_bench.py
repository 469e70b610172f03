"""The benchmark on PyPy (`make bench-pypy`): fastmc against the peers that run on PyPy, in the
same run, on Debian unstable's PyPy 8 in release/sid.py's root. pylibmc does not run on PyPy
(lericson/pylibmc#298), so the columns are fastmc, pymemcache, python-memcached and libmc where
it installs; the ratios are against pymemcache.

    python release/pypy_bench.py [--out DIR] [-- bench.py arguments]

A release wheel of the working tree for PyPy (maturin and zig here, as `make wheels` builds it)
is installed by pip into a venv in the root with the peers' pinned versions from
requirements-dev.txt, and benches/bench.py runs there (default: `--quick --scenarios
single,multi`) against the root's memcached. Needs root, as release/sid.py does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import sid

PEERS = ("pymemcache", "python-memcached", "libmc")
VENV = Path(f"/opt/fastmc-{sid.PYPY}-bench")


def pins() -> dict[str, str]:
    """The peers' lines of requirements-dev.txt (one place for the pins)."""
    found = {}
    for line in (sid.REPO / "requirements-dev.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        name = spec.split("=")[0].split("<")[0].split(">")[0].strip().lower()
        if name in PEERS:
            found[name] = spec
    return found


def release_wheel(root: sid.Sid, out: Path) -> Path:
    for old in out.glob("fastmc-*"):
        old.unlink()
    bins = root.wrappers(sid.WORK / "bin")
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    env = dict(os.environ, PATH=os.pathsep.join([str(bins), os.environ["PATH"]]))
    env.setdefault("CARGO_TARGET_DIR", str(sid.WORK / "cargo"))
    cmd = [maturin, "build", "--release", "--locked", "--strip", "--zig"]
    cmd += ["--target", "x86_64-unknown-linux-gnu", "--compatibility", "manylinux2014"]
    cmd += ["--out", str(out), "-i", sid.PYPY]
    sid.say(" ".join(cmd))
    subprocess.run(cmd, cwd=sid.REPO, env=env, check=True)
    (wheel,) = out.glob("fastmc-*-pp311-*.whl")
    return wheel


def bench_venv(root: sid.Sid, out: Path) -> list[str]:
    """The venv with fastmc's wheel and the peers that install; returns those peers."""
    installed = []
    pip = [f"{VENV}/bin/python", "-m", "pip", "install", "-q"]
    root.run([sid.PYPY, "-m", "venv", "--clear", str(VENV)], check=True)
    root.run([*pip, "--upgrade", "pip"], check=True, capture_output=True)
    for name, spec in pins().items():
        r = root.run([*pip, spec], capture_output=True, text=True)
        if r.returncode == 0:
            installed.append(name)
        else:
            why = (r.stderr.strip().splitlines() or ["?"])[-1]
            sid.say(f"PyPy: {spec} does not install, so no {name} column: {why}")
    fastmc = [*pip, "--no-index", "--only-binary", ":all:", "--find-links", str(out), "fastmc"]
    root.run(fastmc, binds=(out,), check=True)
    return installed


def main() -> int:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    ours, bench_args = argv[:cut], argv[cut + 1 :]
    results = Path(ours[ours.index("--out") + 1] if "--out" in ours else "results-pypy")
    results = (sid.REPO / results).resolve() if not results.is_absolute() else results
    results.mkdir(parents=True, exist_ok=True)
    bench_args = bench_args or ["--quick", "--scenarios", "single,multi"]
    root = sid.Sid()
    out = sid.WORK / "bench-dist"
    out.mkdir(parents=True, exist_ok=True)
    wheel = release_wheel(root, out)
    installed = bench_venv(root, out)
    sid.say(f"PyPy: {root.version(sid.PYPY, '--version')}; {wheel.name}")
    env = {"PATH": f"{VENV}/bin:{sid.SYSTEM_PATH}"}
    # the folder as the checkout names it (the report records the command)
    out_arg = results.relative_to(sid.REPO) if results.is_relative_to(sid.REPO) else results
    cmd = [f"{VENV}/bin/python", "benches/bench.py", *bench_args, "--out", str(out_arg)]
    cmd += ["--peers", ",".join(installed)]
    sh = ["/bin/sh", "-c", f'cd {sid.REPO} && exec "$@"', "sh", *cmd]
    return root.run(sh, binds=(sid.REPO, results), env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
