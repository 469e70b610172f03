"""Build and check fastmc's release files: what `make wheels` runs (docs/packaging.md).

    python release/wheels.py [build] [check] [sdist] [--out dist] [--targets T ...]

With no step named, all three run, in that order:

- build: for every Rust target, the wheels for CPython 3.9 to 3.15 and the free-threaded 3.14t
  and 3.15t (and, for x86_64 glibc, Debian's PyPy 8 unless --no-pypy) with maturin and zig (no
  container): `manylinux2014` (glibc 2.17) for the -gnu targets, `musllinux_1_2` for the -musl
  ones, `macosx_10_12_x86_64` and `macosx_11_0_arm64` for the -apple-darwin ones (cross-built:
  no Apple SDK, zig's own macOS stubs). One wheel per CPython version, not abi3 (the measurement
  behind that choice is in docs/packaging.md).
- check: every wheel in --out. Contents and metadata (release/wheelcheck.py); the platform tag
  with `auditwheel show`; for musl wheels, which cannot run on a glibc host, the ELF itself (only
  musl's libc needed, every symbol it imports defined by musl 1.2, and, for this machine's
  architecture when Debian's `musl` is installed, musl's own loader resolving it); for macOS
  wheels, the Mach-O (release/macho.py: architecture, minimum macOS, only libSystem linked,
  Python's symbols by dynamic lookup). They cannot run here. Then, for
  each of CPython 3.9 to 3.15, a fresh virtualenv installs fastmc from --out the way a user's
  pip would (`--only-binary :all: --no-index`, so no sdist and no compiler) and runs
  release/smoke.py against a real memcached and a TLS one (3.14 and 3.15, where this machine
  lacks them, are Debian's, run in release/sid.py's root); every wheel this machine can run must
  be the one pip picked for at least one version. On x86_64 Debian, Debian's arm64 CPython under
  qemu-user does the same with the aarch64 wheels (release/emulated.py; best effort).
- sdist: `maturin sdist`, its contents checked, then installed from source (pip builds it with
  maturin from PyPI and cargo) into a fresh CPython 3.9 virtualenv and smoke-tested.

Exit status 0 when every step passed, 1 otherwise (each problem is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "support"))
import emulated  # noqa: E402
import sid  # noqa: E402
import wheelcheck  # noqa: E402
from memcached import Memcached  # noqa: E402
from platformcheck import MACOS_MIN, TARGETS, platform_problems, wheel_target  # noqa: E402

PYTHONS = wheelcheck.PYTHONS
FREE_THREADED = wheelcheck.FREE_THREADED
PYPY = wheelcheck.PYPY


def say(msg: str) -> None:
    print(f"[wheels] {msg}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


# ------------------------------------------------------------------------------ interpreters


def find_python(minor: str) -> Path | None:
    """CPython `minor` (e.g. "3.9"): pyenv's newest patch release, else python3.X on the PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(
        root.glob(f"{minor}.*/bin/python{minor}"),
        key=lambda p: [int(x) for x in re.findall(r"\d+", p.parents[1].name)],
    )
    which = shutil.which(f"python{minor}")
    for cand in [*reversed(found), *([Path(which)] if which else [])]:
        probe = subprocess.run(
            [str(cand), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == minor:
            return cand
    return None


def pythons(pypy: bool = True) -> dict[str, Path]:
    """Each CPython of PYTHONS, and PyPy; those this machine lacks but Debian's unstable suite
    has (3.14, 3.15, PyPy) come from release/sid.py's root, run through scripts that chroot into
    it."""
    found: dict[str, Path | None] = {m: find_python(m) for m in PYTHONS}
    if pypy:
        found[PYPY] = None
    lacking = [m for m, p in found.items() if p is None and (m in sid.PYTHONS or m == PYPY)]
    if lacking:
        bins = sid.Sid().wrappers(sid.WORK / "bin")
        found.update({m: bins / sid.executable(m) for m in lacking})
    missing = [m for m, p in found.items() if p is None]
    if missing:
        sys.exit(
            f"CPython {', '.join(missing)} not found (pyenv install them, or put python3.X on the PATH)"
        )
    return {m: p for m, p in found.items() if p is not None}


# ------------------------------------------------------------------------------------- build


def build_command(target: str, out: Path, pypy: bool = True) -> list[str]:
    """The maturin command for one target: a wheel for each CPython, each free-threaded one
    (maturin knows their configuration: no interpreter needed) and, for PYPY_TARGET, PyPy
    (.github/workflows/release.yml runs the same, less PyPy)."""
    compatibility, _ = TARGETS[target]
    cmd = ["maturin", "build", "--release", "--locked", "--strip", "--zig"]
    cmd += ["--target", target, "--out", str(out)]
    cmd += ["--compatibility", compatibility] if compatibility else []
    names = [f"python{m}" for m in PYTHONS] + [f"python{m}t" for m in FREE_THREADED]
    names += [PYPY] if pypy and target == wheelcheck.PYPY_TARGET else []
    return cmd + [arg for name in names for arg in ("-i", name)]


def build_env(target: str) -> dict[str, str]:
    """What the build of one target adds to the environment (the release workflow sets the same).
    macOS: the oldest macOS to build for (it becomes the tag and the minimum in the load
    commands; maturin knows CPython's macOS configuration for every version, no interpreter
    needed), and `-dead_strip_dylibs`: Rust's libc crate asks for libiconv, which nothing uses,
    and only libSystem may be linked."""
    if target not in MACOS_MIN:
        return {}
    flags = f"CARGO_TARGET_{target.upper().replace('-', '_')}_RUSTFLAGS"
    return {
        "MACOSX_DEPLOYMENT_TARGET": MACOS_MIN[target],
        flags: "-C link-arg=-Wl,-dead_strip_dylibs",
    }


def ensure_rust_targets(targets: list[str]) -> None:
    installed = subprocess.run(
        ["rustup", "target", "list", "--installed"], capture_output=True, text=True, check=True
    ).stdout.split()
    for t in targets:
        if t not in installed:
            say(f"rustup target add {t}")
            r = subprocess.run(["rustup", "target", "add", t], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(
                    f"cannot install the Rust target {t} ({r.stderr.strip()}); leave it out with "
                    f"WHEEL_TARGETS (make wheels) or --targets"
                )


def build(out: Path, targets: list[str], interpreters: dict[str, Path]) -> None:
    ensure_rust_targets(targets)
    with tempfile.TemporaryDirectory(prefix="fastmc-pythons-") as links:
        # maturin finds `-i python3.X` on the PATH: a directory of links to the interpreters
        # found goes first (python3 itself stays the venv's, which has zig).
        for minor, python in interpreters.items():
            (Path(links) / sid.executable(minor)).symlink_to(python)
        env = dict(os.environ, PATH=os.pathsep.join([links, os.environ["PATH"]]))
        for target in targets:
            cmd = build_command(target, out, PYPY in interpreters)
            t0 = time.monotonic()
            extra = build_env(target)
            say(" ".join([*(f"{k}={v!r}" for k, v in extra.items()), *cmd]))
            run(cmd, cwd=ROOT, env={**env, **extra})
            say(f"built in {time.monotonic() - t0:.0f} s")


# ------------------------------------------------------------------------------------- check


def expected_wheels(targets: list[str], version: str, pypy: bool = True) -> set[str]:
    tags = [f"cp3{m[2:]}-cp3{m[2:]}" for m in PYTHONS]
    tags += [f"cp3{m[2:]}-cp3{m[2:]}t" for m in FREE_THREADED]
    names = set()
    for t in targets:
        _, tag = TARGETS[t]
        if tag.startswith("manylinux_2_17_"):  # maturin names both spellings of the tag
            tag = f"manylinux2014_{tag[len('manylinux_2_17_') :]}.{tag}"
        more = [wheelcheck.PYPY_TAGS] if pypy and t == wheelcheck.PYPY_TARGET else []
        names |= {f"fastmc-{version}-{py}-{tag}.whl" for py in [*tags, *more]}
    return names


def free_threaded(name: str) -> bool:
    """A cp314t/cp315t wheel: no interpreter here runs it (docs/packaging.md)."""
    return name.split("-")[3].endswith("t")


def host_runs(target: str) -> bool:
    """Whether this machine runs `target`'s wheels (on a Mac: the release workflow's test-macos)."""
    machine = {"arm64": "aarch64"}.get(platform.machine(), platform.machine())
    if sys.platform == "darwin":
        return target == f"{machine}-apple-darwin"
    return target == f"{machine}-unknown-linux-gnu" and sys.platform == "linux"


def in_sid(python: Path) -> bool:
    return python.parent == sid.WORK / "bin"


def runner(minor: str, python: Path, *binds: Path) -> tuple[list[str], Path]:
    """How to run `python`: as it is, or, for one of the sid root's, the root's interpreter
    through the prefix that enters the root with `binds` at their own paths."""
    if not in_sid(python):
        return [], python
    return sid.Sid().prefix(*binds), Path(f"/usr/bin/{sid.executable(minor)}")


def fresh_venv(python: Path, where: Path, *pre: str) -> tuple[Path, dict]:
    """A new virtualenv, and the environment to run it with: its bin alone on the PATH."""
    run([*pre, str(python), "-m", "venv", str(where)], capture_output=True)
    env = {
        "PATH": str(where / "bin"),
        "HOME": str(where),
        "LANG": "C.UTF-8",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
    }
    return where / "bin" / "python", env


class Servers:
    """A plain memcached and a TLS one (a CA and a server certificate made with openssl)."""

    def __init__(self, tmp: Path) -> None:
        pki = tmp / "pki"
        pki.mkdir()
        key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        ssl = shutil.which("openssl") or "openssl"
        (pki / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for cmd in (
            f"req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj /CN=ca"
            " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign",
            f"req {key} -keyout server.key -out server.csr -subj /CN=localhost",
            "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem"
            " -days 2 -extfile server.ext",
        ):
            run([ssl, *cmd.split()], cwd=pki, capture_output=True)
        self.ca = pki / "ca.pem"
        self.plain = Memcached()
        opts = f"ssl_chain_cert={pki / 'server.pem'},ssl_key={pki / 'server.key'}"
        self.tls = Memcached("-Z", "-o", opts)

    def stop(self) -> None:
        self.plain.stop()
        self.tls.stop()


def smoke(
    python: Path, env: dict, version: str, servers: Servers, cwd: Path, *pre: str, emulated=False
) -> str:
    """release/smoke.py with `python` (run through `pre`: qemu-user when it is foreign, or the
    sid root's prefix)."""
    args = [version, servers.plain.address, servers.tls.address, str(servers.ca)]
    out = subprocess.run(
        [
            *pre,
            str(python),
            "-I",
            str(HERE / "smoke.py"),
            *args,
            *(["emulated"] if emulated else []),
        ],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"smoke test failed:\n{out.stdout}{out.stderr}")
    return out.stdout.strip()


def pip_install(venv_python: Path, env: dict, out: Path, version: str, tmp: Path, *pre: str) -> str:
    """Install fastmc into the venv the way a user's pip would, from the wheels in `out` only
    (no index, binary only: never the sdist); returns the file pip picked."""
    report = tmp / "pip-report.json"
    cmd = [str(venv_python), "-m", "pip", "install", "-q", "--no-index", "--only-binary", ":all:"]
    cmd += ["--find-links", str(out.resolve()), "--report", str(report), f"fastmc=={version}"]
    r = subprocess.run([*pre, *cmd], env=env, cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip found no wheel to install: {r.stderr.strip()}")
    (item,) = json.loads(report.read_text())["install"]
    return str(item["download_info"]["url"]).rsplit("/", 1)[1]


def install_and_smoke(
    out: Path, interpreters: dict[str, Path], version: str, emulate: bool
) -> tuple[dict[str, list[str]], list[str]]:
    """For each CPython, a fresh venv installs fastmc from `out` and runs the smoke test (and,
    with `emulate`, Debian's arm64 CPython under qemu-user); returns what was verified per wheel
    and the problems."""
    verified: dict[str, list[str]] = {}
    problems = []
    with tempfile.TemporaryDirectory(prefix="fastmc-wheels-") as tmpdir:
        tmp = Path(tmpdir)
        servers = Servers(tmp)
        try:
            for minor, host_python in interpreters.items():
                pre, python = runner(minor, host_python, tmp, out, HERE)
                venv_python, env = fresh_venv(python, tmp / f"venv{minor}", *pre)
                try:
                    chosen = pip_install(venv_python, env, out, version, tmp, *pre)
                    line = smoke(venv_python, env, version, servers, tmp, *pre)
                except RuntimeError as e:
                    problems.append(f"Python {minor}: {e}")
                    continue
                verified.setdefault(chosen, []).append(f"smoke test on {minor}")
                say(f"Python {minor}: pip picked {chosen}; {line}")
            if emulate:
                emulated_smoke(out, version, servers, tmp, verified, problems)
        finally:
            servers.stop()
    return verified, problems


def emulated_smoke(
    out: Path,
    version: str,
    servers: Servers,
    tmp: Path,
    verified: dict[str, list[str]],
    problems: list[str],
) -> None:
    """The aarch64 wheel for Debian's CPython, installed by pip and smoke-tested under qemu-user
    (release/emulated.py); where that cannot be set up, says why and moves on."""
    try:
        emu = emulated.Aarch64()
    except emulated.Unavailable as e:
        say(f"aarch64 wheels not run: {e}")
        return
    venv = tmp / "venv-aarch64"
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp), "LANG": "C.UTF-8"}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    try:
        chosen = emu.install(venv, env, out, version)
        line = smoke(venv / "bin" / "python", env, version, servers, tmp, *emu.cmd(), emulated=True)
    except RuntimeError as e:
        problems.append(f"Python {emu.version} (aarch64, emulated): {e}")
        return
    verified.setdefault(chosen, []).append(f"smoke test on {emu.version} under qemu-user")
    say(f"Python {emu.version} on aarch64 (qemu-user): pip picked {chosen}; {line}")


def check(out: Path, targets: list[str], interpreters: dict[str, Path]) -> list[str]:
    version = wheelcheck.cargo_version()
    problems: list[str] = []
    wheels = sorted(out.glob("fastmc-*.whl"))
    names = {w.name for w in wheels}
    want = expected_wheels(targets, version, PYPY in interpreters)
    problems += [f"{name}: not built" for name in sorted(want - names)]
    problems += [f"{name}: not expected (a leftover?)" for name in sorted(names - want)]
    verified: dict[str, list[str]] = {}
    for wheel in wheels:
        target = wheel_target(wheel.name)
        if target is None:
            continue
        found = [f"{wheel.name}: {p}" for p in wheelcheck.wheel_problems(wheel, version)]
        plat, how = platform_problems(wheel, target)
        found += [f"{wheel.name}: {p}" for p in plat]
        problems += found
        if free_threaded(wheel.name) and not found:
            how += "; the free-threaded ABI's imports (not run: no such interpreter here)"
        verified[wheel.name] = [how] if not found else ["FAILED"]
        say(f"{wheel.name}: {'; '.join(found) or how}")
    emulate = any(t.startswith("aarch64-") and t.endswith("-gnu") for t in targets)
    # Only where some wheel can run (not for the macOS targets alone on Linux).
    ran, failed = {}, []
    if emulate or any(host_runs(t) for t in targets):
        ran, failed = install_and_smoke(out, interpreters, version, emulate)
    problems += failed
    for name, notes in ran.items():
        verified.setdefault(name, []).extend(notes)
    runnable = {
        w.name
        for w in wheels
        if (t := wheel_target(w.name)) and host_runs(t) and not free_threaded(w.name)
    }
    for name in sorted(runnable - set(ran)):
        problems.append(f"{name}: no Python version picked it, so it was never run")
    say("summary:")
    for name in sorted(verified):
        say(f"  {name}: {'; '.join(verified[name])}")
    return problems


# ------------------------------------------------------------------------------------- sdist


def sdist(out: Path, interpreters: dict[str, Path]) -> list[str]:
    version = wheelcheck.cargo_version()
    run(["maturin", "sdist", "--out", str(out)], cwd=ROOT, capture_output=True)
    path = out / f"fastmc-{version}.tar.gz"
    problems = [f"{path.name}: {p}" for p in wheelcheck.sdist_problems(path, version)]
    say(f"{path.name}: contents {'; '.join(problems) or 'as expected'}")
    minor = PYTHONS[0]
    with tempfile.TemporaryDirectory(prefix="fastmc-sdist-") as tmpdir:
        tmp = Path(tmpdir)
        venv_python, env = fresh_venv(interpreters[minor], tmp / "venv")
        build_env = dict(os.environ, PATH=os.pathsep.join([env["PATH"], os.environ["PATH"]]))
        t0 = time.monotonic()
        # from source: pip builds the wheel with maturin (from PyPI, build isolation) and cargo
        r = subprocess.run(
            [str(venv_python), "-m", "pip", "install", "-q", "--no-cache-dir", str(path.resolve())],
            env=build_env,
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            return [*problems, f"{path.name}: pip install failed: {r.stderr.strip()[-2000:]}"]
        say(
            f"{path.name}: built and installed from source on Python {minor} in {time.monotonic() - t0:.0f} s"
        )
        servers = Servers(tmp)
        try:
            say(f"{path.name}: {smoke(venv_python, env, version, servers, tmp)}")
        except RuntimeError as e:
            problems.append(f"{path.name}: {e}")
        finally:
            servers.stop()
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("steps", nargs="*", help="build, check, sdist (default: all three)")
    ap.add_argument("--out", type=Path, default=ROOT / "dist")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument(
        "--no-pypy",
        action="store_true",
        help="no PyPy wheel (the release workflow: its runners have no PyPy 8)",
    )
    args = ap.parse_args()
    steps = args.steps or ["build", "check", "sdist"]
    if set(steps) - {"build", "check", "sdist"}:
        ap.error(f"unknown step in {steps}")
    interpreters = pythons(pypy=not args.no_pypy)
    args.out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    t0 = time.monotonic()
    if "build" in steps:
        for old in [*args.out.glob("fastmc-*.whl"), *args.out.glob("fastmc-*.tar.gz")]:
            old.unlink()
        build(args.out, args.targets, interpreters)
        say(f"build: {time.monotonic() - t0:.0f} s")
    if "check" in steps:
        t1 = time.monotonic()
        problems += check(args.out, args.targets, interpreters)
        say(f"check: {time.monotonic() - t1:.0f} s")
    if "sdist" in steps:
        t1 = time.monotonic()
        problems += sdist(args.out, interpreters)
        say(f"sdist: {time.monotonic() - t1:.0f} s")
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)
    say(f"{'FAILED' if problems else 'all passed'} in {time.monotonic() - t0:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
