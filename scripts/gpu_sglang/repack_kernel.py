#!/usr/bin/env python3
"""Repack sglang-kernel's wheel (383 MB, 1.2 GB unpacked) into a wheel small enough to carry to
the H200 in a few device calls.

What an H200 running SGLang 0.5.17 loads of it: ``sgl_kernel/sm90/common_ops.abi3.so`` (picked by
compute capability 9.0 in ``load_utils._load_architecture_specific_ops``) and the Python modules.
Loaded lazily, and so dropped:
* ``sm100/`` (the common ops for every other capability, also the no-GPU fallback),
* ``infllm_ops*.so`` (``infllm_v2._loader.load_infllm_ops``, called from the InfLLM attention op),
* ``flashmla_ops.abi3.so`` (imported under ``try`` in ``flash_mla.py``: MLA models only),
* ``flash_ops.abi3.so`` (FA3; imported only by ``sgl_kernel.flash_attn``, which only the fa3
  attention backend imports) in the ``triton`` variant.
The ``fa3`` variant keeps ``flash_ops.abi3.so`` with its sm80/sm86 cubins zeroed (fatbin_zero.py).

The result is a valid wheel of the same name and version (RECORD rewritten, so pip installs and
verifies it) with ``sgl_kernel/CARRY_VARIANT`` saying what was dropped; pip installs it as
sglang-kernel 0.4.5.

usage: repack_kernel.py WHEEL {triton,fa3} OUTDIR   (prints the written wheel's path)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fatbin_zero import zero_archs  # noqa: E402

LAZY = ("sgl_kernel/sm100/", "sgl_kernel/infllm_ops", "sgl_kernel/flashmla_ops")
FA3 = "sgl_kernel/flash_ops.abi3.so"
VARIANTS = ("triton", "fa3")
CHUNK = 1 << 24


def dropped(name: str, variant: str) -> bool:
    if name.startswith(LAZY):
        return True
    return name == FA3 and variant == "triton"


def record_line(name: str, digest: bytes, size: int) -> str:
    b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return f"{name},sha256={b64},{size}"


def copy_member(src: zipfile.ZipFile, info: zipfile.ZipInfo, dst: zipfile.ZipFile,
                path: str | None = None) -> str:
    """Copy one member (from `path` on disk when given), deflated; returns its RECORD line."""
    out_info = zipfile.ZipInfo(info.filename, date_time=info.date_time)
    out_info.external_attr = info.external_attr
    out_info.compress_type = zipfile.ZIP_DEFLATED
    h, size = hashlib.sha256(), 0
    reader = open(path, "rb") if path else src.open(info)
    with reader, dst.open(out_info, "w", force_zip64=True) as w:
        while block := reader.read(CHUNK):
            h.update(block)
            size += len(block)
            w.write(block)
    return record_line(info.filename, h.digest(), size)


def repack(wheel: Path, variant: str, outdir: Path) -> Path:
    outdir.mkdir(parents=True, exist_ok=True)
    out = outdir / wheel.name
    tmp = out.with_suffix(".tmp")
    records: list[str] = []
    removed: list[str] = []
    with zipfile.ZipFile(wheel) as src, \
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            name = info.filename
            if name == record_name:
                continue
            if dropped(name, variant):
                removed.append(name)
                continue
            if name == FA3:
                with tempfile.TemporaryDirectory(dir=outdir) as work:
                    so = os.path.join(work, "flash_ops.abi3.so")
                    with src.open(info) as r, open(so, "wb") as w:
                        while block := r.read(CHUNK):
                            w.write(block)
                    zeroed, kept = zero_archs(so)
                    print(f"repack_kernel: {FA3}: zeroed {zeroed} bytes of sm80/sm86 cubins, "
                          f"kept {kept}", file=sys.stderr)
                    records.append(copy_member(src, info, dst, so))
                continue
            records.append(copy_member(src, info, dst))
        note = (f"sglang-kernel repacked for an H200 (sm90) by golden-replay's "
                f"scripts/gpu_sglang/repack_kernel.py, variant {variant}.\n"
                + ("flash_ops.abi3.so: sm80/sm86 cubins zeroed.\n" if variant == "fa3" else "")
                + "dropped:\n" + "".join(f"  {n}\n" for n in removed)).encode()
        marker = "sgl_kernel/CARRY_VARIANT"
        dst.writestr(zipfile.ZipInfo(marker, date_time=(2026, 1, 1, 0, 0, 0)), note)
        records.append(record_line(marker, hashlib.sha256(note).digest(), len(note)))
        records.append(f"{record_name},,")
        dst.writestr(zipfile.ZipInfo(record_name, date_time=(2026, 1, 1, 0, 0, 0)),
                     "\n".join(records) + "\n")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument("outdir", type=Path)
    args = p.parse_args(argv)
    print(repack(args.wheel, args.variant, args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
