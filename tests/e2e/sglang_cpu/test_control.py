"""SGLang 0.5.23's REAL server on a CPU, for two things a cache-off golden cannot say alone:

- `golden replay --launch sglang-cpu-hicache --control auto` on the multi-turn golden: every
  follow-up turn's hit covers KV its parent's decode wrote and diverges (torch's CPU SDPA computes
  a decode row with other bits than a prefill row: docs/sglang-cpu.md), and the control
  (`sglang-cpu-radix`, the profile's own) fails the same requests with the same bits, so the
  report says "also on the control (not the tier)" for each, and fails nothing else: not
  HiCache's;
- prompt ids the server reports other than sent: SGLang reports a 4096-token vocabulary's last
  id (4095) as 0 in `input_token_logprobs` (docs/findings/sglang-ids.md); the vocab-edge golden,
  replayed against the very server that recorded it (the session fixture does that), names it `server_id_mismatch` and passes.

The goldens come from the session's one reference server (tests/e2e/conftest.py); the control
run launches two more, one after the other. Needs `bash scripts/install_sglang_cpu.sh`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from cli.main import app
from replay.sglang_cpu.locate import install_hint
from tests.support.sglang_cpu import ORDER, STAMP, requests
from tests.support.console import flattened

pytestmark = pytest.mark.skipif(not STAMP.is_file(), reason=install_hint())
runner = CliRunner()
# The vector extensions torch's CPU kernels use here, and so in the servers this test starts (the
# same torch, the same environment: ATEN_CPU_CAPABILITY lowers it).
AVX512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")


@pytest.fixture(scope="module")
def controlled(cpu_work, cpu_model, cpu_goldens) -> tuple[int, str, dict[str, Any]]:
    report = cpu_work / "control-branching.json"
    res = runner.invoke(app, ["replay", str(cpu_goldens["cpu-branching"]), "--launch",
                              "sglang-cpu-hicache", "--model", cpu_model, "--control", "auto",
                              "--log-dir", str(cpu_work / "logs"), "--report", str(report),
                              *ORDER, "--quiet"])
    return res.exit_code, res.output, json.loads(report.read_text())


def test_multi_turn_failures_on_hicache_are_also_on_the_control_with_the_same_bits(controlled):
    code, _, doc = controlled
    failing = [r for r in doc["requests"] if not r["passed"]]
    assert code == 1 and failing
    assert all(r["id"].endswith("/t1") for r in failing)  # the decode-written hits, only
    assert all(r["control_passed"] is False and r["control_same_bits"] for r in failing)
    assert all(r["control_cached_tokens"] == r["cached_tokens"] for r in failing)  # comparable
    assert doc["summary"]["failed_on_tier_only"] == 0
    assert doc["control"]["target"] == "launch:sglang-cpu-radix"


def test_the_control_fails_no_request_the_tested_server_passes(controlled):
    _, _, doc = controlled
    assert doc["control"]["requests_failed"] == doc["summary"]["requests_failed"] > 0


def turn(request: dict[str, Any]) -> int:
    return int(request["id"].rsplit("/t", 1)[1])


def test_multi_turn_hits_fail_exactly_where_they_include_decode_written_kv(controlled):
    """Which follow-ups diverge, and where, follows the CPU's vector extensions (torch's
    kernels): on AVX-512 all four at output positions 0-3; with torch held to AVX2
    (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2) three, at 0, 3 and 19, one identical."""
    code, _, doc = controlled
    assert code == 1 and doc["verdict"] == "fail"
    reqs = requests(doc)
    assert {q["status"] for q in reqs if turn(q) == 0} == {"identical"}
    follow_ups = [q for q in reqs if turn(q) == 1]
    assert [q["cached_tokens"] for q in follow_ups] == [640] * 4  # 576 prompt + 64 decoded
    failed = [q for q in follow_ups if q["status"] != "identical"]
    assert failed
    assert doc["summary"]["cache_hit_lengths"] == {"0": 2, "512": 2, "640": 4}
    assert doc["summary"]["requests_failed"] == len(failed) and doc["summary"]["cache_misses"] == 0
    if AVX512:  # all four, within four positions
        assert len(failed) == 4
        assert all(q["first_divergence"]["position"] <= 3 for q in failed)


def test_the_console_says_it_is_not_the_tier(controlled):
    _, output, _ = controlled
    assert "also on the control (not the tier)" in flattened(output)
    assert "0 failure(s) the tier's alone" in flattened(output)


def test_the_real_server_reports_the_vocabularys_last_id_as_zero(cpu_reference_edge):
    doc = cpu_reference_edge["doc"]
    named = [r for r in doc["requests"] if r.get("misreported_prompt_ids")]
    assert named, "no request of vocab-edge got a misreported id"
    for r in named:
        assert all(m["sent"] == 4095 and m["reported"] == 0
                   for m in r["misreported_prompt_ids"]["first"])


def test_a_misreported_id_is_the_servers_bug_never_a_cache_verdict(cpu_reference_edge):
    doc = cpu_reference_edge["doc"]
    assert cpu_reference_edge["code"] == 0 and doc["verdict"] == "pass"
    assert {r["status"] for r in doc["requests"]} <= {"identical", "server_id_mismatch"}
    assert doc["summary"]["server_id_mismatches"] > 0
    assert "warning: the server reported prompt token ids other than sent" in \
        cpu_reference_edge["recorded"]
