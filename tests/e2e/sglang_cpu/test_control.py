"""SGLang 0.5.23's REAL server on a CPU, for two things a cache-off golden cannot say alone:

- `golden replay --launch sglang-cpu-hicache --control auto` on the multi-turn golden: every
  follow-up turn's hit covers KV its parent's decode wrote and diverges (torch's CPU SDPA computes
  a decode row with other bits than a prefill row: docs/sglang-cpu.md), and the control
  (`sglang-cpu-radix`, the profile's own) fails the same requests with the same bits, so the
  report says "also on the control (not the tier)" for each: not HiCache's;
- prompt ids the server reports other than sent: SGLang reports a 4096-token vocabulary's last
  id (4095) as 0 in `input_token_logprobs` (docs/findings/sglang-ids.md); the vocab-edge golden,
  replayed against the very server that recorded it, names it `server_id_mismatch` and passes.

Three servers, one after another (2 cores). Needs `bash scripts/install_sglang_cpu.sh`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.server.launch import launched, load_profile
from replay.sglang_cpu.locate import default_venv, install_hint
from replay.sglang_cpu.tiny_model import write_tiny_llama

STAMP = default_venv() / ".golden-sglang-cpu-installed"
pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())
ORDER = ("--concurrency", "1", "--schedule", "interleave")
runner = CliRunner()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sglang-cpu-control")


@pytest.fixture(scope="module")
def model(work) -> str:
    return str(write_tiny_llama(work / "tiny-llama-bf16", seed=0))


def run(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def reference(work, model) -> dict[str, Any]:
    """On one reference server: cpu-branching and vocab-edge recorded, and vocab-edge replayed
    against the same server (the very arithmetic that recorded it)."""
    with launched(load_profile("sglang-cpu-reference"), model=model,
                  log_path=work / "logs" / "reference.log") as url:
        code, output = run("record", "--server", url, "--scenario", "cpu-branching", "--out",
                           str(work / "branching.zarr"), *ORDER, "--quiet")
        assert code == 0, output
        code, recorded = run("record", "--server", url, "--scenario", "vocab-edge", "--out",
                             str(work / "edge.zarr"), *ORDER)
        assert code == 0, recorded
        code, output = run("replay", str(work / "edge.zarr"), "--server", url, "--report",
                           str(work / "edge.json"), *ORDER, "--quiet")
    return {"recorded": recorded, "edge_code": code, "edge_output": output,
            "edge": json.loads((work / "edge.json").read_text())}


@pytest.fixture(scope="module")
def controlled(work, model, reference) -> tuple[int, str, dict[str, Any]]:
    code, output = run("replay", str(work / "branching.zarr"), "--launch", "sglang-cpu-hicache",
                       "--model", model, "--control", "auto", "--log-dir", str(work / "logs"),
                       "--report", str(work / "branching.json"), *ORDER, "--quiet")
    return code, output, json.loads((work / "branching.json").read_text())


def test_multi_turn_failures_on_hicache_are_also_on_the_control_with_the_same_bits(controlled):
    code, _, doc = controlled
    failing = [r for r in doc["requests"] if not r["passed"]]
    assert code == 1 and failing
    assert all(r["id"].endswith("/t1") for r in failing)  # the decode-written hits, only
    assert all(r["control_passed"] is False and r["control_same_bits"] for r in failing)
    assert doc["summary"]["failed_on_tier_only"] == 0
    assert doc["control"]["target"] == "launch:sglang-cpu-radix"


def test_the_console_says_it_is_not_the_tier(controlled):
    _, output, doc = controlled
    assert "also on the control (not the tier)" in output
    assert "0 failure(s) the tier's alone" in output


def test_the_real_server_reports_the_vocabularys_last_id_as_zero(reference):
    doc = reference["edge"]
    named = [r for r in doc["requests"] if r.get("misreported_prompt_ids")]
    assert named, "no request of vocab-edge got a misreported id"
    for r in named:
        assert all(m["sent"] == 4095 and m["reported"] == 0
                   for m in r["misreported_prompt_ids"]["first"])


def test_a_misreported_id_is_the_servers_bug_never_a_cache_verdict(reference):
    doc = reference["edge"]
    assert reference["edge_code"] == 0 and doc["verdict"] == "pass"
    assert {r["status"] for r in doc["requests"]} <= {"identical", "server_id_mismatch"}
    assert doc["summary"]["server_id_mismatches"] > 0
    assert "warning: the server reported prompt token ids other than sent" in reference["recorded"]
