"""Client overhead and diff throughput, side by side in one run (ratios, not absolute times).

1. Client: requests/s and logprob positions parsed/s against a zero-work stub server (a separate
   process that answers every /generate with a precomputed response), at top-k 0 and 20:
   golden-replay's async client (aiohttp, strict parser) versus the way SGLang's test harness
   does it (sync `requests`, one batched POST with a list of input_ids, plain json).
2. Diff: positions/s of replay.diff.diff_outputs versus a per-position Python loop.

Usage: python3 scripts/bench_client.py [--requests 256] [--positions 160] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from replay.client import ClientOptions, ServerClient  # noqa: E402
from replay.diff import Policy, diff_outputs  # noqa: E402
from replay.apis.sglang import generate_body, parse_completion  # noqa: E402


def canned_response(n: int, k: int) -> dict:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4000, n).tolist()
    lps = [float(np.float32(-x)) for x in rng.random(n)]
    return {"text": "", "output_ids": ids, "meta_info": {
        "finish_reason": {"type": "length", "length": n}, "prompt_tokens": 600,
        "cached_tokens": 0, "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)],
        "output_top_logprobs": [[[lp - j, (t + j) % 4000, None] for j in range(k)]
                                for lp, t in zip(lps, ids)] if k else None}}


def serve(port: int, n: int, k: int) -> None:
    from aiohttp import web
    single = json.dumps(canned_response(n, k))

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        if isinstance(body["input_ids"][0], list):
            text = "[" + ",".join([single] * len(body["input_ids"])) + "]"
        else:
            text = single
        return web.Response(text=text, content_type="application/json")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/generate", generate)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("stub did not start")


async def ours(url: str, requests: int, n: int, k: int, concurrency: int) -> float:
    body = generate_body(np.arange(600, dtype=np.int32), n, k)
    async with ServerClient(url, ClientOptions(concurrency=concurrency)) as client:
        async def one(i: int) -> None:
            raw = await client.post("/generate", body, f"r{i}")
            parse_completion(raw, f"r{i}", max_new_tokens=n, top_k=k, vocab_size=4096)
        t = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(requests)))
        return time.perf_counter() - t


def sglang_way(url: str, requests: int, n: int, k: int) -> float:
    import requests as rq
    body = {"input_ids": [list(range(600))] * requests,
            "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
            "return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": k}
    t = time.perf_counter()
    out = rq.post(url + "/generate", json=body, timeout=600).json()
    for o in out:  # what the harness keeps: the logprob values
        [x[0] for x in o["meta_info"]["output_token_logprobs"]]
    return time.perf_counter() - t


def loop_diff(g_ids, g_lp, r_ids, r_lp) -> int:
    for i in range(len(g_ids)):
        if g_ids[i] != r_ids[i]:
            return i
        if np.float64(g_lp[i]).tobytes() != np.float64(r_lp[i]).tobytes():
            return i
    return -1


class Out:
    def __init__(self, ids, lps, top_ids=None, top_lps=None):
        self.output_ids, self.logprobs, self.top_ids, self.top_logprobs = ids, lps, top_ids, top_lps


def bench_diff(positions: int) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 4000, positions).astype(np.int32)
    lps = rng.random(positions).astype(np.float32).astype(np.float64)
    g, r = Out(ids, lps), Out(ids.copy(), lps.copy())
    t = time.perf_counter()
    diff_outputs(g, r, Policy("exact"))
    vec = time.perf_counter() - t
    t = time.perf_counter()
    loop_diff(ids, lps, ids.copy(), lps.copy())
    loop = time.perf_counter() - t
    return positions / vec, positions / loop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--positions", type=int, default=160)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.positions, args.k)
        return
    n = args.positions
    print("| top-k | client | requests/s | positions parsed/s |")
    print("| --- | --- | --- | --- |")
    for k in (0, 20):
        port = free_port()
        proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--positions",
                                 str(n), "--k", str(k)])
        try:
            wait_up(port)
            url = f"http://127.0.0.1:{port}"
            asyncio.run(ours(url, 8, n, k, args.concurrency))  # warm-up
            t_ours = asyncio.run(ours(url, args.requests, n, k, args.concurrency))
            t_sg = sglang_way(url, args.requests, n, k)
        finally:
            proc.terminate()
            proc.wait()
        for name, t in (("golden-replay (aiohttp, strict parse)", t_ours),
                        ("SGLang harness style (requests, batched)", t_sg)):
            print(f"| {k} | {name} | {args.requests / t:,.0f} | {args.requests * n / t:,.0f} |")
    print()
    print("| diff | positions/s |")
    print("| --- | --- |")
    vec, loop = bench_diff(100_000)
    print(f"| replay.diff.diff_outputs (vectorized) | {vec:,.0f} |")
    print(f"| per-position Python loop | {loop:,.0f} |")
    print(f"| ratio | {vec / loop:.1f}x |")


if __name__ == "__main__":
    main()
