"""memcached with its built-in proxy (Lua routes, `-o proxy_config=routelib`), for the proxy
tests on a machine whose memcached lacks it (Debian bookworm's is built without the proxy).

Run as ``python tests/support/sid_memcached.py`` (``make memcached-proxy``): apt-get, with a
private state under target/sid-memcached (the machine's own apt setup untouched), reads the
index of Debian's unstable suite (sid), checked against the machine's Debian archive keyring,
and downloads sid's memcached and the few libraries it links (libc6 among them: sid's binary
wants a newer C library than bookworm's); dpkg-deb unpacks them into target/sid-memcached/root.
No root directory is entered and nothing is installed: target/sid-memcached/memcached is a
script that runs that binary with that tree's own loader and libraries. Made once, reused
while the package list below is unchanged.

The tests find the binary through `proxy_binary()`."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "target" / "sid-memcached"
WRAPPER = WORK / "memcached"
MIRROR = os.environ.get("SID_MIRROR", "http://deb.debian.org/debian")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# memcached and what `ld.so --list` shows it loads (a new name for one of them fails the check
# below, which says which library is missing)
PACKAGES = [
    "memcached",
    "libc6",
    "libevent-2.1-7t64",
    "libsasl2-2",
    "liblua5.4-0",
    "libssl3t64",
    "zlib1g",
    "libzstd1",
]


def proxy_supported(binary: str) -> bool:
    """Whether `binary` (a memcached or a script running one) runs and has the proxy."""
    try:
        out = subprocess.run([binary, "-h"], capture_output=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"proxy_config" in out


def proxy_binary() -> str | None:
    """The memcached the proxy tests start as the proxy: $MEMCACHED_PROXY, else the one
    `make memcached-proxy` unpacked, else $MEMCACHED or the machine's memcached when it has
    the proxy (Debian sid's does); None when none of them has it."""
    candidates = [os.environ.get("MEMCACHED_PROXY"), str(WRAPPER)]
    candidates.append(os.environ.get("MEMCACHED") or shutil.which("memcached"))
    for c in candidates:
        if c and os.path.exists(c) and proxy_supported(c):
            return c
    return None


def apt_options(work: Path) -> list[str]:
    """apt-get options that keep every file it reads or writes under `work` (sid's index in
    place of the machine's, no installed package known) and fetch amd64 (or the machine's own
    architecture) only."""
    (work / "state" / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (work / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    (work / "parts").mkdir(exist_ok=True)
    (work / "status").touch()
    (work / "sources.list").write_text(f"deb [signed-by={KEYRING}] {MIRROR} sid main\n")
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    opts = {
        "Dir::Etc::SourceList": work / "sources.list",
        "Dir::Etc::SourceParts": work / "parts",
        "Dir::Etc::Preferences": work / "preferences",
        "Dir::Etc::PreferencesParts": work / "parts",
        "Dir::State": work / "state",
        "Dir::State::status": work / "status",
        "Dir::Cache": work / "cache",
        "APT::Architecture": arch,
        "APT::Architectures": arch,
        "Acquire::Languages": "none",
        # sid's Release file may be past its Valid-Until date on a mirror that lags
        "Acquire::Check-Valid-Until": "false",
        "Debug::NoLocking": "true",
    }
    if os.geteuid() == 0:  # apt's _apt user may not write under target/
        opts["APT::Sandbox::User"] = "root"
    return [x for k, v in opts.items() for x in ("-o", f"{k}={v}")]


def wrapper_text(root: Path) -> str:
    """The script that runs the tree's memcached with the tree's loader and libraries (paths
    relative to the script, so the directory may move)."""
    loaders = sorted(root.glob("usr/lib*/ld-linux*.so.*")) + sorted(root.glob("lib*/ld-linux*"))
    if not loaders:
        sys.exit(f"no loader (ld-linux*.so) in {root}: did libc6 unpack?")
    loader = loaders[0].relative_to(root)
    libdirs = sorted({p.parent.relative_to(root) for p in root.glob("usr/lib/*/libc.so.6")})
    libpath = ":".join(f'"$r/{d}"' for d in libdirs) or '"$r/usr/lib"'
    return (
        "#!/bin/sh\n"
        "# memcached from Debian sid, run with its own loader and libraries"
        " (tests/support/sid_memcached.py)\n"
        'r="$(cd "$(dirname "$0")" && pwd)/root"\n'
        f'exec "$r/{loader}" --library-path {libpath} "$r/usr/bin/memcached" "$@"\n'
    )


def check(wrapper: Path) -> str:
    """The version line of the unpacked memcached; exits when it does not run or lacks the
    proxy."""
    r = subprocess.run([str(wrapper), "-V"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{wrapper} -V failed: {r.stderr.strip()} (a library missing from PACKAGES?)")
    if not proxy_supported(str(wrapper)):
        sys.exit(f"{wrapper}: this memcached is built without the proxy")
    return r.stdout.strip()


def setup(force: bool) -> None:
    stamp = WORK / ".packages"
    want = "\n".join(PACKAGES)
    if not force and stamp.exists() and stamp.read_text() == want and WRAPPER.exists():
        print(f"[sid-memcached] {check(WRAPPER)} already in {WORK.relative_to(REPO)}")
        return
    for tool in ("apt-get", "dpkg-deb"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: this setup needs Debian's apt and dpkg")
    t0 = time.monotonic()
    WORK.mkdir(parents=True, exist_ok=True)
    opts = apt_options(WORK / "apt")
    subprocess.run(["apt-get", "-qq", *opts, "update"], check=True)
    t_index = time.monotonic() - t0
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        debs, root = Path(tmp) / "debs", Path(tmp) / "root"
        debs.mkdir()
        subprocess.run(["apt-get", "-qq", *opts, "download", *PACKAGES], cwd=debs, check=True)
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        shutil.rmtree(WORK / "root", ignore_errors=True)
        root.rename(WORK / "root")
        names = sorted(d.name for d in debs.glob("*.deb"))
    WRAPPER.write_text(wrapper_text(WORK / "root"))
    WRAPPER.chmod(0o755)
    version = check(WRAPPER)
    stamp.write_text(want)
    took = time.monotonic() - t0
    print(f"[sid-memcached] {version}: {' '.join(names)}")
    print(f"[sid-memcached] {took:.0f} s ({t_index:.0f} s for sid's index) -> {WRAPPER}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="download and unpack again")
    setup(ap.parse_args().force)


if __name__ == "__main__":
    main()
