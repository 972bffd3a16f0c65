#!/usr/bin/env python3
"""Parsing one /generate answer, JSON text -> validated arrays, positions per second on one core.

Side by side in one run (compare ratios: the machine is shared and noisy), for a 160-token
answer shaped like SGLang 0.5.23's (float64 values of float32 logprobs, ids from a 150k
vocabulary) at top-k 0, 5 and 20, with top-k nested and flat (base64):
- golden-replay: `parse_text` (typed msgspec decoding + strict validation), what the client runs;
- the alternative that was measured against it: `orjson.loads` + `parse_completion` (the untyped
  strict parser), when orjson is installed;
- the bare decoders alone (no validation): stdlib `json.loads`, `msgspec` untyped, and `orjson`
  when installed;
- the parser of the commit before issue 13 (stdlib json + the old parser), when `--old REV` names
  a git revision to load it from (e.g. `--old 3616fb6`).

    python3 scripts/bench_parse.py [--positions 160] [--seconds 1.0] [--old 3616fb6]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.server.apis.sglang import parse_completion, parse_text  # noqa: E402

VOCAB = 151_936


def answer(n: int, k: int, flat: bool, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    top1 = -rng.exponential(0.6, size=n)
    gaps = rng.exponential(1.5, size=(n, max(k, 1) - 1))
    lps = np.concatenate([top1[:, None], top1[:, None] - np.cumsum(gaps, axis=1)], axis=1)
    lps = lps.astype(np.float32)
    ids = np.stack([rng.choice(VOCAB, size=max(k, 1), replace=False) for _ in range(n)]).astype(np.int32)
    out = ids[:, 0].tolist()
    meta: dict[str, Any] = {
        "id": "0123456789abcdef", "finish_reason": {"type": "length", "length": n},
        "prompt_tokens": 600, "weight_version": "default", "completion_tokens": n,
        "cached_tokens": 512, "cached_tokens_details": {"device": 256, "host": 256},
        "num_retractions": 0,
        "output_token_logprobs": [[float(lp), t, None] for lp, t in zip(lps[:, 0].tolist(), out)],
        "input_token_logprobs": [], "input_top_logprobs": [], "output_token_logprobs_length": n,
        "e2e_latency": 0.41,
    }
    if k and flat:
        meta["output_top_logprobs_val_flat_b64"] = base64.b64encode(lps[:, :k].tobytes()).decode()
        meta["output_top_logprobs_idx_flat_b64"] = base64.b64encode(ids[:, :k].tobytes()).decode()
        meta["output_top_logprobs_val_flat_b64_dtype"] = "float32"
        meta["output_top_logprobs_idx_flat_b64_dtype"] = "int32"
        meta["output_top_logprobs_shape"] = [n, k]
        meta["output_top_logprobs_null_prefix"] = 0
    elif k:
        meta["output_top_logprobs"] = [[[float(v), int(t), None] for v, t in zip(vr, tr)]
                                       for vr, tr in zip(lps[:, :k].tolist(), ids[:, :k].tolist())]
    return json.dumps({"text": "", "output_ids": out, "meta_info": meta}).encode()


def rate(fn: Callable[[], Any], positions: int, seconds: float) -> float:
    """Positions per second: the best of five runs of about seconds/5 each."""
    fn()
    reps, t = 1, 0.0
    while t < 0.02:
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        t = time.perf_counter() - start
        reps *= 2
    reps = max(1, int(reps / 2 * seconds / 5 / t))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps)
    return positions / best


def old_parser(rev: str) -> Callable[..., Any] | None:
    """parse_completion as it was at `rev` (loaded from git into a throwaway module)."""
    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:replay/server/apis/sglang.py"],
                             capture_output=True, text=True, check=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    module = types.ModuleType("old_sglang")
    exec(compile(src, f"{rev}:replay/server/apis/sglang.py", "exec"), module.__dict__)
    return module.parse_completion


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=160)
    ap.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    ap.add_argument("--old", help="git revision whose parser to measure beside today's")
    args = ap.parse_args()
    n = args.positions
    try:
        import orjson
        orjson_loads: Callable[[bytes], Any] | None = orjson.loads
    except ImportError:
        orjson_loads = None
    msgspec_decode = msgspec.json.Decoder().decode
    old = old_parser(args.old) if args.old else None

    cols = ["golden-replay (`parse_text`)"]
    if orjson_loads:
        cols.append("orjson + untyped parser")
    if old:
        cols.append(f"before ({args.old}: json + old parser)")
    cols += ["`json.loads` alone", "`msgspec` untyped alone"]
    if orjson_loads:
        cols.append("`orjson.loads` alone")
    print(f"positions/s, one {n}-token answer, best of 5")
    print()
    print("| top-k | form | answer bytes | " + " | ".join(cols) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in cols) + " |")
    for k in (0, 5, 20):
        for flat in ((False,) if k == 0 else (False, True)):
            raw = answer(n, k, flat)
            text = raw.decode()

            def ours() -> Any:
                return parse_text(text, "r", max_new_tokens=n, top_k=k, vocab_size=VOCAB)

            fns: list[Callable[[], Any]] = [ours]
            if orjson_loads:
                fns.append(lambda: parse_completion(orjson_loads(raw), "r", max_new_tokens=n,
                                                    top_k=k, vocab_size=VOCAB))
            if old:
                fns.append(lambda: old(json.loads(text), "r", max_new_tokens=n, top_k=k,
                                       vocab_size=VOCAB) if not flat else None)
            fns += [lambda: json.loads(text), lambda: msgspec_decode(raw)]
            if orjson_loads:
                fns.append(lambda: orjson_loads(raw))
            rates = [rate(f, n, args.seconds) for f in fns]
            cells = [f"{r / 1e6:.3f} M" for r in rates]
            if old and flat:
                cells[2 if orjson_loads else 1] = "(no flat form)"
            print(f"| {k} | {'flat b64' if flat else 'nested'} | {len(raw):,} | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
