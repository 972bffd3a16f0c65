#!/usr/bin/env python3
"""llama.cpp's prompt cache on a GPU: the findings cases on a CUDA build, next to a CPU build.

    python3 scripts/llamacpp_cuda_findings.py --cuda-server BIN --cpu-server BIN --out DIR

Needs a machine with an NVIDIA GPU; scripts/h200_llamacpp.sh builds both servers and runs this.
Every case of scripts/llamacpp_findings.py (CASES) plus CUDA_CASES (tiny-llama-hd64: the CUDA
flash-attention kernels have no 16-wide heads, tiny-llama's size) runs on both builds, the same
way: reference recorded with cache off on the llamacpp-reference profile, replayed one request at
a time on llamacpp-cached. On the CUDA build every launch gets `-ngl 99` (all layers on the GPU).
The CUDA cases run twice, from fresh servers and goldens (is the GPU reference repeatable?). Then
the cross checks: each CUDA reference golden against the CPU one (`golden diff`, no server: only
the device differs), and some goldens of one build replayed on the other build's cached server.

Writes under DIR: cuda/ and cpu/ (one report per case, SUMMARY.json with the commands),
cuda-repeat/SUMMARY.json, cross/ (diff and replay reports), CROSS.json (their essentials),
logs/ (every server's log: which kernels llama.cpp chose). A case that breaks is recorded as an
error in its SUMMARY and the run goes on.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("llamacpp_findings", REPO / "scripts" / "llamacpp_findings.py")
lf = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules.setdefault("llamacpp_findings", lf)
_spec.loader.exec_module(lf)  # type: ignore[union-attr]

Case = lf.Case
FA_OFF = lf.FA_OFF
FA_ON = ("-fa", "on")
GPU_LAYERS = ("-ngl", "99")

# Longer suffixes, to see which kernel a cache hit changes. After a 48-token hit the replay
# evaluates the rest of the prompt as one batch; on an H200 a float32 matrix product over a
# batch of 4..16 tokens takes the MMF kernel (TF32 tensor cores), one of more than 16 cuBLAS
# (float32), one of 1..3 the MMVF kernel (ggml-cuda.cu: ggml_cuda_mul_mat). `s24`: a 24-token
# branch suffix, so a branch's first turn evaluates 24 tokens after the hit instead of 8.
# `ts24`: 24-token follow-up turns, so a history hit leaves 25 tokens to evaluate instead of 9.
SCENARIOS = {**lf.SCENARIOS,
             "branching-s24": lf.BRANCHING.replace("suffix_len = 8\n", "suffix_len = 24\n", 1),
             "history-ts24": lf.HISTORY.replace("turn_suffix_len = 8", "turn_suffix_len = 24")}
CUBLAS_F32 = (("GGML_CUDA_CUBLAS_COMPUTE_TYPE", "f32"),)  # cuBLAS in float32 for f16 inputs too

CUDA_CASES = [
    Case("llama64-branching-fa-off", "tiny-llama-hd64", "branching", FA_OFF, FA_OFF, expect="any"),
    Case("llama64-branching-fa-on", "tiny-llama-hd64", "branching", FA_ON, FA_ON, expect="any"),
    Case("llama64-history-fa-off", "tiny-llama-hd64", "history", FA_OFF, FA_OFF),
    Case("llama64-history-fa-on", "tiny-llama-hd64", "history", FA_ON, FA_ON),
    Case("llama-branching-s24-fa-off", "tiny-llama", "branching-s24", FA_OFF, FA_OFF, expect="any"),
    Case("llama-history-ts24-fa-off", "tiny-llama", "history-ts24", FA_OFF, FA_OFF),
    Case("llama64-branching-s24-fa-off", "tiny-llama-hd64", "branching-s24", FA_OFF, FA_OFF, expect="any"),
    Case("llama64-branching-s24-fa-off-cublas-f32", "tiny-llama-hd64", "branching-s24", FA_OFF, FA_OFF,
         expect="any", env=CUBLAS_F32),
    Case("llama64-branching-s24-fa-on", "tiny-llama-hd64", "branching-s24", FA_ON, FA_ON, expect="any"),
]
ALL_CASES = [*lf.CASES, *CUDA_CASES]
# goldens replayed on the other build's cached server (both directions)
CROSS_REPLAYS = ["llama-branching-fa-off", "llama-history-fa-off", "jamba-history", "mamba2-history",
                 "llama64-branching-fa-on", "llama64-history-fa-on"]


def log(msg: str) -> None:
    print(f"[llamacpp_cuda_findings] {msg}", file=sys.stderr, flush=True)


def run_all(target: Any, out: Path, work: Path, logs: Path) -> dict[str, Any]:
    """Every case on `target`; reports in `out`, goldens kept in `work`, server logs in `logs`."""
    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    lf.write_scenarios(work, out, SCENARIOS)
    summary: dict[str, Any] = {}
    for case in ALL_CASES:
        log(f"case {case.name} on {target.name}")
        try:
            summary[case.name] = lf.run_case(case, work, out, target)
        except Exception as exc:  # keep going: one broken case must not cost the whole GPU run
            summary[case.name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        keep_logs(work, logs, f"{target.name}-{case.name}")
    (out / "SUMMARY.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def keep_logs(work: Path, logs: Path, prefix: str) -> None:
    for profile in ("llamacpp-reference", "llamacpp-cached"):
        src = work / f"{profile}.log"
        if src.is_file():
            shutil.move(str(src), str(logs / f"{prefix}-{profile}.log"))


def diff_goldens(a: Path, b: Path, report: Path) -> dict[str, Any]:
    """`golden diff A B` (A the reference): where and by how much B's bits differ."""
    code, output = lf.golden("diff", str(a), str(b), "--report", str(report))
    if not report.is_file():
        return {"exit": code, "output": output.strip()}
    doc = json.loads(report.read_text())
    s = doc["summary"]
    return {"exit": code, "verdict": doc["verdict"], "requests": s["requests"],
            "requests_diverged": s["requests_diverged"], "max_ulp": s["max_ulp"],
            "first_divergences": {r["id"]: r["first_divergence"] and {
                k: r["first_divergence"][k] for k in ("position", "kind", "ulp")}
                for r in doc["requests"] if not r["passed"]}}


def cross(cuda: Any, cpu: Any, dirs: dict[str, Path], logs: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"diff_cuda_vs_cpu": {}, "diff_cuda_vs_cuda_repeat": {}, "replays": {}}
    out = dirs["out"] / "cross"
    out.mkdir(parents=True, exist_ok=True)
    names = sorted({lf.reference_golden(c, Path(".")).name for c in ALL_CASES})
    for name in names:
        a, b, again = dirs["cuda_work"] / name, dirs["cpu_work"] / name, dirs["repeat_work"] / name
        stem = name.removesuffix(".zarr")
        if a.exists() and b.exists():
            result["diff_cuda_vs_cpu"][stem] = diff_goldens(a, b, out / f"diff-cuda-cpu-{stem}.json")
        if a.exists() and again.exists():
            result["diff_cuda_vs_cuda_repeat"][stem] = diff_goldens(a, again, out / f"diff-cuda-repeat-{stem}.json")
    by_name = {c.name: c for c in ALL_CASES}
    for name in CROSS_REPLAYS:
        case = by_name[name]
        ref = lf.reference_golden(case, Path("."))
        for golden_side, server, work in (("cuda", cpu, dirs["cuda_work"]), ("cpu", cuda, dirs["cpu_work"])):
            key = f"{name}-{golden_side}-golden-on-{server.name}"
            log(f"cross replay {key}")
            try:
                result["replays"][key] = lf.replay_case(case, work / ref.name, out / f"replay-{key}.json",
                                                        work, server)
            except Exception as exc:
                result["replays"][key] = {"error": f"{type(exc).__name__}: {exc}"}
            keep_logs(work, logs, f"cross-{key}")
    return result


def wait_for(path: Path, seconds: float) -> None:
    """The CPU build may still be running (h200_llamacpp.sh builds it while the GPU cases run)."""
    deadline = time.monotonic() + seconds
    while not path.is_file():
        if time.monotonic() > deadline:
            raise SystemExit(f"{path}: not there after {seconds:.0f} s (CPU build failed?)")
        time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cuda-server", type=Path, required=True, help="llama-server built with GGML_CUDA=ON")
    ap.add_argument("--cpu-server", type=Path, required=True, help="llama-server built for the CPU")
    ap.add_argument("--out", type=Path, required=True, help="results folder")
    ap.add_argument("--work", type=Path, help="goldens folder (default: OUT/goldens)")
    ap.add_argument("--wait-cpu", type=float, default=0.0, metavar="S",
                    help="wait up to S seconds for --cpu-server to appear (built meanwhile)")
    args = ap.parse_args(argv)
    if not args.cuda_server.is_file():
        ap.error(f"{args.cuda_server}: no such llama-server")
    work = args.work or args.out / "goldens"
    logs = args.out / "logs"
    cuda = lf.Target("cuda", args.cuda_server, (*lf.THREADS, *GPU_LAYERS))
    cpu = lf.Target("cpu", args.cpu_server)
    for case in ALL_CASES:
        lf.ascii_model(case.model)  # derive the ASCII variants once, before any server starts
    dirs = {"out": args.out, "cuda_work": work / "cuda", "cpu_work": work / "cpu",
            "repeat_work": work / "cuda-repeat"}
    run_all(cuda, args.out / "cuda", dirs["cuda_work"], logs)
    run_all(lf.Target("cuda-repeat", args.cuda_server, cuda.args), args.out / "cuda-repeat",
            dirs["repeat_work"], logs)
    wait_for(args.cpu_server, args.wait_cpu)
    run_all(cpu, args.out / "cpu", dirs["cpu_work"], logs)
    (args.out / "CROSS.json").write_text(json.dumps(cross(cuda, cpu, dirs, logs), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
