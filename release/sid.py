"""CPython 3.14 and 3.15, PyPy 8 and the newest memcached, from Debian's unstable suite (sid),
on a machine that has none of them: a `debootstrap --variant=minbase sid` root in
target/sid/root, with Debian's python3.14/3.15 and pypy3 (+ venv, dev), memcached, nutcracker, SASL, openssl and what pylibmc
needs to build from source. Only Debian's registry is used; the root is made once (about a
minute) and reused while PACKAGES is unchanged. Needs root (debootstrap, chroot, mount) and
Debian's `debootstrap` (installed with apt-get when missing).

    python release/sid.py setup                   # make (or update) the root
    python release/sid.py test 3.14 3.15 pypy3 [-- pytest args]

`test` is `make test-py314` / `make test-py315` / `make test-sid` / `make test-pypy` (less
PYPY_GAPS): a debug wheel of the working
tree for each interpreter (maturin and zig on this machine, manylinux2014 as `make wheels`
builds), installed into a venv in the root with only the venv's bin on the PATH (no compiler,
no index: pip must take the wheel), then the whole pytest suite run there, against the root's
memcached. release/wheels.py uses the root to run its checks on the cp314/cp315 wheels.

Every command runs in its own mount namespace (`unshare --mount`): /proc, /dev and the host
paths it needs are mounted at the same paths inside the root, and vanish when it exits; the
network is the host's, so servers on loopback are reachable from both sides.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = (REPO / "target" / "sid").resolve()
SYSROOT = WORK / "root"
MIRROR = os.environ.get("SID_MIRROR", "http://deb.debian.org/debian")
PYTHONS = ("3.14", "3.15")
# PyPy 8 (Python 3.11), Debian's `pypy3`: `test pypy3` runs the suite on it
PYPY = "pypy3"
PACKAGES = [
    *(f"python{v}{s}" for v in PYTHONS for s in ("", "-venv", "-dev")),
    *(f"{PYPY}{s}" for s in ("", "-venv", "-dev")),
    *(
        "memcached",
        "nutcracker",
        "sasl2-bin",
        "libsasl2-modules",
        "openssl",
        "ca-certificates",
        "dnsmasq-base",
    ),
    # pylibmc, the differential tests' oracle, has no wheel: pip builds it from source
    *("gcc", "libc6-dev", "libmemcached-dev", "zlib1g-dev", "patchelf"),
]
# sid's Release file may be past its Valid-Until date on a machine whose mirror lags
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
APT = ["apt-get", "-q", "-o", "Acquire::Check-Valid-Until=false"]
# requirements-dev.txt less what only the benchmarks and the linters use (emcache has no 3.15
# wheel nor sdist, matplotlib would build numpy from source): the suite imports none of them
NOT_FOR_TESTS = {"emcache", "memcachio", "meta-memcache", "matplotlib", "libmc", "ruff", "mypy"}


def say(msg: str) -> None:
    print(f"[sid] {msg}", flush=True)


class Sid:
    """The sid root, made ready on construction."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            sys.exit("release/sid.py needs root (debootstrap, chroot, mount)")
        self.root = SYSROOT
        stamp = self.root / ".fastmc-packages"
        want = "\n".join(PACKAGES)
        if stamp.exists() and stamp.read_text() == want:
            return
        if not (self.root / "etc" / "debian_version").exists():
            self._bootstrap()
        say(f"apt-get install {' '.join(PACKAGES)}")
        self.run([*APT, "update"], check=True, capture_output=True)
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        cmd = [*APT, "install", "-y", "--no-install-recommends", *PACKAGES]
        self.run(cmd, env=env, check=True, capture_output=True)
        # the local certificate authorities copied in at bootstrap join the bundle pip reads
        self.run(["update-ca-certificates"], check=True, capture_output=True)
        stamp.write_text(want)

    def _bootstrap(self) -> None:
        if not shutil.which("debootstrap"):
            subprocess.run(["apt-get", "-qq", "update"], check=True)
            subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True)
        tmp = WORK / "root.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.monotonic()
        say(f"debootstrap --variant=minbase sid {tmp} {MIRROR}")
        subprocess.run(
            ["debootstrap", "--variant=minbase", "sid", str(tmp), MIRROR],
            check=True,
            capture_output=True,
        )
        # no service starts inside (memcached's postinst would try)
        policy = tmp / "usr" / "sbin" / "policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        # the CAs this machine trusts locally (a proxy's, say) for pip inside
        local = Path("/usr/local/share/ca-certificates")
        inside = tmp / str(local).lstrip("/")
        inside.mkdir(parents=True, exist_ok=True)
        for crt in local.glob("*.crt") if local.is_dir() else []:
            shutil.copy(crt, inside / crt.name)
        tmp.rename(self.root)
        say(f"debootstrap: {time.monotonic() - t0:.0f} s")

    def prefix(self, *binds: Path | str) -> list[str]:
        """The command prefix that runs a program in the root, in a private mount namespace
        with /proc, /dev and each of `binds` (host paths) mounted at the same path inside."""
        # the tools by their paths: the PATH given is the one for the command inside
        tool = {t: shutil.which(t, path=SYSTEM_PATH) or t for t in ("mount", "mkdir", "chroot")}
        mount, mkdir = tool["mount"], tool["mkdir"]
        script = ['r="$1"', "shift", f'{mount} -t proc proc "$r/proc"']
        script += [f'{mount} --rbind /dev "$r/dev"']
        script += [
            f'while [ "$1" != -- ]; do {mkdir} -p "$r$1" && {mount} --bind "$1" "$r$1"; shift; done'
        ]
        script += ["shift", f'exec {tool["chroot"]} "$r" "$@"']
        unshare = shutil.which("unshare", path=SYSTEM_PATH) or "unshare"
        cmd = [unshare, "--mount", "--propagation", "private", "/bin/sh", "-c", "; ".join(script)]
        return [*cmd, "sid", str(self.root), *(str(Path(b).resolve()) for b in binds), "--"]

    def run(
        self, cmd: list[str], binds: tuple = (), env: dict | None = None, **kw
    ) -> subprocess.CompletedProcess:
        """`cmd` in the root with a clean environment (PATH of the root's system, plus `env`)."""
        base = {"PATH": SYSTEM_PATH, "HOME": "/root"}
        base.update(LANG="C.UTF-8", **(env or {}))
        return subprocess.run([*self.prefix(*binds), *cmd], env=base, **kw)

    def wrappers(self, where: Path) -> Path:
        """A directory of `python3.X` scripts that run the root's interpreters, for maturin's
        `-i`. Inside the root the same path names the interpreter (a link), so the
        sys.executable they report, which maturin hands to PyO3's build script, runs there too.
        No mounts: asking an interpreter for its configuration needs none."""
        where.mkdir(parents=True, exist_ok=True)
        inside = self.root / str(where.resolve()).lstrip("/")
        inside.mkdir(parents=True, exist_ok=True)
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"
        for name in (*(executable(v) for v in PYTHONS), PYPY):
            link = inside / name
            link.unlink(missing_ok=True)
            link.symlink_to(f"/usr/bin/{name}")
            script = where / name
            script.write_text(
                f'#!/bin/sh\nexec {chroot} {self.root} {where.resolve()}/{name} "$@"\n'
            )
            script.chmod(0o755)
        return where

    def version(self, *cmd: str) -> str:
        out = self.run(list(cmd), capture_output=True, text=True, check=True)
        return (out.stdout or out.stderr).strip().splitlines()[0]


def executable(v: str) -> str:
    """The interpreter's name for a version of `test`: python3.14, or pypy3 itself."""
    return v if v == PYPY else f"python{v}"


def label(v: str) -> str:
    return "PyPy" if v == PYPY else f"CPython {v}"


# ------------------------------------------------------------------------------- the suite


# What an interpreter cannot install at all, and why; the tests that need it skip, saying so.
CANNOT_INSTALL = {
    # tests/platform/test_tracing_ddtrace.py
    "3.15": {
        "ddtrace": "ddtrace 4.16.0 requires Python < 3.15, and no release supports 3.15",
        # tests/api/test_serializers.py: serializer="json" uses the standard library's json
        "orjson": "orjson 3.13.0 has no CPython 3.15 wheel",
    },
    PYPY: {
        "ddtrace": "ddtrace 4.16.0 does not build on PyPy (CPython's internals)",
        "orjson": "orjson 3.13.0 does not support PyPy",
        # tests/aio: the asyncio client runs on asyncio's own loop there
        "uvloop": "uvloop 0.23.0 does not build on PyPy",
    },
}


# The tests PyPy's run leaves out (`--deselect`), each with why: what differs is the oracle
# (pylibmc built for PyPy runs through cpyext, which converts and decodes differently from
# CPython, so it is no longer the pylibmc users compare with) or PyPy itself, never what fastmc
# answers. docs/packaging.md lists them.
_ORACLE = "pylibmc under PyPy's cpyext is not the oracle (its int and text conversions differ)"
_MEMORY = (
    "PyPy copies a value's bytes when they cross into or out of an extension (cpyext), so the "
    "memory bounds measured on CPython do not hold: about 3x a large value, not 2.2x"
)
PYPY_GAPS = {
    "tests/api/test_argument_checks.py::test_argument_checks_match_pylibmc": (
        "PyPy words OverflowError's message its own way ('int too big to convert')"
    ),
    **{
        f"tests/api/{test}[{case}]": _ORACLE
        for test in (
            "test_binary.py::test_same_outcome_as_pylibmc_binary",
            "test_pylibmc_diff.py::test_same_outcome_as_pylibmc",
        )
        for case in ("get_multi_dict", "int_values_that_are_not_ints")
    },
    **{
        f"tests/api/test_fake_diff.py::test_differential_cases_on_the_fake[{case}-{b}]": _ORACLE
        for case in ("get_multi_dict", "int_values_that_are_not_ints")
        for b in ("False", "True")
    },
    "tests/api/test_random_diff.py::test_random_operations_match_pylibmc": _ORACLE,
    "tests/api/test_value_policy.py::test_without_keys_the_signed_bit_is_ignored_as_pylibmc_does": (
        "PyPy's pickle words the error its own way ('unkown mark'), and formatting it raises "
        "SystemError inside PyPy"
    ),
    "tests/api/test_value_policy.py::test_what_real_pylibmc_does_with_signed_values": (
        "the same message of PyPy's pickle, through pylibmc"
    ),
    "tests/api/test_value_policy.py::test_a_compression_bomb_is_refused_with_little_memory": (
        _MEMORY
    ),
    **{
        "tests/faults/test_hostile_servers.py::"
        f"test_a_large_value_costs_at_most_about_twice_its_size[{case}]": _MEMORY
        for case in ("0-bytes-get_multi_large", "16-str-get_large", "16-str-get_multi_large")
    },
    "tests/faults/test_allocation_failures.py::"
    "test_out_of_memory_while_reading_raises_allocation_error": (
        "out of memory, PyPy's cpyext raises SystemError as it makes the object's reference"
    ),
    "tests/aio/test_aio_future.py::test_the_collector_sees_what_it_holds": (
        "PyPy's collector does not ask an extension's objects what they hold (gc.get_referents)"
    ),
}


def suite_requirements(v: str) -> str:
    """requirements-dev.txt without NOT_FOR_TESTS and what CPython `v` cannot install, as text
    (the pins stay in one file)."""
    keep = []
    for line in (REPO / "requirements-dev.txt").read_text().splitlines():
        name = line.split("#")[0].strip().split("=")[0].split("<")[0].split(">")[0].strip()
        if name.lower() not in NOT_FOR_TESTS | set(CANNOT_INSTALL.get(v, {})):
            keep.append(line)
    return "\n".join(keep) + "\n"


def deps_venv(sid: Sid, v: str) -> Path:
    """The venv in the root with the suite's requirements for CPython `v` (kept while
    requirements-dev.txt's relevant lines are unchanged; pip builds pylibmc with the root's
    gcc). Returns its path inside the root."""
    # what the venv holds: the requirements, and pylibmc linked to its wheel's libmemcached
    reqs = suite_requirements(v) + "# pylibmc: bundle_oracle_library\n"
    venv = Path(f"/opt/fastmc-{'' if v == PYPY else 'py'}{v}")
    stamp = sid.root / str(venv).lstrip("/") / ".requirements"
    if stamp.exists() and stamp.read_text() == reqs:
        return venv
    say(f"{label(v)}: a venv with the suite's requirements (pylibmc from source)")
    shutil.rmtree(stamp.parent, ignore_errors=True)
    (sid.root / "tmp" / f"requirements-{v}.txt").write_text(suite_requirements(v))
    for name, why in CANNOT_INSTALL.get(v, {}).items():
        say(f"{label(v)}: without {name}: {why}")
    pip = [f"{venv}/bin/pip", "install", "-q"]
    for cmd in (
        [executable(v), "-m", "venv", str(venv)],
        [*pip, "--upgrade", "pip"],
        [*pip, "-r", f"/tmp/requirements-{v}.txt"],
    ):
        r = sid.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    bundle_oracle_library(sid, venv, v)
    stamp.write_text(reqs)
    return venv


def bundle_oracle_library(sid: Sid, venv: Path, v: str) -> None:
    """pylibmc has no wheel for 3.14 or 3.15, so pip built it against sid's libmemcached 1.1.4,
    whose defaults and answers differ from those of the libmemcached that pylibmc's own wheels
    bundle (remove_failed, the classes of some errors): the oracle the differential tests compare
    fastmc with, and the one pylibmc users install. So the module built here is linked to that
    library instead, taken from pylibmc's cp311 manylinux wheel (the same soname, .so.11) with
    its companions, by patchelf."""
    pip = [f"{venv}/bin/pip", "download", "-q", "--only-binary", ":all:", "--no-deps"]
    pip += ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
    pip += ["--platform", "manylinux2014_x86_64", "-d", "/tmp/oracle"]
    pin = [x for x in suite_requirements(v).split() if x.lower().startswith("pylibmc==")]
    sid.run([*pip, *pin], check=True, capture_output=True)
    (wheel,) = (sid.root / "tmp" / "oracle").glob("pylibmc-*.whl")
    (site,) = (sid.root / str(venv).lstrip("/") / "lib").glob("*/site-packages")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site, [n for n in zf.namelist() if n.startswith("pylibmc.libs/")])
    shutil.rmtree(wheel.parent)
    inside = Path("/") / site.relative_to(sid.root)
    (module,) = site.glob("_pylibmc.*.so")
    (lib,) = (site / "pylibmc.libs").glob("libmemcached-*.so*")
    cmds = [
        ["patchelf", "--set-rpath", "$ORIGIN", f"{inside}/pylibmc.libs/{f.name}"]
        for f in (site / "pylibmc.libs").iterdir()
    ]
    cmds.append(
        [
            "patchelf",
            "--replace-needed",
            "libmemcached.so.11",
            lib.name,
            "--add-rpath",
            "$ORIGIN/pylibmc.libs",
            f"{inside}/{module.name}",
        ]
    )
    for cmd in cmds:
        sid.run(cmd, check=True)


def build_wheels(sid: Sid, versions: list[str], out: Path) -> None:
    """Debug wheels of the working tree for the root's interpreters (as `make wheels` builds
    the x86_64 glibc ones, less --release), and the sdist, into `out`."""
    for old in out.glob("fastmc-*"):
        old.unlink()
    bins = sid.wrappers(WORK / "bin")
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    env = dict(os.environ, PATH=os.pathsep.join([str(bins), os.environ["PATH"]]))
    env.setdefault("CARGO_TARGET_DIR", str(WORK / "cargo"))
    cmd = [maturin, "build", "--locked", "--zig", "--target", "x86_64-unknown-linux-gnu"]
    cmd += ["--compatibility", "manylinux2014", "--out", str(out)]
    cmd += [a for v in versions for a in ("-i", executable(v))]
    t0 = time.monotonic()
    say(" ".join(cmd))
    subprocess.run(cmd, cwd=REPO, env=env, check=True)
    subprocess.run([maturin, "sdist", "--out", str(out)], cwd=REPO, check=True)
    say(f"built in {time.monotonic() - t0:.0f} s")


def run_suite(sid: Sid, v: str, out: Path, pytest_args: list[str]) -> int:
    venv = deps_venv(sid, v)
    tag = "pp311" if v == PYPY else f"cp{v.replace('.', '')}"
    (wheel,) = out.glob(f"fastmc-*-{tag}-*.whl")
    (sdist,) = out.glob("fastmc-*.tar.gz")
    # the wheel as a user's pip takes it: by its tags, no index, no sdist, no compiler
    bare = {"PATH": f"{venv}/bin"}
    pip = [f"{venv}/bin/python", "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps"]
    pip += ["--no-index", "--only-binary", ":all:", "--find-links", str(out), "fastmc"]
    sid.run(pip, binds=(out,), env=bare, check=True)
    probe = (
        "import sys, fastmc; print(sys.version.split()[0], fastmc.__file__, fastmc.build_info())"
    )
    sid.run([f"{venv}/bin/python", "-c", probe], env=bare, check=True)
    say(f"{label(v)}: {sid.version('memcached', '-V')}; pytest {' '.join(pytest_args)}")
    env = {"PATH": f"{venv}/bin:{SYSTEM_PATH}"}
    env.update(FASTMC_TEST_WHEEL=str(wheel), FASTMC_TEST_SDIST=str(sdist))
    cmd = [f"{venv}/bin/python", "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
    if v == PYPY:
        for test, why in PYPY_GAPS.items():
            say(f"PyPy: leaving out {test}: {why}")
        cmd += [a for test in PYPY_GAPS for a in ("--deselect", test)]
    t0 = time.monotonic()
    # the checkout at its own path: the suite and its support files, not the package (the
    # installed wheel is what `import fastmc` finds)
    sh = ["/bin/sh", "-c", f'cd {REPO} && exec "$@"', "sh", *cmd]
    r = sid.run(sh, binds=(REPO, out), env=env)
    say(f"{label(v)}: pytest exit {r.returncode} in {time.monotonic() - t0:.0f} s")
    return r.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["setup", "test"])
    ap.add_argument("versions", nargs="*", default=list(PYTHONS))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    pytest_args = argv[cut + 1 :] or ["-q", "tests"]
    if set(args.versions) - {*PYTHONS, PYPY}:
        ap.error(f"versions: {', '.join(PYTHONS)}, {PYPY}")
    sid = Sid()
    say(f"{', '.join(sid.version(executable(v), '-V') for v in (*PYTHONS, PYPY))}")
    if args.step == "setup":
        return 0
    out = WORK / "dist"
    out.mkdir(parents=True, exist_ok=True)
    build_wheels(sid, args.versions, out)
    failed = [v for v in args.versions if run_suite(sid, v, out, pytest_args) != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
