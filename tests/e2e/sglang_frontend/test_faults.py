"""Every injected engine fault shows through SGLang's own front end as natively: the committed
hicache-branching golden replayed with the fault through `embedded-sglang-*` fails on the same
requests, with the same cache hits, as on the engine's own server. The two faults a plain golden
never reaches (prompt logprobs from a warm cache, salted cache keys) are replayed from a ci-quick
golden recorded natively, which also replays through SGLang bit for bit without a fault: SGLang's
front end carries `logprob_start_len`, the prompt logprobs and `extra_key` as the engine's own
server does.

One front end per profile (25-90 s to start on 2 cores), shared by its faults in turn: each test
switches the front end's engine to its fault through SGLang's own `/set_internal_state` (a fresh
engine, every cache tier empty, as after a start; replay/sglang_frontend/scheduler_process.py).
Needs SGLang: `bash scripts/install_sglang.sh` (scripts/test.sh runs it).
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from urllib import request

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
from replay.sglang_frontend.args import fault_knob
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


class FrontEnds:
    """One front end at a time, started on first use for a (profile, engine flags) pair and kept
    while the next test asks for the same pair."""

    def __init__(self, work) -> None:
        self.work, self.key, self.url = work, None, ""
        self.stack = ExitStack()

    def with_fault(self, fault: str | None, extra_args: tuple[str, ...] = ()) -> str:
        key = (profile_for(fault), extra_args)
        if key != self.key:
            self.stack.close()
            log = self.work / f"{key[0]}-{len(extra_args)}.log"
            self.url = self.stack.enter_context(launched(load_profile(f"embedded-sglang-{key[0]}"), model=None,
                                                         log_path=log, extra_args=extra_args))
            self.key = key
        assert switch_when_idle(self.url, fault), f"the front end kept its fault ({self.key}): busy?"
        return self.url


def switch_when_idle(url: str, fault: str | None, wait_s: float = 300.0) -> bool:
    """The switch, asked again while the engine answers busy: after a replay that failed, its
    requests in flight still run to their end (the engine cannot drop a sequence), and the
    switch waits for them, as `golden replay` waits for its flush."""
    deadline = time.monotonic() + wait_s
    while switch_fault(url, fault) != [True]:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


def switch_fault(url: str, fault: str | None) -> list[bool]:
    return set_internal_state(url, fault_knob(fault))


def set_internal_state(url: str, knobs: dict[str, int]) -> list[bool]:
    body = json.dumps({"server_args": knobs}).encode()
    req = request.Request(f"{url}/set_internal_state", data=body, headers={"Content-Type": "application/json"})
    with request.urlopen(req, timeout=60) as answer:
        return json.loads(answer.read())


@pytest.fixture(scope="module")
def front_ends(tmp_path_factory):
    ends = FrontEnds(tmp_path_factory.mktemp("front-ends"))
    with ends.stack:
        yield ends


def outcome(report: dict) -> list[tuple]:
    """Which requests a fault breaks, with their cache hits. Where and how far a request diverges
    is not compared: under write_back, which page an eviction batch corrupts depends on when
    requests arrive, natively as through SGLang."""
    return [(r["id"], r["passed"], r["cached_tokens"], r["cache_problem"])
            for r in report["requests"]]


def test_the_listed_faults_exist():
    assert set(FRONTEND_FAULTS) <= set(FAULTS)


@pytest.mark.parametrize("fault", FRONTEND_FAULTS)
def test_a_fault_is_caught_through_sglang_exactly_as_natively(fault, model, golden, front_ends, tmp_path):
    profile = profile_for(fault)
    report_path = tmp_path / "report.json"
    result = runner.invoke(app, ["replay", str(COMMITTED), "--server", front_ends.with_fault(fault),
                                 "--report", str(report_path), "-q"])
    assert result.exit_code == 1, result.output
    through_sglang = json.loads(report_path.read_text())
    native = replay_report(golden, model, profile, fault)
    judged = judge_fault(fault, profile, through_sglang)
    assert judged.caught and judged.placed, judged
    assert outcome(through_sglang) == outcome(native)


def test_the_switched_fault_is_the_one_the_server_reports(front_ends):
    url = front_ends.with_fault("write-back-early-evict")  # the front end the last test used
    assert switch_fault(url, "stale-host-page") == [True]
    with request.urlopen(f"{url}/get_server_info", timeout=60) as answer:
        assert json.loads(answer.read())["internal_states"][0]["engine_fault"] == "stale-host-page"


@pytest.mark.parametrize("knob", ["engine_fault:no-such-fault", "max_running_requests"])
def test_the_fault_switch_refuses_anything_but_a_known_fault(front_ends, knob):
    url = front_ends.with_fault("write-back-early-evict")
    assert set_internal_state(url, {knob: 8}) == [False]


@pytest.fixture(scope="module")
def ci_quick(model, tmp_path_factory):
    """ci-quick (one group with prompt logprobs, one salted) recorded on the engine's own server."""
    golden = record_reference(PRESETS["ci-quick"], model)
    return golden, write_golden(golden, tmp_path_factory.mktemp("ci-quick") / "ci-quick.zarr")


def replay_through_sglang(golden_path, front_ends, tmp_path, fault: str | None):
    """ci-quick replayed as the detection matrix replays it: its small pages, short track
    interval and small pool given to the front end's engine as SGLang's own flags."""
    report_path = tmp_path / "report.json"
    url = front_ends.with_fault(fault, tuple(engine_flags(CI_QUICK_ENGINE)))
    result = runner.invoke(app, ["replay", str(golden_path), "--server", url, "--report", str(report_path), "-q"])
    return result, json.loads(report_path.read_text())


def test_prompt_logprobs_and_salted_requests_replay_through_sglang_bit_for_bit(ci_quick, front_ends, tmp_path):
    result, report = replay_through_sglang(ci_quick[1], front_ends, tmp_path, None)
    assert result.exit_code == 0, result.output
    assert report["summary"]["prompt_logprobs_compared"] > 0
    assert report["summary"]["prompt_logprob_drifts"] == 0


@pytest.mark.parametrize("fault", sorted(BEYOND_REPLAY))
def test_a_fault_beyond_plain_goldens_is_caught_through_sglang(fault, ci_quick, front_ends, tmp_path):
    assert scenario_for(PRESETS["ci-quick"], fault) == PRESETS["ci-quick"]  # it has the switch
    result, report = replay_through_sglang(ci_quick[1], front_ends, tmp_path, fault)
    assert result.exit_code == 1, result.output
    judged = judge_fault(fault, profile_for(fault), report)
    assert judged.caught and judged.placed, judged

