"""Every injected engine fault shows through SGLang's own front end as natively: the committed
hicache-branching golden replayed with the fault through `embedded-sglang-*` fails on the same
requests, with the same cache hits, as on the engine's own server. The two faults a plain golden
never reaches (prompt logprobs from a warm cache, salted cache keys) are replayed from a ci-quick
golden recorded natively, which also replays through SGLang bit for bit without a fault: SGLang's
front end carries `logprob_start_len`, the prompt logprobs and `extra_key` as the engine's own
server does.

One front end per fault (25-90 s to start on 2 cores, plus the replay). Needs SGLang:
`bash scripts/install_sglang.sh` (scripts/test.sh runs it).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from replay.engine.config import get_config
from replay.golden.scenario import PRESETS
from replay.jobs.detection import (BEYOND_REPLAY, CI_QUICK_ENGINE, engine_flags, judge_fault,
                                   profile_for, record_reference, replay_report, scenario_for)
from replay.engine.faults import FAULTS
from replay.engine.model import HybridModel
from replay.golden.store import read_golden, write_golden
from replay.server.launch import launched
from replay.server.profile import load_profile
from replay.sglang_frontend.locate import install_hint, sglang_python
from tests.support import paths

pytestmark = pytest.mark.skipif(sglang_python() is None, reason=install_hint())

COMMITTED = paths.REPO / "goldens" / "hicache-branching.zarr"
# The faults of the engine's output-logprob cache paths, which any golden reaches; listed so that
# a new fault is added on purpose.
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


@pytest.fixture(scope="module")
def ci_quick(model, tmp_path_factory):
    """ci-quick (one group with prompt logprobs, one salted) recorded on the engine's own server."""
    golden = record_reference(PRESETS["ci-quick"], model)
    return golden, write_golden(golden, tmp_path_factory.mktemp("ci-quick") / "ci-quick.zarr")


def replay_through_sglang(golden_path, tmp_path, fault: str | None):
    """ci-quick replayed as the detection matrix replays it: its small pages, short track
    interval and small pool given to the front end's engine as SGLang's own flags."""
    report_path = tmp_path / "report.json"
    with launched(load_profile(f"embedded-sglang-{profile_for(fault)}"), model=None, fault=fault,
                  log_path=tmp_path / "server.log", extra_args=engine_flags(CI_QUICK_ENGINE)) as url:
        result = runner.invoke(app, ["replay", str(golden_path), "--server", url,
                                     "--report", str(report_path), "-q"])
    return result, json.loads(report_path.read_text())


def test_prompt_logprobs_and_salted_requests_replay_through_sglang_bit_for_bit(ci_quick, tmp_path):
    result, report = replay_through_sglang(ci_quick[1], tmp_path, None)
    assert result.exit_code == 0, result.output
    assert report["summary"]["prompt_logprobs_compared"] > 0
    assert report["summary"]["prompt_logprob_drifts"] == 0


@pytest.mark.parametrize("fault", sorted(BEYOND_REPLAY))
def test_a_fault_beyond_plain_goldens_is_caught_through_sglang(fault, ci_quick, tmp_path):
    assert scenario_for(PRESETS["ci-quick"], fault) == PRESETS["ci-quick"]  # it has the switch
    result, report = replay_through_sglang(ci_quick[1], tmp_path, fault)
    assert result.exit_code == 1, result.output
    judged = judge_fault(fault, profile_for(fault), report)
    assert judged.caught and judged.placed, judged
