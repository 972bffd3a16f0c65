"""Prefill and decode throughput of the embedded hybrid model.

Prefill: `--batch` sequences of `--prompt` tokens in one forward call. Decode: `--decode` steps of
one token per sequence at that batch, past K/V passed as views of preallocated buffers (as a paged
cache would gather them), so the numbers are the model's own cost. Reports wall-clock tokens/s and
tokens per CPU-second of this process (on a shared, loaded machine the wall numbers drop with the
load; the CPU numbers are what an idle machine would show), with the 1-minute load average.

    python3 scripts/bench_engine.py --config tiny --device cpu --batch 9
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay.engine.config import get_config  # noqa: E402
from replay.engine.model import ForwardItem, HybridModel, SSMState, greedy  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=9)
    parser.add_argument("--prompt", type=int, default=576, help="prefill tokens per sequence")
    parser.add_argument("--decode", type=int, default=32, help="decode steps")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    return parser.parse_args()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = get_config(args.config)
    model = HybridModel(config, seed=0, device=args.device)
    device = model.device
    rng = np.random.Generator(np.random.PCG64(0))
    capacity = args.prompt + args.decode
    kv_shape = (args.batch, capacity, config.n_kv_heads, config.head_dim)
    k_cache = [torch.zeros(kv_shape, device=device) for _ in range(config.attn_layers)]
    v_cache = [torch.zeros(kv_shape, device=device) for _ in range(config.attn_layers)]
    ssm: list[list[SSMState]] = [model.empty_ssm() for _ in range(args.batch)]

    def step(tokens: list[torch.Tensor], start: int) -> list[int]:
        items = [
            ForwardItem(
                tokens=tokens[b],
                start=start,
                past_kv=[(k[b, :start], v[b, :start]) for k, v in zip(k_cache, v_cache)],
                ssm=ssm[b],
            )
            for b in range(args.batch)
        ]
        results = model.forward(items)
        n = tokens[0].shape[0]
        for b, result in enumerate(results):
            for layer, (k_new, v_new) in enumerate(result.new_kv):
                k_cache[layer][b, start : start + n] = k_new
                v_cache[layer][b, start : start + n] = v_new
            ssm[b] = result.ssm
        return [greedy(result.logprobs) for result in results]

    warm = [torch.from_numpy(rng.integers(0, config.vocab_size, 8)) for _ in range(args.batch)]
    step(warm, 0)  # warm-up; overwritten below
    ssm = [model.empty_ssm() for _ in range(args.batch)]
    prompts = [torch.from_numpy(rng.integers(0, config.vocab_size, args.prompt)) for _ in range(args.batch)]
    synchronize(device)
    t0, c0 = time.perf_counter(), time.process_time()
    next_tokens = step(prompts, 0)
    synchronize(device)
    prefill_s, prefill_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(args.decode):
        next_tokens = step([torch.tensor([t]) for t in next_tokens], args.prompt + i)
    synchronize(device)
    decode_s, decode_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    report = {
        "config": config.name,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "prompt": args.prompt,
        "decode_steps": args.decode,
        "prefill_tokens_per_s": round(args.batch * args.prompt / prefill_s, 1),
        "decode_tokens_per_s": round(args.batch * args.decode / decode_s, 1),
        "decode_step_ms": round(1000 * decode_s / args.decode, 2),
        # per CPU-second of this process: what the wall numbers become on an otherwise idle machine
        "prefill_tokens_per_cpu_s": round(args.batch * args.prompt / prefill_cpu_s, 1),
        "decode_tokens_per_cpu_s": round(args.batch * args.decode / decode_cpu_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
