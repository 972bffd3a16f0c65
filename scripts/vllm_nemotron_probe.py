#!/usr/bin/env python3
"""The smallest repro of vLLM's NemotronH prefix-caching crash (docs/findings.md, vLLM): on one
vllm-prefix-cache server with tiny-nemotron-h, two concurrent 100-token prompts (inside one
128-token Mamba-2 chunk) answer 200, then two concurrent 416-token prompts kill the engine
(HTTP 500; IndexError in mamba_mixer2.py:880). Sent one at a time, prompts of 128-416 tokens all
answer 200. `python scripts/vllm_nemotron_probe.py` (prints one line per pair)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_hf_models  # noqa: E402

import json, pathlib, urllib.request, concurrent.futures as cf
from replay.server.launch import launched
from replay.server.profile import load_profile
def post(url, body):
    r = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=300) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return repr(e)[:80]
model = str(make_tiny_hf_models.make("tiny-nemotron-h"))
with launched(load_profile("vllm-prefix-cache"), model=model, log_path=pathlib.Path("golden-logs/nemotron-probe.log")) as url:
    for k, n in ((2, 100), (2, 416)):
        bodies = [{"prompt": [3 + (j * 7 + i) % 2000 for i in range(n)], "max_tokens": 1, "temperature": 0} for j in range(k)]
        with cf.ThreadPoolExecutor(k) as ex:
            st = list(ex.map(lambda b: post(url + "/v1/completions", b), bodies))
        print(k, "concurrent of", n, st, flush=True)
        if any(s != 200 for s in st):
            break
