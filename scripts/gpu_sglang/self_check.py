#!/usr/bin/env python3
"""The carried SGLang's self-check: which versions Python sees, that every carried wheel's
requirements are met by the carry plus the image, and that SGLang 0.5.17's server modules import.

Run on the H200 by install_on_device.sh (``PYTHONPATH=/tmp/site python3 self_check.py /tmp/site``)
and offline by check_imports.py (which fakes CUDA first), so both import the same list.

Why each check: the carry shadows image packages (transformers 5.17.0 -> 5.12.1, tokenizers), so
the versions line shows the shadowing worked; a requirement the image meets in the wrong version
(say typing-extensions too old for the carried pydantic) is named here instead of surfacing as an
ImportError deep in a server start; the module imports are what ``sglang.launch_server`` and its
scheduler/tokenizer/detokenizer processes import for a Llama or Qwen3-Next model on the triton
(and, when flash_ops is carried, fa3) attention backend, with HiCache; and, when sglang-router is
carried (build_carry.sh --with-router), the router's launcher and its Rust extension.

Prints one ``self-check: ok ...`` line last, or ``self-check: FAILED ...`` with exit status 1.
usage: self_check.py SITE [--no-imports]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import sys
import time
import traceback
from pathlib import Path

VERSIONS = ("sglang", "sglang-kernel", "flashinfer-python", "torch", "triton", "transformers",
            "tokenizers", "xgrammar", "pydantic", "fastapi", "uvicorn", "numpy", "zarr",
            "sglang-router")

SERVER_MODULES = (
    "sglang.launch_server",
    "sglang.srt.server_args",
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.cache_controller",
    "sglang.srt.mem_cache.radix_cache",
    "sglang.srt.mem_cache.hiradix_cache",
    "sglang.srt.mem_cache.memory_pool_host",
    "sglang.srt.mem_cache.mamba_radix_cache",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_loader.loader",
    "sglang.srt.layers.sampler",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.layers.attention.hybrid_linear_attn_backend",
    "sglang.srt.models.llama",
    "sglang.srt.models.qwen3_next",
    "sglang.srt.configs.model_config",
    "sglang.test.test_deterministic",
)
FA3_MODULES = ("sglang.srt.layers.attention.flashattention_backend",)
ROUTER_MODULES = ("sglang_router.launch_router", "sglang_router.sglang_router_rs")
# golden-replay itself, as `python3 -m cli record/replay` runs there (zarr, msgspec, pybase64 carried)
GOLDEN_MODULES = ("cli.main", "cli.record_cmd", "cli.replay_cmd", "replay.golden.store",
                  "replay.server.launch", "replay.server.topology")
REPO = Path(__file__).resolve().parents[2]


def versions() -> str:
    out = []
    for name in VERSIONS:
        try:
            out.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            out.append(f"{name} MISSING")
    return ", ".join(out)


def carried_dists(site: Path) -> list[md.Distribution]:
    return [md.PathDistribution(p) for p in sorted(site.glob("*.dist-info"))]


# SGLang pins exact versions of much it does not import for this server (numba==0.65.1,
# timm==1.0.16 ...), which the image has in other versions: a wrong version of those is only
# reported. These of its pins it does import: a wrong version of them fails the check.
SGLANG_CORE_PINS = {"torch", "transformers", "sglang-kernel", "flashinfer-python", "xgrammar",
                    "openai", "apache-tvm-ffi", "torchaudio", "soundfile"}


def requirement_problems(site: Path) -> tuple[list[str], list[str], list[str]]:
    """(conflicts, loose, absent): a requirement of a carried wheel met by a wrong version (loose:
    one of SGLang's pins outside SGLANG_CORE_PINS), and one met by nothing (SGLang lists many it
    does not import for this server: those are only listed)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    conflicts, loose, absent = [], [], []
    for dist in carried_dists(site):
        who = f"{dist.metadata['Name']} {dist.version}"
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                have = md.version(req.name)
            except md.PackageNotFoundError:
                absent.append(f"{who} -> {req}")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                bad = f"{who} needs {req}, sees {req.name} {have}"
                is_loose = (canonicalize_name(dist.metadata["Name"]) == "sglang"
                            and canonicalize_name(req.name) not in SGLANG_CORE_PINS)
                (loose if is_loose else conflicts).append(bad)
    return conflicts, loose, absent


def has_fa3() -> bool:
    import importlib.util

    spec = importlib.util.find_spec("sgl_kernel")
    return bool(spec and spec.origin and (Path(spec.origin).parent / "flash_ops.abi3.so").exists())


def has_router() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang_router") is not None


def modules_to_import() -> tuple[str, ...]:
    """SGLang's server modules (fa3's and the router's too when carried) and golden-replay's
    (its repo on the path)."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    return (SERVER_MODULES + (FA3_MODULES if has_fa3() else ())
            + (ROUTER_MODULES if has_router() else ()) + GOLDEN_MODULES)


def import_all(modules: tuple[str, ...]) -> list[str]:
    failures = []
    for name in modules:
        start = time.monotonic()
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - a SystemExit at import is a failure too
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            print(f"  import {name}: FAILED\n" + traceback.format_exc(limit=-3), file=sys.stderr)
            continue
        print(f"  import {name}: ok ({time.monotonic() - start:.1f} s)", file=sys.stderr)
    return failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("site", type=Path, help="the folder the carried wheels were installed into")
    p.add_argument("--no-imports", action="store_true", help="versions and requirements only")
    args = p.parse_args(argv)
    print("versions:", versions())
    conflicts, loose, absent = requirement_problems(args.site)
    for line in conflicts:
        print("  requirement conflict:", line)
    for line in loose:
        print("  other version (SGLang pins it, does not import it here):", line)
    print(f"requirements: {len(conflicts)} conflicts, {len(loose)} other versions of SGLang's "
          f"non-core pins, {len(absent)} absent "
          f"(not carried; absent ones SGLang's server does not import show no failure below)")
    print("  absent:", "; ".join(absent) or "none")
    failures: list[str] = []
    if not args.no_imports:
        modules = modules_to_import()
        print(f"importing {len(modules)} server modules (fa3 {'carried' if has_fa3() else 'not carried'})")
        failures = import_all(modules)
    problems = [f"requirement: {c}" for c in conflicts] + [f"import {f}" for f in failures]
    if problems:
        print("self-check: FAILED: " + " | ".join(problems))
        return 1
    print(f"self-check: ok ({len(carried_dists(args.site))} carried distributions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
