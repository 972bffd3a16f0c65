"""Goldens shared by the vLLM end-to-end tests (recorded once per session, on vllm-reference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.vllm import kit


@pytest.fixture(scope="session")
def vllm_work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("vllm")
    (work / "conversations.toml").write_text(kit.CONVERSATIONS)
    return work


@pytest.fixture(scope="session")
def llama_bf16(vllm_work: Path) -> tuple[Path, str]:
    """The tiny Llama's bf16 reference, recorded at concurrency 16 twice over
    (`--check-determinism 2`): the reference profile must record repeatably under load.
    Returns the golden and the recorder's output."""
    out = vllm_work / "llama-bf16.zarr"
    with kit.serve(vllm_work, "vllm-reference", kit.tiny_model("tiny-llama")) as url:
        output = kit.record(url, vllm_work / "conversations.toml", out, "--api", "auto",
                            "--concurrency", "16", "--check-determinism", "2")
    return out, output
