"""Every injected engine fault shows through SGLang's own front end as natively: the committed
hicache-branching golden replayed with the fault through `embedded-sglang-*` fails on the same
requests, with the same cache hits, as on the engine's own server.

One front end per fault (25-90 s to start on 2 cores, plus the replay). Needs SGLang:
`bash scripts/install_sglang.sh` (scripts/test.sh runs it).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from golden_cli.main import app
from replay.engine.config import get_config
from replay.jobs.detection import judge_fault, profile_for, replay_report
from replay.engine.faults import FAULTS
from replay.engine.model import HybridModel
from replay.golden.store import read_golden
from replay.server.launch import launched, load_profile
from replay.sglang_frontend.locate import install_hint, sglang_python
from tests.support import paths

pytestmark = pytest.mark.skipif(sglang_python() is None, reason=install_hint())

COMMITTED = paths.REPO / "goldens" / "hicache-branching.zarr"
# The faults of the engine's output-logprob cache paths (the ones this front end can carry:
# prompt logprobs are refused by its scheduler); listed so that a new fault is added on purpose.
FRONTEND_FAULTS = ["conv-state-dropped", "host-bf16", "late-ssm-checkpoint", "overreport-cached",
                   "page-first-head-transpose", "stale-host-page", "write-back-early-evict"]
runner = CliRunner()


@pytest.fixture(scope="module")
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), 0, "cpu")


@pytest.fixture(scope="module")
def golden():
    return read_golden(COMMITTED)


def outcome(report: dict) -> list[tuple]:
    """Which requests a fault breaks, with their cache hits. Where and how far a request diverges
    is not compared: under write_back, which page an eviction batch corrupts depends on when
    requests arrive, natively as through SGLang."""
    return [(r["id"], r["passed"], r["cached_tokens"], r["cache_problem"])
            for r in report["requests"]]


def test_the_listed_faults_exist():
    assert set(FRONTEND_FAULTS) <= set(FAULTS)


@pytest.mark.parametrize("fault", FRONTEND_FAULTS)
def test_a_fault_is_caught_through_sglang_exactly_as_natively(fault, model, golden, tmp_path):
    profile = profile_for(fault)
    report_path = tmp_path / "report.json"
    with launched(load_profile(f"embedded-sglang-{profile}"), model=None, fault=fault,
                  log_path=tmp_path / "server.log") as url:
        result = runner.invoke(app, ["replay", str(COMMITTED), "--server", url,
                                     "--report", str(report_path), "-q"])
    assert result.exit_code == 1, result.output
    through_sglang = json.loads(report_path.read_text())
    native = replay_report(golden, model, profile, fault)
    judged = judge_fault(fault, profile, through_sglang)
    assert judged.caught and judged.placed, judged
    assert outcome(through_sglang) == outcome(native)
