"""The platform checks of one release wheel, for release/wheels.py check: which Rust target a
wheel is for and the tag it must carry; what auditwheel says of it; its extension's ELF (the
machine, the libraries it needs, the SOABI file name; for musl, every imported symbol defined by
musl 1.2 and, on x86_64 with Debian's musl installed, musl's own loader resolving it). A macOS
wheel's extension is read with release/macho.py: its architecture, the minimum macOS in its load
commands against the tag, only libSystem linked, Python's symbols left to dynamic lookup. It
needs auditwheel (and its pyelftools): release/requirements.txt."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import macho
import wheelcheck

# Rust target -> (maturin --compatibility, the platform tag its wheels must carry).
TARGETS = {
    "x86_64-unknown-linux-gnu": ("manylinux2014", "manylinux_2_17_x86_64"),
    "x86_64-unknown-linux-musl": ("musllinux_1_2", "musllinux_1_2_x86_64"),
    "aarch64-unknown-linux-gnu": ("manylinux2014", "manylinux_2_17_aarch64"),
    "aarch64-unknown-linux-musl": ("musllinux_1_2", "musllinux_1_2_aarch64"),
    # macOS: no --compatibility; the tag carries MACOS_MIN's version.
    "x86_64-apple-darwin": ("", "macosx_10_12_x86_64"),
    "aarch64-apple-darwin": ("", "macosx_11_0_arm64"),
}
# macOS target -> MACOSX_DEPLOYMENT_TARGET, the oldest macOS its wheels claim: the oldest the
# Rust standard library supports there (rustc's own default: 10.12 on x86_64; 11.0, the first
# macOS for Apple silicon, on arm64). Nothing in the crate asks for more (docs/packaging.md).
MACOS_MIN = {"x86_64-apple-darwin": "10.12", "aarch64-apple-darwin": "11.0"}
# What a macOS extension may link: the C library and the rest of libSystem, nothing else (no
# libpython: CPython's symbols are looked up in the process that loads it).
MACOS_LIBS = ["/usr/lib/libSystem.B.dylib"]
# Shared libraries a manylinux wheel may link (auditwheel's policy decides the tag; this is the
# plainer promise of the README: no libssl, libz, libsasl or libmemcached).
GLIBC_LIBS = {
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}
MUSL_LIBC = Path("/lib/x86_64-linux-musl/libc.so")  # Debian's musl package (musl 1.2.3)
MUSL_LOADER = Path("/lib/ld-musl-x86_64.so.1")


def wheel_target(name: str) -> str | None:
    for target, (_, tag) in TARGETS.items():
        if name[: -len(".whl")].split("-")[-1].split(".")[-1] == tag:
            return target
    return None


def elf_of(wheel: Path) -> tuple[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        (so,) = [n for n in zf.namelist() if wheelcheck.EXTENSION.match(n)]
        return so, zf.read(so)


def elf_facts(data: bytes) -> dict:
    """Machine, DT_NEEDED, interpreter, symbol-version needs and the strong undefined symbols of
    a shared object (pyelftools comes with auditwheel)."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    dyn = elf.get_section_by_name(".dynamic")
    needed = [t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED"] if dyn else []
    dynsym = elf.get_section_by_name(".dynsym")
    undefined = set()
    defined = set()
    for sym in dynsym.iter_symbols() if dynsym else []:
        if not sym.name:
            continue
        if sym["st_shndx"] == "SHN_UNDEF":
            if sym["st_info"]["bind"] == "STB_GLOBAL":  # weak ones may be missing
                undefined.add(sym.name)
        else:
            defined.add(sym.name)
    return {
        "machine": elf["e_machine"],
        "needed": needed,
        "interp": any(s["p_type"] == "PT_INTERP" for s in elf.iter_segments()),
        "verneed": elf.get_section_by_name(".gnu.version_r") is not None,
        "undefined": undefined,
        "defined": defined,
    }


def auditwheel(wheel: Path, musl: bool) -> dict:
    with tempfile.TemporaryDirectory() as nothing:
        # A musl wheel is judged without the host's libraries: this glibc host's directories (and
        # Debian's musl, a different soname) have nothing that wheel may use.
        ldpaths = ["--ldpaths", nothing] if musl else []
        out = subprocess.run(
            [sys.executable, "-m", "auditwheel", "show", "--json", *ldpaths, str(wheel)],
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        return {"error": out.stderr.strip()}
    return json.loads(out.stdout)


def macos_problems(wheel: Path, target: str) -> tuple[list[str], str]:
    """The Mach-O checks of a macOS wheel's extension (release/macho.py)."""
    so, data = elf_of(wheel)
    arch = "arm64" if target.startswith("aarch64") else "x86_64"
    minos = tuple(int(x) for x in MACOS_MIN[target].split("."))
    try:
        images = macho.read(data)
    except macho.MachOError as e:
        return [f"{so}: {e}"], ""
    if not images:
        return [f"{so}: a universal file of no architecture"], ""
    problems = []
    if Path(so).name != extension_name(wheel.name, target):
        problems.append(f"{so} is not named {extension_name(wheel.name, target)}")
    if [im.arch for im in images] != [arch]:
        problems.append(f"{so} holds {[im.arch for im in images]}, not [{arch!r}]")
    for im in images:
        if im.platform != macho.PLATFORM_MACOS or (im.minos or ())[:2] != minos:
            problems.append(f"{so}: platform {im.platform}, minimum macOS {im.minos}, not {minos}")
        if im.filetype not in ("dylib", "bundle"):
            problems.append(f"{so} is a Mach-O {im.filetype}")
        if im.dylibs != MACOS_LIBS or im.rpaths:
            problems.append(f"{so} links {im.dylibs} (rpaths {im.rpaths}), not {MACOS_LIBS}")
        python = {s for s in im.imports if s.startswith(("_Py", "__Py"))}
        if not python or not python <= {s for s in im.undefined if s.startswith(("_Py", "__Py"))}:
            problems.append(f"{so}: Python's symbols are not undefined imports")
        for sym in sorted(im.imports):
            want = "dynamic lookup" if sym in python else MACOS_LIBS[0]
            if im.source_of(sym) != want:
                problems.append(f"{so}: {sym} is bound to {im.source_of(sym)}, not {want}")
                break
    problems += abi_problems(wheel.name, {s[1:] for s in images[0].imports})
    minimum = ".".join(map(str, images[0].minos or ()))
    python = [s for s in images[0].imports if s.startswith(("_Py", "__Py"))]
    how = f"Mach-O {arch}, minimum macOS {minimum}, links only libSystem"
    return problems, f"{how}, {len(python)} Python symbols by dynamic lookup"


def platform_problems(wheel: Path, target: str) -> tuple[list[str], str]:
    """The platform checks of one wheel; returns the problems and how it was verified."""
    if target.endswith("-apple-darwin"):
        return macos_problems(wheel, target)
    _, tag = TARGETS[target]
    arch = "EM_X86_64" if target.startswith("x86_64") else "EM_AARCH64"
    so, data = elf_of(wheel)
    facts = elf_facts(data)
    report = auditwheel(wheel, musl=target.endswith("-musl"))
    problems = []
    if "error" in report:
        return [f"auditwheel failed: {report['error']}"], ""
    if facts["machine"] != arch:
        problems.append(f"{so} is {facts['machine']}, not {arch}")
    if Path(so).name != extension_name(wheel.name, target):
        problems.append(f"{so} is not named {extension_name(wheel.name, target)}")
    problems += abi_problems(wheel.name, facts["undefined"])
    if target.endswith("-gnu"):
        if report["overall_tag"] != tag:
            problems.append(f"auditwheel: {report['overall_tag']}, not {tag}")
        extra = sorted(set(facts["needed"]) - GLIBC_LIBS)
        if extra:
            problems.append(f"links {extra}")
        return problems, f"auditwheel: {report['overall_tag']}"
    # musl. auditwheel expects Alpine's name for musl's libc (libc.musl-<arch>.so.1); zig links
    # musl's upstream soname, libc.so, which musl's loader resolves to itself. So its verdict is
    # `linux_<arch>` with libc.so as the one library to eliminate; the symbols pass its policy.
    if report["sym_tag"] != tag:
        problems.append(f"auditwheel symbol policy: {report['sym_tag']}, not {tag}")
    if report["external_libs"] != {"libc.so": None}:
        problems.append(f"auditwheel: external libraries {report['external_libs']}")
    if facts["needed"] != ["libc.so"] or facts["interp"] or facts["verneed"]:
        problems.append(
            f"{so}: needs {facts['needed']} (glibc symbol versions: {facts['verneed']})"
        )
    how = f"auditwheel: symbols {report['sym_tag']}, needs only musl's libc.so"
    if MUSL_LIBC.exists():
        musl = elf_facts(MUSL_LIBC.read_bytes())["defined"]
        unknown = sorted(s for s in facts["undefined"] - musl if not s.startswith(("Py", "_Py")))
        if unknown:
            problems.append(f"{so} imports symbols musl 1.2 lacks: {unknown}")
        how += "; every imported symbol is in musl 1.2.3"
    if MUSL_LOADER.exists() and arch == "EM_X86_64":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(so).name
            path.write_bytes(data)
            out = subprocess.run(
                [str(MUSL_LOADER), "--list", str(path)], capture_output=True, text=True
            )
        lines = (out.stdout + out.stderr).splitlines()
        bad = [
            ln
            for ln in lines
            if ln.startswith("Error") and not re.search(r": _?Py\w*: symbol not found$", ln)
        ]
        if bad:
            problems.append(f"musl's loader: {bad}")
        how += "; musl's loader resolves it"
    return problems, how


def extension_name(wheel_name: str, target: str) -> str:
    """The file name the interpreter looks for: its SOABI for the target (before 3.11, CPython on
    musl still called itself linux-gnu; on macOS it names no architecture)."""
    _, _, python_tag, abi_tag, _ = wheel_name[: -len(".whl")].split("-")
    abi = wheelcheck.soabi(python_tag, abi_tag)
    if target.endswith("-apple-darwin"):
        return f"_fastmc.{abi}-darwin.so"
    minor = int(python_tag[3:])
    libc = "musl" if target.endswith("-musl") and minor >= 11 else "gnu"
    return f"_fastmc.{abi}-{target.split('-')[0]}-linux-{libc}.so"


# The free-threaded ABI in an extension's imports: PyO3 built for it counts references through
# CPython's functions (the object header's counts are not touched inline there), and the GIL
# build's inline decrement calls _Py_Dealloc instead.
FREE_THREADED_IMPORTS = {"_Py_IncRef", "_Py_DecRef"}
GIL_IMPORTS = {"_Py_Dealloc"}


def abi_problems(wheel_name: str, imports: set[str]) -> list[str]:
    """Whether a CPython extension was compiled for the ABI its tag names (free-threaded or
    not), from the Python symbols it imports (`imports`: without macOS's leading underscore)."""
    _, _, python_tag, abi_tag, _ = wheel_name[: -len(".whl")].split("-")
    if not python_tag.startswith("cp") or abi_tag == "abi3":
        return []
    if abi_tag.endswith("t"):
        want, unwanted = FREE_THREADED_IMPORTS, GIL_IMPORTS
    else:
        want, unwanted = GIL_IMPORTS, FREE_THREADED_IMPORTS
    problems = []
    if not want <= imports or imports & unwanted:
        kind = "free-threaded" if abi_tag.endswith("t") else "GIL"
        problems.append(
            f"imports {sorted(imports & (want | unwanted))}: not built for the {kind} ABI its tag names"
        )
    return problems
