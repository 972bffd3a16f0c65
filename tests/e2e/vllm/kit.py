"""What the vLLM end-to-end tests share: the vLLM venv (skip when missing), the tiny models, a
budgeted server start, and `golden record` / `golden replay` through the CLI.

One server runs at a time (a module- or session-scoped fixture owns it and stops it); every
start is budgeted (`START_BUDGET` seconds, health plus the warm-up generation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.launch import launched
from replay.server.profile import load_profile
from tests.support import paths

START_BUDGET = 300.0  # seconds; a start takes 25-100 s on the loaded 2-core machine
INSTALL = paths.REPO / "scripts" / "install_vllm.sh"
runner = CliRunner()

# Two groups of two branches sharing a 400-token prefix, three follow-up turns; prompts of
# 416-488 tokens, so every request but a group's first can reuse three blocks of 128 (a hit of
# 384) and no prompt passes 1024 tokens (where bf16
# stops holding: docs/findings.md, vLLM). Ids stay inside the tiny models' 2048-token vocabulary.
CONVERSATIONS = """groups = 2
branches = 2
prefix_len = 400
suffix_len = 16
turns = 3
turn_suffix_len = 16
max_new_tokens = 8
token_lo = 3
token_hi = 2048
top_k = 3
seed = 0
"""


def vllm_python() -> Path:
    out = subprocess.run(["bash", str(INSTALL), "--python"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def skip_without_vllm() -> pytest.MarkDecorator:
    python = vllm_python()
    stamp = python.parent.parent / ".golden-vllm-installed"
    return pytest.mark.skipif(not (python.is_file() and stamp.is_file()),
                              reason=f"vLLM is not installed ({python}): run bash scripts/install_vllm.sh")


def _models_module() -> Any:
    path = paths.REPO / "scripts" / "make_tiny_hf_models.py"
    spec = importlib.util.spec_from_file_location("make_tiny_hf_models", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault("make_tiny_hf_models", module)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["make_tiny_hf_models"]


def tiny_model(name: str) -> str:
    """The tiny model folder, made from its seed on first use (about a second)."""
    return str(_models_module().make(name))


@contextlib.contextmanager
def serve(work: Path, profile: str, model: str, *args: str) -> Iterator[str]:
    """A vLLM server from a built-in profile, started within START_BUDGET, always stopped."""
    prof = dataclasses.replace(load_profile(profile), startup_timeout=START_BUDGET)
    log = work / "logs" / f"{profile}-{len(list(work.glob('logs/*.log')))}.log"
    with launched(prof, model=model, log_path=log, extra_args=args) as url:
        yield url


def record(url: str, scenario: Path, out: Path, *extra: str) -> str:
    res = runner.invoke(app, ["record", "--server", url, "--scenario", str(scenario),
                              "--out", str(out), "--quiet", *extra])
    assert res.exit_code == 0, res.output
    return res.output


def replay(url: str, golden: Path, report: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    res = runner.invoke(app, ["replay", str(golden), "--server", url, "--report", str(report),
                              "--quiet", *extra])
    return res.exit_code, json.loads(report.read_text()), res.output


def avx512_bf16() -> bool:
    """Does vLLM's CPU platform take its AVX-512 BF16 paths on this machine? The same test vLLM
    makes (`torch.cpu._is_avx512_bf16_supported()`, vllm/platforms/cpu.py): with it, vLLM loads
    its `_C_AVX512` kernels and resets a GDN hybrid's SSM state to float32 for its accelerated
    GDN backend. Some of what vLLM answers differs between the two kinds of CPU, and the tests
    say what each gives (docs/findings.md, vLLM)."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported())


def first_of_its_group(request_id: str) -> bool:
    """Branch 0's first turn: the only request of a group sent before any of its prefix was
    cached (the other branches' first turns reuse branch 0's shared prefix)."""
    return request_id.endswith("/b0/t0")


def expected_hit(request_id: str, block: int) -> int:
    """Every request but its group's first reuses everything before its last new tokens, in
    whole blocks: 384 tokens (3 blocks of 128) or 256 (one block of 256, hybrids) here."""
    return 0 if first_of_its_group(request_id) else block
