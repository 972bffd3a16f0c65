"""Fixtures every e2e kind may share. SGLang's real server on a CPU (tests/e2e/sglang_cpu/,
tests/e2e/pd/): one tiny random-weight Llama (bf16, seed 0) and the goldens recorded ONCE per test
session on SGLang's real reference server (sglang-cpu-reference: radix cache off, overlap off),
whichever module asks first; the reference server is stopped before any replay server starts (2
cores). While it is up, the vocab-edge golden is also replayed against it: the very arithmetic
that recorded it, so only what the server reports can differ (SGLang's clip of the vocabulary's
last id, docs/findings/sglang-ids.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_cpu.tiny_model import write_tiny_llama
from tests.support.sglang_cpu import ORDER, runner

SCENARIOS = ("cpu-prompt-reuse", "cpu-branching", "vocab-edge")


@pytest.fixture(scope="session")
def cpu_work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sglang-cpu")


@pytest.fixture(scope="session")
def cpu_model(cpu_work) -> str:
    return str(write_tiny_llama(cpu_work / "tiny-llama-bf16", seed=0))


@pytest.fixture(scope="session")
def cpu_goldens(cpu_work, cpu_model) -> dict[str, Path]:
    """The scenarios recorded on one reference server (radix cache off); vocab-edge replayed on
    it too (`cpu_reference_edge`)."""
    from cli.main import app

    out = {}
    with launched(load_profile("sglang-cpu-reference"), model=cpu_model,
                  log_path=cpu_work / "logs" / "reference.log") as url:
        for scenario in SCENARIOS:
            out[scenario] = cpu_work / f"{scenario}.zarr"
            res = runner.invoke(app, ["record", "--server", url, "--scenario", scenario,
                                      "--out", str(out[scenario]), *ORDER])
            assert res.exit_code == 0, res.output
            (cpu_work / f"{scenario}.record.txt").write_text(res.output)
        report = cpu_work / "vocab-edge-on-reference.json"
        res = runner.invoke(app, ["replay", str(out["vocab-edge"]), "--server", url,
                                  "--report", str(report), *ORDER])
        (cpu_work / "vocab-edge-on-reference.txt").write_text(f"{res.exit_code}\n{res.output}")
    return out


@pytest.fixture(scope="session")
def cpu_reference_edge(cpu_work, cpu_goldens) -> dict[str, Any]:
    """vocab-edge on the reference that recorded it: the record's output, the replay's exit
    code, output and report."""
    code, output = (cpu_work / "vocab-edge-on-reference.txt").read_text().split("\n", 1)
    return {"recorded": (cpu_work / "vocab-edge.record.txt").read_text(), "code": int(code),
            "output": output,
            "doc": json.loads((cpu_work / "vocab-edge-on-reference.json").read_text())}
