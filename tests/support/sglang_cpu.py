"""What the tests of SGLang's real server on a CPU share (tests/e2e/sglang_cpu/, tests/e2e/pd/):
the install stamp they skip on, the request order they replay in, and a replay through the CLI.
The session-wide model and goldens they use are fixtures in tests/e2e/conftest.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cli.main import app
from replay.sglang_cpu.locate import default_venv

STAMP = default_venv() / ".golden-sglang-cpu-installed"
ORDER = ("--concurrency", "1", "--schedule", "interleave")
runner = CliRunner()


@dataclass
class Replayed:
    code: int
    doc: dict[str, Any]
    output: str


def replay(url: str, golden: Path, report: Path, *extra: str) -> Replayed:
    res = runner.invoke(app, ["replay", str(golden), "--server", url, "--report", str(report),
                              *ORDER, "--quiet", *extra])
    return Replayed(res.exit_code, json.loads(report.read_text()), res.output)


def requests(doc: dict[str, Any], repeat: int | None = None) -> list[dict[str, Any]]:
    return [r for r in doc["requests"] if repeat is None or r["repeat"] == repeat]
