"""sgl-kernel's CPU build flags follow the CPU it runs on (scripts/sglang_cpu/build_kernel.py):
built with -march=x86-64-v4 on an AVX2-only AMD EPYC, the kernel's loader died with SIGILL
(exit 132) and every SGLang-CPU test skipped."""

from __future__ import annotations

import importlib.util

from tests.support import paths

SCRIPT = paths.REPO / "scripts" / "sglang_cpu" / "build_kernel.py"
AVX2_CPU = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma bmi1 avx2 bmi2\n"
AVX512_CPU = ("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni avx512_bf16\n")


def build_kernel():
    spec = importlib.util.spec_from_file_location("build_kernel", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cpu_without_avx512_gets_no_avx512_code():
    flags = build_kernel().compile_flags(AVX2_CPU)
    assert "-march=x86-64-v3" in flags and not any("512" in f or "v4" in f for f in flags)


def test_a_cpu_with_avx512_bf16_and_vnni_keeps_the_upstream_flags():
    flags = build_kernel().compile_flags(AVX512_CPU)
    assert {"-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni"} <= set(flags)


def test_the_amx_flags_come_with_avx512_only_since_vec_h_keys_its_avx512_paths_on_them():
    assert {"-mamx-tile", "-mamx-bf16"} <= set(build_kernel().compile_flags(AVX512_CPU))
    assert not any("amx" in f for f in build_kernel().compile_flags(AVX2_CPU))


def test_the_hybrids_gdn_kernels_are_built_on_avx512_and_left_out_on_avx2():
    bk = build_kernel()
    assert set(bk.HYBRID) <= set(bk.sources_for(AVX512_CPU))
    assert bk.sources_for(AVX2_CPU) == bk.LLAMA


def test_an_unreadable_cpuinfo_builds_for_avx2():
    assert "-march=x86-64-v3" in build_kernel().compile_flags("")
