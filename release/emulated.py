"""Run the aarch64 wheels on this x86_64 machine: Debian's CPython for arm64 under qemu-user,
both unpacked from Debian's packages into target/emulated/ with a private apt state (nothing is
installed, the system's apt lists are not touched). release/wheels.py check uses it to install
the aarch64 manylinux wheel for that CPython (3.11 on Debian 12) with pip and smoke-test it as
it does the native ones. Best effort: without apt-get or Debian's arm64 packages, Aarch64()
raises Unavailable with the reason, and the aarch64 wheels stay checked by auditwheel and their
ELF only."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

WORK = Path(__file__).resolve().parents[1] / "target" / "emulated"


class Unavailable(Exception):
    """Emulation cannot be set up here; the message says why."""


def _apt(tool: str, *args: str, cwd: Path | None = None) -> str:
    host = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True
    ).stdout.strip()
    opts = [f"Dir::State::Lists={WORK / 'lists'}", f"Dir::Cache={WORK / 'cache'}"]
    opts += [f"APT::Architectures::={host}", "APT::Architectures::=arm64", "Debug::NoLocking=1"]
    cmd = [tool, *(x for o in opts for x in ("-o", o)), *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise Unavailable(f"{tool} {args[0]} failed: {r.stderr.strip()[-500:]}")
    return r.stdout


def _download() -> None:
    """Debian's arm64 CPython with everything it needs, pip's wheel and qemu-user-static."""
    for d in ("lists/partial", "cache/archives/partial", "debs"):
        (WORK / d).mkdir(parents=True, exist_ok=True)
    _apt("apt-get", "-q", "update")
    minimal = re.search(
        r"(python3\.\d+)-minimal:arm64", _apt("apt-cache", "depends", "python3-minimal:arm64")
    )
    if not minimal:
        raise Unavailable("no arm64 CPython among Debian's packages here")
    py = minimal.group(1)
    roots = [f"{py}-minimal:arm64", f"lib{py}-stdlib:arm64", "zlib1g:arm64"]
    deps = _apt(
        "apt-cache",
        "depends",
        "--recurse",
        "--no-recommends",
        "--no-suggests",
        "--no-conflicts",
        "--no-breaks",
        "--no-replaces",
        "--no-enhances",
        *roots,
    )
    names = {
        ln.strip()
        for ln in deps.splitlines()
        if ln.endswith(":arm64") and not ln.startswith((" ", "<"))
    }
    _apt(
        "apt-get",
        "-q",
        "download",
        *sorted(names),
        "python3-pip-whl",
        "qemu-user-static",
        cwd=WORK / "debs",
    )


class Aarch64:
    """Debian's arm64 CPython under qemu-user, unpacked once into target/emulated/."""

    def __init__(self) -> None:
        if platform.machine() != "x86_64" or not shutil.which("apt-get"):
            raise Unavailable("needs an x86_64 Debian machine (apt-get) to fetch arm64 packages")
        self.sysroot = WORK / "sysroot"
        self.qemu = WORK / "qemu" / "usr" / "bin" / "qemu-aarch64-static"
        ready = WORK / "ready"
        if not ready.exists():
            _download()
            shutil.rmtree(self.sysroot, ignore_errors=True)
            for deb in sorted((WORK / "debs").glob("*.deb")):
                dest = WORK / "qemu" if deb.name.startswith("qemu-") else self.sysroot
                subprocess.run(["dpkg", "-x", str(deb), str(dest)], check=True)
            # keep what runs (about 90 MB): not the packages, apt's lists or the other emulators
            for other in self.qemu.parent.glob("qemu-*"):
                if other != self.qemu:
                    other.unlink()
            for d in ("debs", "lists", "cache"):
                shutil.rmtree(WORK / d)
            ready.touch()
        pythons = sorted(self.sysroot.glob("usr/bin/python3.*[0-9]"))
        wheels = sorted(self.sysroot.glob("usr/share/python-wheels/pip-*.whl"))
        if not pythons or not wheels or not self.qemu.exists():
            raise Unavailable(f"the unpacked packages in {WORK} lack python, pip or qemu")
        self.python, self.pip = pythons[-1], wheels[-1]
        self.version = self.python.name[len("python") :]

    def cmd(self, *args: str) -> list[str]:
        return [str(self.qemu), "-L", str(self.sysroot), *args]

    def install(self, venv: Path, env: dict, out: Path, version: str) -> str:
        """A venv (without pip: qemu-user cannot start the foreign child ensurepip would), then
        pip run from its wheel installs fastmc from `out`; returns the file pip picked."""
        subprocess.run(
            self.cmd(str(self.python), "-m", "venv", "--without-pip", str(venv)), check=True
        )
        report = venv / "pip-report.json"
        pip = [str(venv / "bin" / "python"), f"{self.pip}/pip", "install", "-q", "--no-index"]
        pip += ["--only-binary", ":all:", "--find-links", str(out.resolve())]
        pip += ["--report", str(report), f"fastmc=={version}"]
        r = subprocess.run(self.cmd(*pip), env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"pip (emulated) found no wheel to install: {r.stderr.strip()}")
        (item,) = json.loads(report.read_text())["install"]
        return str(item["download_info"]["url"]).rsplit("/", 1)[1]
