"""This checkout's transport against another checkout's, paired and interleaved in one process.

Both `ServerClient`s (this tree's replay/server/transport.py and BASELINE/replay/server/transport.py) POST the same
precomputed /generate answer from one in-process aiohttp server, in alternating rounds, and the
answers are parsed by this tree's strict parser. On a shared machine a paired median is the only
fair way to see a few-percent difference (the hardening of issue 14: bounded reads, redirects
refused, secrets scrubbed).

Usage: python3 scripts/bench_transport_pair.py --baseline /path/to/other/checkout [--top-k 20]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time

import numpy as np
from aiohttp import web

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import replay.server.transport as this_client  # noqa: E402
from replay.server.apis.sglang import generate_body, parse_completion  # noqa: E402


def load_baseline(root: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("baseline_client",
                                                  os.path.join(root, "replay", "client.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["baseline_client"] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def answer(n: int, k: int) -> bytes:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4000, n).tolist()
    lps = [float(np.float32(-x)) for x in rng.random(n)]
    return json.dumps({"text": "", "output_ids": ids, "meta_info": {
        "finish_reason": {"type": "length"}, "prompt_tokens": 600, "cached_tokens": 0,
        "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)],
        "output_top_logprobs": [[[lp - j, (t + j) % 4000, None] for j in range(k)]
                                for lp, t in zip(lps, ids)] if k else None}}).encode()


async def run(baseline, n: int, k: int, requests: int, rounds: int) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    body_bytes = answer(n, k)

    async def generate(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body_bytes, content_type="application/json")

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    body = generate_body(np.arange(600, dtype=np.int32), n, k)
    rates: dict[str, list[float]] = {"this checkout": [], "baseline": []}
    pairs = [("this checkout", this_client), ("baseline", baseline)]
    for r in range(rounds):
        for name, module in (pairs if r % 2 == 0 else pairs[::-1]):
            async with module.ServerClient(url, module.ClientOptions(concurrency=32)) as client:
                async def one(i: int) -> None:
                    raw = await client.post("/generate", body, f"r{i}")
                    parse_completion(raw, f"r{i}", max_new_tokens=n, top_k=k, vocab_size=4096)
                t = time.perf_counter()
                await asyncio.gather(*(one(i) for i in range(requests)))
                rates[name].append(requests / (time.perf_counter() - t))
    await runner.cleanup()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", required=True, help="another checkout of golden-replay")
    parser.add_argument("--top-k", type=int, nargs="+", default=[0, 20])
    parser.add_argument("--positions", type=int, default=160)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    baseline = load_baseline(args.baseline)
    print("| top-k | answer bytes | this checkout req/s (median) | baseline req/s (median) |")
    print("| --- | --- | --- | --- |")
    for k in args.top_k:
        rates = asyncio.run(run(baseline, args.positions, k, args.requests, args.rounds))
        print(f"| {k} | {len(answer(args.positions, k)):,} | "
              f"{statistics.median(rates['this checkout']):,.0f} | "
              f"{statistics.median(rates['baseline']):,.0f} |")


if __name__ == "__main__":
    main()
