#!/usr/bin/env python3
"""The whole client's CPU cost per output position, and diff throughput.

1. Whole client: `golden replay` as a real process against a stub that answers instantly (its
   own process, one precomputed answer per top-k form, so the stub costs the client nothing),
   256-token answers, at top-k 0 and 20 (flat base64, and nested for comparison). The client's
   CPU time comes from its own rusage (`wait4`); start-up (imports, reading the golden, opening
   the connection) is removed by running the same replay at two sizes and dividing the
   difference in positions by the difference in CPU seconds. The golden is recorded first
   against the same stub (`golden record`), so every replayed answer is identical and judged
   in full.
   With `--baseline DIR` the same measurement runs, in the same run, with the `golden` of
   another checkout (e.g. the commit before this work), which asks for nested top-k.
2. Diff: positions/s of replay.judge.diff.diff_outputs versus a per-position Python loop.

Usage: python3 scripts/bench_client.py [--requests 64 512] [--positions 256] [--concurrency 32]
                                       [--baseline /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replay.judge.diff import Policy, diff_outputs  # noqa: E402

VOCAB = 151_936


def canned(n: int, k: int, flat: bool) -> bytes:
    """One /generate answer: greedy, top-1 = the chosen token, float32 logprobs."""
    rng = np.random.default_rng(0)
    top1 = -rng.exponential(0.6, size=n)
    gaps = rng.exponential(1.5, size=(n, max(k, 1) - 1))
    lps = np.concatenate([top1[:, None], top1[:, None] - np.cumsum(gaps, axis=1)], axis=1)
    lps = lps.astype(np.float32)
    ids = np.stack([rng.choice(VOCAB, size=max(k, 1), replace=False) for _ in range(n)]).astype(np.int32)
    out = ids[:, 0].tolist()
    meta: dict = {"id": "x", "finish_reason": {"type": "length", "length": n},
                  "prompt_tokens": 100, "completion_tokens": n, "cached_tokens": 0,
                  "cached_tokens_details": None, "num_retractions": 0,
                  "output_token_logprobs": [[float(v), t, None] for v, t in zip(lps[:, 0].tolist(), out)],
                  "e2e_latency": 0.0}
    if k and flat:
        meta.update({
            "output_top_logprobs_val_flat_b64": base64.b64encode(lps[:, :k].tobytes()).decode(),
            "output_top_logprobs_idx_flat_b64": base64.b64encode(ids[:, :k].tobytes()).decode(),
            "output_top_logprobs_val_flat_b64_dtype": "float32",
            "output_top_logprobs_idx_flat_b64_dtype": "int32",
            "output_top_logprobs_shape": [n, k], "output_top_logprobs_null_prefix": 0})
    elif k:
        meta["output_top_logprobs"] = [[[float(v), int(t), None] for v, t in zip(vr, tr)]
                                       for vr, tr in zip(lps[:, :k].tolist(), ids[:, :k].tolist())]
    return json.dumps({"text": "", "output_ids": out, "meta_info": meta}).encode()


def serve(port: int, n: int, k: int, nested_only: bool) -> None:
    from aiohttp import web
    answers = {False: canned(n, k, False), True: canned(n, k, True)}
    info = json.dumps({"model_path": "bench/stub", "vocab_size": VOCAB, "page_size": 1,
                       "disable_radix_cache": True}).encode()

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        flat = bool(body.get("return_flat_raw_output_top_logprobs")) and not nested_only
        return web.Response(body=answers[flat], content_type="application/json")

    async def json_info(request: web.Request) -> web.Response:
        return web.Response(body=info, content_type="application/json")

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/generate", generate)
    app.router.add_get("/server_info", json_info)
    app.router.add_get("/model_info", json_info)
    app.router.add_route("*", "/flush_cache", ok)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int) -> None:
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("stub did not start")


def golden_process(args: list[str], repo: Path) -> tuple[float, int]:
    """CPU seconds (user + system) and exit code of one `golden` subprocess of checkout `repo`."""
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=repo,
                            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(repo)})
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def whole_client(requests: list[int], n: int, k: int, nested_only: bool, concurrency: int,
                 work: Path, repo: Path = REPO) -> tuple[float, list[float]]:
    """Positions per client CPU-second beyond start-up, and the CPU seconds of each size."""
    port = free_port()
    stub = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--positions",
                             str(n), "--k", str(k)] + (["--nested-only"] if nested_only else []))
    try:
        wait_up(port)
        url = f"http://127.0.0.1:{port}"
        cpu = []
        for r in requests:
            scenario = work / f"s{r}.toml"
            scenario.write_text(f"groups = {r}\nbranches = 1\nprefix_len = 64\nsuffix_len = 16\n"
                                f"turns = 0\nturn_suffix_len = 8\nmax_new_tokens = {n}\n"
                                f"top_k = {k}\ntoken_hi = 4000\n")
            golden = work / f"g{r}-{k}.zarr"
            _, rc = golden_process(["record", "--server", url, "--scenario", str(scenario),
                                    "--out", str(golden), "--force", "-q", "--concurrency",
                                    str(concurrency)], repo)
            if rc != 0:
                raise RuntimeError(f"record exited {rc}")
            seconds, rc = golden_process(["replay", str(golden), "--server", url, "-q",
                                          "--concurrency", str(concurrency),
                                          "--expect-cache", "none"], repo)
            if rc != 0:
                raise RuntimeError(f"replay exited {rc}")
            cpu.append(seconds)
    finally:
        stub.terminate()
        stub.wait()
    positions = (requests[1] - requests[0]) * n
    return positions / (cpu[1] - cpu[0]), cpu


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


def bench_diff(positions: int) -> tuple[float, float, float]:
    """Positions/s: identical outputs (the short path), outputs whose last logprob differs by
    one bit (the full path), and the per-position loop."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 4000, positions).astype(np.int32)
    lps = rng.random(positions).astype(np.float32).astype(np.float64)
    drifted = lps.copy()
    drifted[-1] = np.nextafter(drifted[-1], 0)
    rates = []
    for replay_lps in (lps.copy(), drifted):
        g, r = Out(ids, lps), Out(ids.copy(), replay_lps)
        t = time.perf_counter()
        diff_outputs(g, r, Policy("exact"))
        rates.append(positions / (time.perf_counter() - t))
    t = time.perf_counter()
    loop_diff(ids, lps, ids.copy(), lps.copy())
    return rates[0], rates[1], positions / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, nargs=2, default=[64, 512])
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--baseline", type=Path, help="another checkout to measure beside this one")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--nested-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.positions, args.k, args.nested_only)
        return
    n = args.positions
    small, big = args.requests
    print(f"| client | top-k | form | replay CPU s ({small} req) | replay CPU s ({big} req) | "
          "positions per CPU-second beyond start-up |")
    print("| --- | --- | --- | --- | --- | --- |")
    runs = [("this checkout", REPO, k, nested) for k, nested in ((0, False), (20, False), (20, True))]
    if args.baseline:
        runs += [(f"baseline {args.baseline}", args.baseline.resolve(), k, False) for k in (0, 20)]
    with tempfile.TemporaryDirectory() as d:
        for label, repo, k, nested_only in sorted(runs, key=lambda r: (r[2], r[3], r[0])):
            rate, cpu = whole_client(args.requests, n, k, nested_only, args.concurrency, Path(d),
                                     repo)
            form = "-" if k == 0 else ("nested" if nested_only or repo != REPO else "flat b64")
            print(f"| {label} | {k} | {form} | {cpu[0]:.2f} | {cpu[1]:.2f} | {rate:,.0f} |",
                  flush=True)
    print()
    print("| diff | positions/s |")
    print("| --- | --- |")
    same, drift, loop = bench_diff(100_000)
    print(f"| replay.judge.diff.diff_outputs, identical (short path) | {same:,.0f} |")
    print(f"| replay.judge.diff.diff_outputs, last logprob differs (full path) | {drift:,.0f} |")
    print(f"| per-position Python loop | {loop:,.0f} |")
    print(f"| full path / loop | {drift / loop:.1f}x |")


if __name__ == "__main__":
    main()
