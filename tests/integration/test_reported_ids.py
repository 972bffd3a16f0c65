"""Prompt token ids the server reports other than sent are the server's bug, named as such and
never a cache verdict: SGLang 0.5.17-0.5.23 report the vocabulary's last id as 0 in
`input_token_logprobs` (docs/findings/sglang-ids.md). The stub here does what SGLang does; the
real server shows it in tests/e2e/sglang_cpu/test_reported_ids.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.stub_server import StubConfig, StubServer

runner = CliRunner()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ids") / "edge.zarr"
    with StubServer(StubConfig(radix=False, clip_last_id=True)) as stub:
        res = runner.invoke(app, ["record", "--server", stub.url, "--scenario", "vocab-edge",
                                  "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, res.output


def replay(golden: Path, tmp_path: Path, config: StubConfig) -> tuple[int, str, dict]:
    report = tmp_path / "r.json"
    with StubServer(config) as stub:
        res = runner.invoke(app, ["replay", str(golden), "--server", stub.url, "--report",
                                  str(report)])
    return res.exit_code, res.output, json.loads(report.read_text())


def test_a_recording_warns_that_the_server_misreported_prompt_ids(recorded):
    _, output = recorded
    assert "warning: the server reported prompt token ids other than sent" in output


def test_a_replay_names_the_misreported_ids_as_the_servers_and_still_passes(recorded, tmp_path):
    code, output, doc = replay(recorded[0], tmp_path, StubConfig(clip_last_id=True))
    named = [r for r in doc["requests"] if r["status"] == "server_id_mismatch"]
    assert code == 0 and doc["verdict"] == "pass"
    assert named and all(r["passed"] for r in named)
    first = named[0]["misreported_prompt_ids"]["first"][0]
    assert first["sent"] == 4095 and first["reported"] == 0
    assert doc["summary"]["server_id_mismatches"] == len(named)
    assert doc["summary"]["cache_misses"] == 0  # never a cache verdict
    assert "the server's bug, not a cache verdict" in output


def test_a_server_that_reports_the_ids_it_was_sent_has_no_mismatch(recorded, tmp_path):
    code, _, doc = replay(recorded[0], tmp_path, StubConfig())
    assert code == 0
    assert doc["summary"]["server_id_mismatches"] == 0
    assert all("misreported_prompt_ids" not in r for r in doc["requests"])
