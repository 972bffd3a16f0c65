"""The yardstick: does a replay catch each injected cache bug, and pass when there is none?

`record_reference` records a scenario on the `reference` profile; `replay_report` replays a golden
on a profile (optionally with a fault) and returns the JSON report. `detection_matrix` does both
for every fault and judges the outcome: a fault is *caught* when the replay fails, and *placed*
when every failing request was really served from a cache path (cached_tokens > 0): a fault breaks
only cache paths, so a cold request that fails would be a wrong verdict.
Used by scripts/detection_matrix.py (full size) and tests/unit/jobs/test_detection.py (CI size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replay.server.transport import ClientOptions
from replay.engine.faults import FAULTS
from replay.engine.model import HybridModel
from replay.engine.options import profile_options
from replay.engine.server import start_server
from replay.golden.model import Golden
from replay.run.replayer import ReplayOptions
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.jobs.session import record_in_memory, replay_golden
from replay.server.target import ServerTarget

# The profile a fault needs to be reachable; every other fault runs on `hicache`.
FAULT_PROFILES = {"write-back-early-evict": "hicache-write-back"}
# Faults on a path a golden replay never takes: it asks for output logprobs only.
BEYOND_REPLAY = frozenset({"prompt-logprobs-stale-buffer"})
CLIENT = ClientOptions(concurrency=16)


def profile_for(fault: str | None) -> str:
    return FAULT_PROFILES.get(fault or "", "hicache")


def record_reference(spec: ScenarioSpec, model: HybridModel) -> Golden:
    with start_server(profile_options("reference", model=model.config.name, seed=model.seed),
                      model=model) as server:
        return record_in_memory(build_plan(spec), ServerTarget(url=server.url), client=CLIENT,
                                api="sglang")


def replay_report(golden: Golden, model: HybridModel, profile: str, fault: str | None = None,
                  repeat: int = 1, **overrides: Any) -> dict[str, Any]:
    """`overrides` replace profile settings (e.g. a smaller `max_total_tokens` for a small
    scenario, so that pages still travel to host and back)."""
    options = profile_options(profile, fault=fault, model=model.config.name, seed=model.seed,
                              **overrides)

    with start_server(options, model=model) as server:
        return replay_golden(golden, ServerTarget(url=server.url), ReplayOptions(repeat=repeat),
                             CLIENT, api="sglang")


@dataclass(frozen=True)
class FaultOutcome:
    fault: str
    profile: str
    verdict: str
    failing: list[str]  # request ids that failed
    cold_failures: list[str]  # failing requests that had no cache hit (must be empty)
    statuses: dict[str, int]  # status -> count among failing requests

    @property
    def caught(self) -> bool:
        return self.verdict == "fail"

    @property
    def placed(self) -> bool:
        return not self.cold_failures


def judge_fault(fault: str, profile: str, report: dict[str, Any]) -> FaultOutcome:
    failing = [r for r in report["requests"] if not r["passed"]]
    statuses: dict[str, int] = {}
    for r in failing:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return FaultOutcome(
        fault=fault, profile=profile, verdict=report["verdict"],
        failing=[r["id"] for r in failing],
        cold_failures=[r["id"] for r in failing if r["cached_tokens"] == 0],
        statuses=statuses,
    )


def detection_matrix(golden: Golden, model: HybridModel,
                     faults: list[str] | None = None) -> list[FaultOutcome]:
    outcomes = []
    for fault in faults or list(FAULTS):
        profile = profile_for(fault)
        outcomes.append(judge_fault(fault, profile, replay_report(golden, model, profile, fault)))
    return outcomes
