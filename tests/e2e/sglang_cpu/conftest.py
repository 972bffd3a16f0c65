"""What the SGLang-on-a-CPU e2e modules share (tests/e2e/sglang_cpu/): one tiny random-weight Llama
(bf16, seed 0) and both scenarios' goldens, recorded ONCE per test session on SGLang's real
reference server (sglang-cpu-reference: radix cache off, overlap off), whichever module asks
first; the reference server is stopped before any replay server starts (2 cores)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_cpu.locate import default_venv
from replay.sglang_cpu.tiny_model import write_tiny_llama

STAMP = default_venv() / ".golden-sglang-cpu-installed"
ORDER = ("--concurrency", "1", "--schedule", "interleave")
SCENARIOS = ("cpu-prompt-reuse", "cpu-branching")
runner = CliRunner()


@dataclass
class Replayed:
    code: int
    doc: dict[str, Any]
    output: str


@pytest.fixture(scope="session")
def cpu_work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sglang-cpu")


@pytest.fixture(scope="session")
def cpu_model(cpu_work) -> str:
    return str(write_tiny_llama(cpu_work / "tiny-llama-bf16", seed=0))


@pytest.fixture(scope="session")
def cpu_goldens(cpu_work, cpu_model) -> dict[str, Path]:
    """Both scenarios recorded on one reference server (radix cache off)."""
    out = {}
    with launched(load_profile("sglang-cpu-reference"), model=cpu_model,
                  log_path=cpu_work / "logs" / "reference.log") as url:
        for scenario in SCENARIOS:
            out[scenario] = cpu_work / f"{scenario}.zarr"
            res = runner.invoke(app, ["record", "--server", url, "--scenario", scenario,
                                      "--out", str(out[scenario]), *ORDER, "--quiet"])
            assert res.exit_code == 0, res.output
    return out


def replay(url: str, golden: Path, report: Path, *extra: str) -> Replayed:
    res = runner.invoke(app, ["replay", str(golden), "--server", url, "--report", str(report),
                              *ORDER, "--quiet", *extra])
    return Replayed(res.exit_code, json.loads(report.read_text()), res.output)


def requests(doc: dict[str, Any], repeat: int | None = None) -> list[dict[str, Any]]:
    return [r for r in doc["requests"] if repeat is None or r["repeat"] == repeat]
