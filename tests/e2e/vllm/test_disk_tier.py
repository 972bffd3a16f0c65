"""A REAL vLLM (CPU) with a disk KV tier (vllm-disk-tier: ExampleConnector writes each prompt's KV
to files and loads a stored prefix back). The flush before repeat 2 empties the device cache but
not the files, so repeat 2 is served from disk: `--require-tier storage` must be met (counted
from vLLM's per-source /metrics) and the bf16 replay stays bit-exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.vllm import kit

pytestmark = kit.skip_without_vllm()


@pytest.fixture(scope="module")
def disk_replay(vllm_work: Path, llama_bf16: tuple[Path, str]) -> tuple[int, dict[str, Any]]:
    with kit.serve(vllm_work, "vllm-disk-tier", kit.tiny_model("tiny-llama")) as url:
        code, doc, _ = kit.replay(url, llama_bf16[0], vllm_work / "disk-tier.json",
                                  "--repeat", "2", "--require-tier", "storage")
    return code, doc


def test_hits_come_back_from_disk_bit_exact(disk_replay):
    code, doc = disk_replay
    assert code == 0 and doc["verdict"] == "pass", (doc["summary"], doc.get("tier_problem"))
    assert doc["summary"]["cached_tokens_by_tier"]["storage"] > 0
    assert doc["summary"]["max_ulp"] == 0
