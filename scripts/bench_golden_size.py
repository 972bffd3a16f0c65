#!/usr/bin/env python3
"""How big is a golden? Bytes per output token, zarr golden vs gzip'd SGLang JSON responses.

Goldens are committed to git, so their size matters. This builds the request tree of a preset
scenario, fills it with synthetic outputs shaped like a real recording (float32 logprobs with full
mantissas, descending top-k, random token ids from a 150k vocabulary), writes it with
`write_golden`, and compares its size with the same outputs as SGLang `/generate` JSON responses
(one per request, `output_token_logprobs` and `output_top_logprobs` as nested lists, numbers
printed the way Python's json prints the float64 value of a float32), raw and gzip -9.

The synthetic logprobs are a stand-in: a real model's outputs repeat more (greedy loops), which
helps both formats. The JSON side is generous to JSON: it carries no input tokens and empty
"text", while the golden also stores every input token and all metadata.

    python scripts/bench_golden_size.py [--scenario hicache-branching] [--top-k 5] [--seed 0]
    python scripts/bench_golden_size.py --golden goldens/hicache-branching.zarr   # a real one
    python scripts/bench_golden_size.py --table   # top-k 0, 5, 20: synthetic and real, one table
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.golden.model import Golden, RecordedRequest  # noqa: E402
from replay.golden.store import read_golden, write_golden  # noqa: E402
from replay.golden.scenario import build_plan, load_scenario, with_overrides  # noqa: E402

VOCAB = 151_936


def synthetic_outputs(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """output_ids [n], top_ids [n, max(k,1)], top_logprobs [n, max(k,1)] (float64 of float32)."""
    width = max(k, 1)
    top1 = -rng.exponential(0.6, size=n)
    gaps = rng.exponential(1.5, size=(n, width - 1))
    top_lp = np.concatenate([top1[:, None], top1[:, None] - np.cumsum(gaps, axis=1)], axis=1)
    top_lp = top_lp.astype(np.float32).astype(np.float64)
    top_ids = np.stack([rng.choice(VOCAB, size=width, replace=False) for _ in range(n)]).astype(np.int32)
    return top_ids[:, 0].copy(), top_ids, top_lp


def build_golden(scenario: str, top_k: int | None, seed: int) -> Golden:
    spec = with_overrides(load_scenario(scenario), top_k=top_k)
    plan = build_plan(spec)
    rng = np.random.default_rng(seed)
    requests = []
    for p in plan.requests:
        out_ids, top_ids, top_lp = synthetic_outputs(rng, p.max_new_tokens, spec.top_k)
        requests.append(RecordedRequest(
            id=p.id, group=p.group, branch=p.branch, turn=p.turn, parent=p.parent,
            new_tokens=p.new_tokens, max_new_tokens=p.max_new_tokens, output_ids=out_ids,
            logprobs=top_lp[:, 0].copy(),
            top_ids=top_ids if spec.top_k else None,
            top_logprobs=top_lp if spec.top_k else None,
            cached_tokens=0, cached_details={}, finish_reason="length",
        ))
    return Golden(
        scenario=spec.to_dict(), prefixes=plan.prefixes, requests=requests,
        sampling={"temperature": 0, "ignore_eos": True},
        meta={"server_url": "http://127.0.0.1:30000", "tool_version": "bench",
              "server_info": {"page_size": 64, "disable_radix_cache": True}},
    )


def sglang_json(golden: Golden, prompt_lens: list[int]) -> bytes:
    """The responses as SGLang /generate would send them, one JSON list."""
    responses = []
    for r, plen in zip(golden.requests, prompt_lens):
        lps = r.logprobs.tolist()
        ids = r.output_ids.tolist()
        meta = {
            "id": r.id, "finish_reason": {"type": "length", "length": len(ids)},
            "prompt_tokens": plen, "completion_tokens": len(ids), "cached_tokens": r.cached_tokens,
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)],
        }
        if r.top_ids is not None and r.top_logprobs is not None:
            meta["output_top_logprobs"] = [
                [[lp, t, None] for lp, t in zip(lrow, trow)]
                for lrow, trow in zip(r.top_logprobs.tolist(), r.top_ids.tolist())
            ]
        meta["e2e_latency"] = 0.41
        responses.append({"text": "", "output_ids": ids, "meta_info": meta})
    return json.dumps(responses).encode()


def tree_bytes(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def measure(golden: Golden) -> tuple[int, int, float, float]:
    """Bytes, files, write seconds, read+verify seconds of the golden as this tool writes it."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_golden(golden, Path(tmp) / "bench.zarr")
        t1 = time.perf_counter()
        read_golden(path)
        t2 = time.perf_counter()
        n_files, size = tree_bytes(path)
    return size, n_files, t1 - t0, t2 - t1


def with_top_k(golden: Golden, k: int) -> Golden:
    """The golden with its top-k cut to the first k ranks (0: none)."""
    return dataclasses.replace(golden, requests=[dataclasses.replace(
        r, top_ids=r.top_ids[:, :k] if k and r.top_ids is not None else None,
        top_logprobs=r.top_logprobs[:, :k] if k and r.top_logprobs is not None else None)
        for r in golden.requests])


def table(scenario: str, seed: int, real: Path) -> None:
    print("| golden | top-k | bytes | files | B/output token | write s | read+verify s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for k in (0, 5, 20):
        golden = build_golden(scenario, k, seed)
        tokens = sum(len(r.output_ids) for r in golden.requests)
        size, files, w, r = measure(golden)
        print(f"| {scenario}, synthetic, 150k vocabulary | {k} | {size:,} | {files} | "
              f"{size / tokens:.2f} | {w:.2f} | {r:.2f} |")
    recorded = read_golden(real)
    tokens = sum(len(r.output_ids) for r in recorded.requests)
    files, size = tree_bytes(real)
    name = real.name
    schema = json.loads((real / "zarr.json").read_text())["attributes"]["schema"]
    print(f"| {name} as stored ({schema}) | {recorded.top_k} | {size:,} | {files} | "
          f"{size / tokens:.2f} | - | - |")
    for k in sorted({0, recorded.top_k}):
        size, files, w, r = measure(with_top_k(recorded, k))
        print(f"| {name} rewritten by this tool | {k} | {size:,} | {files} | {size / tokens:.2f} "
              f"| {w:.2f} | {r:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="hicache-branching")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--golden", type=Path, help="measure a real golden instead of synthetic outputs")
    ap.add_argument("--table", action="store_true",
                    help="top-k 0, 5, 20 (synthetic) and the real golden (default "
                         "goldens/hicache-branching.zarr) at top-k 0 and its own, one table")
    args = ap.parse_args()
    if args.table:
        table(args.scenario, args.seed,
              args.golden or Path(__file__).resolve().parents[1] / "goldens/hicache-branching.zarr")
        return

    golden = read_golden(args.golden) if args.golden else build_golden(args.scenario, args.top_k, args.seed)
    if args.golden:
        args.scenario = f"{golden.scenario['name']} (real recording {args.golden})"
    tokens = sum(len(r.output_ids) for r in golden.requests)
    prompt_lens = [len(golden.input_ids(i)) for i in range(len(golden.requests))]
    raw = sglang_json(golden, prompt_lens)
    gz = gzip.compress(raw, compresslevel=9)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_golden(golden, Path(tmp) / "bench.zarr")
        t1 = time.perf_counter()
        read_golden(path)
        t2 = time.perf_counter()
        n_files, size = tree_bytes(path)
        arrays = {d.name: tree_bytes(d)[1] for d in sorted(path.iterdir()) if d.is_dir()}
        root_meta = (path / "zarr.json").stat().st_size

    print(f"scenario {args.scenario}: {len(golden.requests)} requests, {tokens} output tokens, "
          f"top-k {golden.top_k}, {sum(prompt_lens)} input tokens (stored once as a tree: "
          f"{sum(len(p) for p in golden.prefixes) + sum(len(r.new_tokens) for r in golden.requests)})")
    print(f"golden (zarr, zstd):  {size:>9} B in {n_files} files  {size / tokens:7.2f} B/token  "
          f"(write {t1 - t0:.2f} s, read+verify {t2 - t1:.2f} s)")
    for name, b in arrays.items():
        print(f"    {name:<18} {b:>9} B")
    print(f"    {'zarr.json (root)':<18} {root_meta:>9} B")
    print(f"SGLang JSON, raw:     {len(raw):>9} B              {len(raw) / tokens:7.2f} B/token")
    print(f"SGLang JSON, gzip -9: {len(gz):>9} B              {len(gz) / tokens:7.2f} B/token")
    print(f"golden / gzip'd JSON: {size / len(gz):.2f}")


if __name__ == "__main__":
    main()
