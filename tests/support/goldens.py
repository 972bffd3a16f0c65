"""Small goldens recorded for tests from a cache-disabled in-process stub: through the real CLI
(`golden record`), or through the session layer for a ScenarioSpec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cli.main import app
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.jobs import session
from tests.support.stub_server import StubConfig, StubServer

# 2 groups x 2 branches, two follow-up turns each: 12 requests, a prefix the branches share.
SMALL_TREE = """groups = 2
branches = 2
prefix_len = 40
suffix_len = 8
turns = 2
turn_suffix_len = 4
max_new_tokens = 12
top_k = 5
"""


def record_scenario(directory: Path, scenario: str, name: str = "s") -> Path:
    """`golden record --scenario` of `scenario` (a preset name, or a TOML text, written beside it)
    from a cache-disabled stub: DIRECTORY/NAME.zarr."""
    if "=" in scenario:
        (directory / f"{name}.toml").write_text(scenario)
        scenario = str(directory / f"{name}.toml")
    out = directory / f"{name}.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        res = CliRunner().invoke(app, ["record", "--server", stub.url, "--scenario", scenario,
                                       "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    return out


def record_single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `single` preset recorded from a cache-disabled stub by `golden record`."""
    return record_scenario(tmp_path_factory.mktemp("g"), "single", "single")


def record_spec(directory: Path, spec: ScenarioSpec) -> Path:
    """`spec` recorded from a cache-disabled stub through the session layer: DIRECTORY/NAME.zarr."""
    out = directory / f"{spec.name}.zarr"
    with StubServer(StubConfig(radix=False)) as stub:
        session.record_golden(build_plan(spec), out, session.ServerTarget(url=stub.url))
    return out


def replay_on_stub(golden: Path, tmp_path: Path, config: StubConfig,
                   *extra: str) -> tuple[Result, dict[str, Any] | None]:
    """`golden replay GOLDEN --server <stub> --report ... --quiet EXTRA` against a stub with
    `config`: the CLI result and the report document (None when none was written)."""
    report = tmp_path / "report.json"
    with StubServer(config) as stub:
        res = CliRunner().invoke(app, ["replay", str(golden), "--server", stub.url, "--report",
                                       str(report), "--quiet", *extra])
    return res, json.loads(report.read_text()) if report.exists() else None
