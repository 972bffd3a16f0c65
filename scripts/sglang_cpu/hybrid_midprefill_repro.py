"""The smallest reproduction of the hybrid's mid-decode finding (docs/sglang-cpu.md, "The
hybrid"), without golden-replay: against a running SGLang server with the radix cache off, a
request A (300 random token ids, 64 greedy tokens, top-5 logprobs) is sent alone, then again
with request B's prefill (600 ids) sent DELAY seconds after A started, so that B lands while A
decodes. Prints, per delay, "identical" or the first output position whose top-5 differ.

    python scripts/sglang_cpu/hybrid_midprefill_repro.py URL [DELAY ...]   # default 0.3 0.6

Standard library only. Seen on SGLang 0.5.23's CPU server with the tiny Qwen3-Next, on a CPU
without AMX, before replay/sglang_cpu/hybrid.py gave the Mamba pool the conv-state layout SGLang
gives only AMX CPUs: every try at delays of 0.3-0.6 s differed (6 of 6, with and without the
weight packing), at output positions 23-52, A's top-5 there sharing no id with its top-5 alone;
with that layout, 0 of 12 at 0.1-1.2 s.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import urllib.request


def generate(url: str, ids: list[int], new_tokens: int) -> list[list]:
    body = {"input_ids": ids, "return_logprob": True, "top_logprobs_num": 5,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0,
                                "ignore_eos": True}}
    request = urllib.request.Request(f"{url}/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())["meta_info"]["output_top_logprobs"]


def first_difference(alone: list[list], joined: list[list]) -> int | None:
    for position, (a, b) in enumerate(zip(alone, joined)):
        if {(t[1], t[0]) for t in a} != {(t[1], t[0]) for t in b}:
            return position
    return None


def run(url: str, delay: float) -> str:
    rng = random.Random(0)
    a = [rng.randrange(3, 4096) for _ in range(300)]
    b = [rng.randrange(3, 4096) for _ in range(600)]
    alone = generate(url, a, 64)
    joined: list[list] = []
    thread = threading.Thread(target=lambda: joined.extend(generate(url, a, 64)))
    thread.start()
    time.sleep(delay)
    generate(url, b, 4)
    thread.join()
    position = first_difference(alone, joined)
    if position is None:
        return "identical"
    shared = {t[1] for t in alone[position]} & {t[1] for t in joined[position]}
    return f"differs at {position} (top-5 ids in common: {len(shared)})"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    url, delays = argv[0].rstrip("/"), [float(d) for d in argv[1:]] or [0.3, 0.6]
    for delay in delays:
        print(f"delay {delay}: {run(url, delay)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
