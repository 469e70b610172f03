"""The Mach-O reader and the macOS wheel checks of `make wheels` (release/macho.py,
release/platformcheck.py), on tiny macOS libraries that zig links here (`zig cc`, from the dev
requirements, with zig's own macOS stubs: no Apple SDK, and without its runtime library, so a
link takes a fraction of a second). Each is what an extension module is to the checks: a
library that calls libSystem and leaves a Python function to dynamic lookup."""

import struct
import subprocess
import sys
import zipfile

import macho
import pytest
from platformcheck import macos_problems

TARGET = "aarch64-apple-darwin"

SOURCE = """
#include <stdio.h>
extern void *PyLong_FromLong(long);
extern void _Py_Dealloc(void *);
void *make(long x) { puts("made"); return PyLong_FromLong(x); }
void drop(void *o) { _Py_Dealloc(o); }
"""
# What an extension built for the free-threaded ABI imports instead of _Py_Dealloc
FREE_THREADED = """
extern void *PyLong_FromLong(long);
extern void _Py_IncRef(void *);
extern void _Py_DecRef(void *);
void *make(long x) { void *o = PyLong_FromLong(x); _Py_IncRef(o); _Py_DecRef(o); return o; }
"""
SSL = """
extern void *SSL_new(void *);
void *ssl(void) { return SSL_new(0); }
"""


def stub(tmp_path, name, install_name, symbol):
    """A text stub of a macOS library (as Apple's SDK ships them): what a link against
    `install_name` needs, without the library."""
    (tmp_path / f"lib{name}.tbd").write_text(
        "--- !tapi-tbd\ntbd-version: 4\ntargets: [ arm64-macos ]\n"
        f"install-name: '{install_name}'\n"
        f"exports:\n  - targets: [ arm64-macos ]\n    symbols: [ {symbol} ]\n...\n"
    )


def zig_link(tmp_path, target, source=SOURCE, *flags):
    src = tmp_path / "lib.c"
    src.write_text(source)
    out = tmp_path / f"lib-{target}.so"
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", target, "-shared", "-nostdlib"]
    cmd += ["-lSystem", "-Wl,-undefined,dynamic_lookup", "-L", str(tmp_path), *flags]
    cmd += ["-o", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


@pytest.mark.parametrize(
    "target, arch, minos",
    [("aarch64-macos.11.0", "arm64", (11, 0, 0)), ("x86_64-macos.10.12", "x86_64", (10, 12, 0))],
)
def test_a_thin_library_is_read(tmp_path, target, arch, minos):
    (image,) = macho.read(zig_link(tmp_path, target))
    assert (image.arch, image.filetype, image.minos) == (arch, "dylib", minos)
    assert image.platform == macho.PLATFORM_MACOS
    assert image.dylibs == ["/usr/lib/libSystem.B.dylib"]
    assert {"_puts", "_PyLong_FromLong"} <= image.undefined
    assert image.source_of("_puts") == "/usr/lib/libSystem.B.dylib"
    assert image.source_of("_PyLong_FromLong") == "dynamic lookup"


def test_a_universal_file_is_read_slice_by_slice(tmp_path):
    arm = zig_link(tmp_path, "aarch64-macos.11.0")
    x86 = zig_link(tmp_path, "x86_64-macos.10.12")
    # A fat header (big-endian) as lipo writes it: the slices aligned to 2^14.
    first = 16384
    second = first + (len(arm) + 16383) // 16384 * 16384
    head = struct.pack(">2I", macho.FAT_MAGIC, 2)
    head += struct.pack(">5I", 0x0100000C, 0, first, len(arm), 14)
    head += struct.pack(">5I", 0x01000007, 3, second, len(x86), 14)
    data = head.ljust(first, b"\0") + arm.ljust(second - first, b"\0") + x86
    images = macho.read(data)
    assert [(im.arch, im.minos) for im in images] == [
        ("arm64", (11, 0, 0)),
        ("x86_64", (10, 12, 0)),
    ]


def test_what_is_not_a_macho_file_is_refused():
    with pytest.raises(macho.MachOError):
        macho.read(b"\x7fELF" + bytes(60))
    with pytest.raises(macho.MachOError):
        macho.read(struct.pack("<8I", macho.MH_MAGIC_64, 0x0100000C, 0, 6, 1, 4096, 0, 0))
    with pytest.raises(macho.MachOError):  # one load command, cut short
        macho.read(struct.pack("<8I", macho.MH_MAGIC_64, 0x0100000C, 0, 6, 1, 4, 0, 0) + bytes(4))


def wheel_of(tmp_path, data, tag, abi="cp313"):
    """A wheel holding `data` as the extension (all the macOS checks look at)."""
    path = tmp_path / f"fastmc-0.1.0-{abi[:5]}-{abi}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"fastmc/_fastmc.cpython-{abi[2:]}-darwin.so", data)
    return path


def test_the_wheel_check_tells_the_free_threaded_abi_from_the_gil_one(tmp_path):
    """A cp314t wheel must hold an extension built for the free-threaded ABI, and a cp314 one
    must not."""
    gil = zig_link(tmp_path, "aarch64-macos.11.0")
    free = zig_link(tmp_path, "aarch64-macos.11.0", FREE_THREADED)
    for data, abi in ((gil, "cp314"), (free, "cp314t")):
        problems, _ = macos_problems(wheel_of(tmp_path, data, "macosx_11_0_arm64", abi), TARGET)
        assert problems == [], (abi, problems)
    for data, abi in ((gil, "cp314t"), (free, "cp314")):
        problems, _ = macos_problems(wheel_of(tmp_path, data, "macosx_11_0_arm64", abi), TARGET)
        assert any("not built for the" in p for p in problems), (abi, problems)


def test_the_wheel_check_passes_a_library_as_the_release_builds_it(tmp_path):
    data = zig_link(tmp_path, "aarch64-macos.11.0")
    problems, how = macos_problems(
        wheel_of(tmp_path, data, "macosx_11_0_arm64"), "aarch64-apple-darwin"
    )
    assert problems == []
    assert how.startswith("Mach-O arm64, minimum macOS 11.0.0, links only libSystem")


def test_the_wheel_check_fails_another_minimum_arch_or_library(tmp_path):
    newer = zig_link(tmp_path, "aarch64-macos.12.0")
    problems, _ = macos_problems(
        wheel_of(tmp_path, newer, "macosx_11_0_arm64"), "aarch64-apple-darwin"
    )
    assert any("minimum macOS (12, 0, 0)" in p for p in problems), problems
    x86 = zig_link(tmp_path, "x86_64-macos.10.12")
    problems, _ = macos_problems(
        wheel_of(tmp_path, x86, "macosx_11_0_arm64"), "aarch64-apple-darwin"
    )
    assert any("holds ['x86_64']" in p for p in problems), problems
    brew = "/opt/homebrew/opt/openssl@3/lib/libssl.3.dylib"
    stub(tmp_path, "ssl", brew, "_SSL_new")
    ssl = zig_link(tmp_path, "aarch64-macos.11.0", SOURCE + SSL, "-lssl")
    problems, _ = macos_problems(
        wheel_of(tmp_path, ssl, "macosx_11_0_arm64"), "aarch64-apple-darwin"
    )
    assert any(f"links ['/usr/lib/libSystem.B.dylib', '{brew}']" in p for p in problems), problems


def test_the_wheel_check_fails_a_linked_libpython(tmp_path):
    framework = "/Library/Frameworks/Python.framework/Versions/3.13/Python"
    stub(tmp_path, "python", framework, "_PyLong_FromLong")
    data = zig_link(tmp_path, "aarch64-macos.11.0", SOURCE, "-lpython")
    problems, _ = macos_problems(
        wheel_of(tmp_path, data, "macosx_11_0_arm64"), "aarch64-apple-darwin"
    )
    assert any("links" in p and framework in p for p in problems), problems
    assert any(f"_PyLong_FromLong is bound to {framework}" in p for p in problems), problems
