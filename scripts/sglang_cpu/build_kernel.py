"""Build sgl-kernel's CPU extension (only the ops SGLang reaches for the tested models) with
torch.utils.cpp_extension, into a cache directory keyed by everything that goes into the build.

    python build_kernel.py SOURCE_DIR CACHE_DIR   # prints the path of the built common_ops .so

SOURCE_DIR is sgl-kernel's source root (the one holding csrc/cpu and include: the vendored
tarball's python/sglang/kernels/aot, or the same folder of a SGLang checkout). A second run with
the same inputs finds the cached .so and builds nothing. Run by scripts/install_sglang_cpu.sh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The kernels a 2-layer Llama reaches on a CPU without AMX (real-engines.md, SGLang section), and
# their registration (which also holds the module's init).
LLAMA = (HERE / "kvcache_ops.cpp", "csrc/cpu/kvcache.cpp")
# What a Gated DeltaNet hybrid (Qwen3-Next) reaches besides (hybrid_ops.cpp says which op is
# where). These have AVX-512 code only, so they are built only on a CPU with AVX-512 BF16.
HYBRID = (HERE / "hybrid_ops.cpp", "csrc/cpu/mamba/fla.cpp", "csrc/cpu/mamba/conv.cpp",
          "csrc/cpu/norm.cpp")
# The upstream CMakeLists' x86-64 flags on a CPU with AVX-512; on one without (the AMD EPYC
# runners have AVX2 only) x86-64-v3: built with -march=x86-64-v4 there, the compiler's AVX-512
# code killed the loader with SIGILL (exit 132). The AMX flags are upstream's too: vec.h turns on
# its AVX-512 paths (CPU_CAPABILITY_AVX512) only when __AMX_BF16__ is defined, though none of
# these sources holds an AMX instruction (the compiler never emits one on its own) and they run
# on AVX-512 BF16 CPUs without AMX (this project's). kvcache.cpp's copies then take their vector
# loops: the same bytes moved.
AVX512_FLAGS = ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16")
AVX2_FLAGS = ("-march=x86-64-v3",)
AVX512_NEEDS = {"avx512f", "avx512_bf16", "avx512_vnni"}
LDFLAGS = ("-fopenmp", "-lnuma")


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first CPU in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def compile_flags(cpuinfo: str) -> tuple[str, ...]:
    """The compiler flags for the CPU this build runs on (the kernel runs where it is built)."""
    isa = AVX512_FLAGS if has_avx512(cpuinfo) else AVX2_FLAGS
    return ("-O3", "-Wno-unknown-pragmas", *isa, "-fopenmp", "-std=c++17")


def has_avx512(cpuinfo: str) -> bool:
    return AVX512_NEEDS <= cpu_flags(cpuinfo)


def sources_for(cpuinfo: str) -> tuple[Path | str, ...]:
    """What is built: the Llama's kernels everywhere, the hybrid's where they can run."""
    return (*LLAMA, *HYBRID) if has_avx512(cpuinfo) else LLAMA


def machine_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def machine_cflags() -> tuple[str, ...]:
    return compile_flags(machine_cpuinfo())


def machine_sources(source: Path) -> list[Path]:
    return [source / k for k in sources_for(machine_cpuinfo())]  # an absolute path stays itself


def build_key(source: Path) -> str:
    import torch

    digest = hashlib.sha256()
    for path in machine_sources(source):
        digest.update(path.read_bytes())
    for header in sorted((source / "csrc" / "cpu").glob("*.h")):
        digest.update(header.read_bytes())
    digest.update(" ".join((*machine_cflags(), *LDFLAGS, torch.__version__, sys.version)).encode())
    return digest.hexdigest()[:16]


def build(source: Path, cache: Path) -> Path:
    from torch.utils import cpp_extension

    out = cache / build_key(source)
    built = out / "common_ops.so"
    if built.is_file():
        return built
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    cpp_extension.load(
        name="common_ops",
        sources=[str(path) for path in machine_sources(source)],
        extra_cflags=list(machine_cflags()),
        extra_ldflags=list(LDFLAGS),
        extra_include_paths=[str(source / "csrc" / "cpu"), str(source / "include")],
        build_directory=str(work),
        verbose=True,
    )
    (work / "common_ops.so").rename(work / "common_ops.so.done")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (work / "common_ops.so.done").rename(built)
    shutil.rmtree(work, ignore_errors=True)
    return built


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: build_kernel.py SOURCE_DIR CACHE_DIR")
    source, cache = Path(sys.argv[1]), Path(sys.argv[2])
    missing = [k for k in (*LLAMA, *HYBRID) if not (source / k).is_file()]
    if missing:
        sys.exit(f"build_kernel: {source} is not sgl-kernel's source root (missing {missing[0]})")
    print(build(source, cache))


if __name__ == "__main__":
    main()
