#!/usr/bin/env python3
"""Zero the sm80/sm86 cubin payloads in a shared library's ``.nv_fatbin`` (headers kept), so that
only the sm90 cubins carry bytes and gzip/deflate squeezes the rest to nothing.

Why: sgl_kernel's FA3 library (``flash_ops.abi3.so``, 1.12 GB) holds cubins for sm80, sm86 and
sm90; an H200 loads only the sm90 ones, so zeroing the others changes nothing it runs while the
compressed file drops from ~380 MB to ~212 MB. The fatbin's headers stay intact, so the CUDA
runtime still parses the container (the feasibility run's paged-decode check passed on the result).

Format walked: each fatbin is a header (magic 0xBA55ED50, u16 version, u16 header size, u64 payload
size) followed by entries (u16 kind, u16 version, u32 entry-header size, u64 payload size, ...,
u32 arch at offset 28); kind 2 is a cubin (ELF). Needs ``readelf`` (binutils) to find the section.

usage: fatbin_zero.py SRC.so DST.so   (prints ``zeroed N kept M`` in bytes)
"""

from __future__ import annotations

import mmap
import shutil
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
CUBIN = 2
ZEROED_ARCHS = (80, 86)


def fatbin_section(path: str) -> tuple[int, int]:
    """(file offset, size) of the ``.nv_fatbin`` section, from ``readelf -SW``."""
    out = subprocess.check_output(["readelf", "-SW", path]).decode()
    for line in out.splitlines():
        if ".nv_fatbin" in line:
            parts = line.split("]")[1].split()
            return int(parts[3], 16), int(parts[4], 16)
    raise SystemExit(f"fatbin_zero: {path} has no .nv_fatbin section")


def zero_archs(path: str, archs: tuple[int, ...] = ZEROED_ARCHS) -> tuple[int, int]:
    """Zero, in place, the payloads of the cubins for `archs`; returns (bytes zeroed, bytes kept)."""
    off, size = fatbin_section(path)
    zeroed = kept = 0
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        pos, end = off, off + size
        while pos < end:
            magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", m, pos)
            if magic != FATBIN_MAGIC:  # padding between fatbins: skip to the next magic
                nxt = m.find(struct.pack("<I", FATBIN_MAGIC), pos + 1, end)
                if nxt < 0:
                    break
                pos = nxt
                continue
            entry, fend = pos + hsz, pos + hsz + fsz
            while entry < fend:
                kind, _v, ehsz, psz = struct.unpack_from("<HHIQ", m, entry)
                arch = struct.unpack_from("<I", m, entry + 28)[0]
                if kind == CUBIN and arch in archs:
                    m[entry + ehsz:entry + ehsz + psz] = b"\0" * psz
                    zeroed += psz
                else:
                    kept += psz
                entry += ehsz + psz
            pos = fend
        m.flush()
    return zeroed, kept


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src, dst = argv
    shutil.copyfile(src, dst)
    zeroed, kept = zero_archs(dst)
    if zeroed == 0:
        print(f"fatbin_zero: no sm80/sm86 cubin found in {src}", file=sys.stderr)
        return 1
    print("zeroed", zeroed, "kept", kept)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
