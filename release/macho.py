"""A small reader of Mach-O files (macOS's executables and libraries), enough for the checks of
the macOS wheels in release/platformcheck.py: the architectures, the minimum macOS version, the
libraries linked and the undefined symbols with where each must come from. Standard library only
(`struct`); the layouts are those of Apple's <mach-o/loader.h>, <mach-o/nlist.h> and
<mach-o/fat.h>. Only 64-bit images (every macOS target fastmc builds for) are read, and only
the binding opcodes say where an import comes from: the chained fixups Apple's newer linker
writes instead are not read (zig writes the opcodes), and such a file is refused."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

MH_MAGIC_64 = 0xFEEDFACF  # little-endian 64-bit image (arm64, x86_64)
FAT_MAGIC = 0xCAFEBABE  # a universal file (big-endian header), one image per architecture
FAT_MAGIC_64 = 0xCAFEBABF

CPU_TYPES = {0x01000007: "x86_64", 0x0100000C: "arm64"}
FILE_TYPES = {1: "object", 2: "execute", 6: "dylib", 8: "bundle"}

LC_SYMTAB = 0x2
LC_LOAD_DYLIB = 0xC
LC_LOAD_WEAK_DYLIB = 0x80000018
LC_REEXPORT_DYLIB = 0x8000001F
LC_LAZY_LOAD_DYLIB = 0x20
LC_LOAD_UPWARD_DYLIB = 0x80000023
LC_RPATH = 0x8000001C
LC_VERSION_MIN_MACOSX = 0x24
LC_BUILD_VERSION = 0x32
LC_DYLD_INFO = 0x22
LC_DYLD_INFO_ONLY = 0x80000022
LC_DYLD_CHAINED_FIXUPS = 0x80000034
# Every command that makes dyld load a library; their order gives the library ordinals.
DYLIB_COMMANDS = (
    LC_LOAD_DYLIB,
    LC_LOAD_WEAK_DYLIB,
    LC_REEXPORT_DYLIB,
    LC_LAZY_LOAD_DYLIB,
    LC_LOAD_UPWARD_DYLIB,
)
PLATFORM_MACOS = 1

N_EXT = 0x01
N_TYPE = 0x0E
N_UNDF = 0x0
N_STAB = 0xE0
# Where dyld binds an imported symbol: 1..n the n-th linked library, or one of these (the
# binding opcodes' signed "special" ordinals).
SELF = 0
MAIN_EXECUTABLE = -1
FLAT_LOOKUP = -2  # what `-undefined dynamic_lookup` gives: any image loaded, the host's first
WEAK_LOOKUP = -3
SPECIAL = {SELF: "self", MAIN_EXECUTABLE: "the executable", FLAT_LOOKUP: "dynamic lookup"}
SPECIAL[WEAK_LOOKUP] = "weak lookup"


class MachOError(ValueError):
    pass


@dataclass
class Image:
    """One architecture's image."""

    arch: str
    filetype: str
    # (major, minor, patch) from LC_BUILD_VERSION's minos, or LC_VERSION_MIN_MACOSX's version
    minos: tuple[int, int, int] | None = None
    # The platform LC_BUILD_VERSION names (1: macOS); None with the older command.
    platform: int | None = None
    dylibs: list[str] = field(default_factory=list)
    rpaths: list[str] = field(default_factory=list)
    # the undefined external symbols of the symbol table
    undefined: set[str] = field(default_factory=set)
    # imported symbol -> the library ordinal dyld binds it with (see above), from the binding
    # opcodes (LC_DYLD_INFO)
    imports: dict[str, int] = field(default_factory=dict)

    def source_of(self, symbol: str) -> str:
        """Where dyld binds `symbol`: a linked library's path, or a special ordinal's name."""
        ordinal = self.imports[symbol]
        if ordinal in SPECIAL:
            return SPECIAL[ordinal]
        if 1 <= ordinal <= len(self.dylibs):
            return self.dylibs[ordinal - 1]
        return f"ordinal {ordinal}"


def _version(packed: int) -> tuple[int, int, int]:
    """A version packed as xxxx.yy.zz in 32 bits."""
    return (packed >> 16, (packed >> 8) & 0xFF, packed & 0xFF)


def _cstr(data: bytes, start: int, end: int | None = None) -> str:
    raw = data[start:end]
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def read_image(data: bytes) -> Image:
    """One 64-bit little-endian image (a thin file, or one slice of a universal one)."""
    if len(data) < 32:
        raise MachOError("too short for a Mach-O header")
    magic, cputype, _, filetype, ncmds, sizeofcmds, _, _ = struct.unpack_from("<8I", data, 0)
    if magic != MH_MAGIC_64:
        raise MachOError(f"not a 64-bit little-endian Mach-O image (magic {magic:#x})")
    if 32 + sizeofcmds > len(data):
        raise MachOError("load commands run past the end of the file")
    image = Image(
        arch=CPU_TYPES.get(cputype, f"cputype {cputype:#x}"),
        filetype=FILE_TYPES.get(filetype, f"filetype {filetype}"),
    )
    symtab = None
    offset = 32
    for _ in range(ncmds):
        cmd, cmdsize = struct.unpack_from("<2I", data, offset)
        if cmdsize < 8 or offset + cmdsize > 32 + sizeofcmds:
            raise MachOError(f"bad load command size {cmdsize} at {offset}")
        body = data[offset : offset + cmdsize]
        if cmd in DYLIB_COMMANDS:
            (name_offset,) = struct.unpack_from("<I", body, 8)
            image.dylibs.append(_cstr(body, name_offset))
        elif cmd == LC_RPATH:
            (path_offset,) = struct.unpack_from("<I", body, 8)
            image.rpaths.append(_cstr(body, path_offset))
        elif cmd == LC_BUILD_VERSION:
            platform, minos = struct.unpack_from("<2I", body, 8)
            image.platform, image.minos = platform, _version(minos)
        elif cmd == LC_VERSION_MIN_MACOSX:
            (version,) = struct.unpack_from("<I", body, 8)
            image.platform, image.minos = PLATFORM_MACOS, _version(version)
        elif cmd == LC_SYMTAB:
            symtab = struct.unpack_from("<4I", body, 8)  # symoff, nsyms, stroff, strsize
        elif cmd in (LC_DYLD_INFO, LC_DYLD_INFO_ONLY):
            # rebase, bind, weak bind, lazy bind, export: (offset, size) each
            info = struct.unpack_from("<10I", body, 8)
            for off, size in (info[2:4], info[6:8]):  # bind, lazy bind (weak has no ordinal)
                image.imports.update(_bind_opcodes(_slice(data, off, size)))
        elif cmd == LC_DYLD_CHAINED_FIXUPS:
            raise MachOError("chained fixups, which this reader does not read")
        offset += cmdsize
    if symtab is not None:
        symoff, nsyms, stroff, strsize = symtab
        if symoff + 16 * nsyms > len(data) or stroff + strsize > len(data):
            raise MachOError("the symbol table runs past the end of the file")
        strings = data[stroff : stroff + strsize]
        for i in range(nsyms):
            strx, ntype, _, _, _ = struct.unpack_from("<IBBHQ", data, symoff + 16 * i)
            if ntype & N_STAB or not ntype & N_EXT or (ntype & N_TYPE) != N_UNDF:
                continue
            image.undefined.add(_cstr(strings, strx))
    return image


def _slice(data: bytes, offset: int, size: int) -> bytes:
    if offset + size > len(data):
        raise MachOError("dyld's information runs past the end of the file")
    return data[offset : offset + size]


def _uleb(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise MachOError("a LEB128 number runs past its table")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _bind_opcodes(data: bytes) -> dict[str, int]:
    """Symbol -> library ordinal from a stream of binding opcodes (<mach-o/loader.h>,
    BIND_OPCODE_*): only the ordinal and the symbol name are followed, every other opcode is
    skipped over with its operands."""
    found: dict[str, int] = {}
    ordinal, symbol, i = 0, None, 0
    while i < len(data):
        opcode, imm = data[i] & 0xF0, data[i] & 0x0F
        i += 1
        if opcode == 0x10:  # SET_DYLIB_ORDINAL_IMM
            ordinal = imm
        elif opcode == 0x20:  # SET_DYLIB_ORDINAL_ULEB
            ordinal, i = _uleb(data, i)
        elif opcode == 0x30:  # SET_DYLIB_SPECIAL_IMM: 0, or a negative number in 4 bits
            ordinal = imm - 16 if imm else 0
        elif opcode == 0x40:  # SET_SYMBOL_TRAILING_FLAGS_IMM, then the name
            end = data.find(b"\0", i)
            if end < 0:
                raise MachOError("a symbol name runs past the binding opcodes")
            symbol, i = data[i:end].decode("utf-8", "replace"), end + 1
        elif opcode in (0x60, 0x70, 0x80, 0xA0):  # addend, segment+offset, add address
            _, i = _uleb(data, i)
        elif opcode == 0xC0:  # DO_BIND_ULEB_TIMES_SKIPPING_ULEB
            _, i = _uleb(data, i)
            _, i = _uleb(data, i)
        elif opcode == 0xD0 and imm == 0:  # THREADED: SET_BIND_ORDINAL_TABLE_SIZE_ULEB
            _, i = _uleb(data, i)
        if opcode in (0x90, 0xA0, 0xB0, 0xC0) and symbol is not None:  # a bind is done
            found[symbol] = ordinal
    return found


def read(data: bytes) -> list[Image]:
    """Every image of a Mach-O file: one for a thin file, one per architecture for a universal
    one. A file this reader cannot follow raises MachOError."""
    try:
        return _read(data)
    except struct.error as e:  # a table or command cut short
        raise MachOError(f"truncated: {e}") from None


def _read(data: bytes) -> list[Image]:
    if len(data) < 8:
        raise MachOError("too short for a Mach-O file")
    (magic,) = struct.unpack_from(">I", data, 0)
    if magic not in (FAT_MAGIC, FAT_MAGIC_64):
        return [read_image(data)]
    (count,) = struct.unpack_from(">I", data, 4)
    images = []
    for i in range(count):
        if magic == FAT_MAGIC:  # cputype, cpusubtype, offset, size, align
            _, _, offset, size, _ = struct.unpack_from(">5I", data, 8 + 20 * i)
        else:  # the same with 64-bit offset and size, and a reserved word
            _, _, offset, size, _, _ = struct.unpack_from(">2I2Q2I", data, 8 + 32 * i)
        if offset + size > len(data):
            raise MachOError(f"slice {i} runs past the end of the file")
        images.append(read_image(data[offset : offset + size]))
    return images
