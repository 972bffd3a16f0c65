"""The yardstick: does a replay catch each injected cache bug, and pass when there is none?

`record_reference` records a scenario on the `reference` profile; `replay_report` replays a golden
on a profile (optionally with a fault) and returns the JSON report. `detection_matrix` does both
for every fault and judges the outcome: a fault is *caught* when the replay fails, and *placed*
when every failing request was really served from a cache path (cached_tokens > 0): a fault breaks
only cache paths, so a cold request that fails would be a wrong verdict.
Used by scripts/detection_matrix.py (full size) and tests/unit/jobs/test_detection.py (CI size).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping

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

DEFAULT_CONCURRENCY = 16  # the CLI's default --concurrency


@dataclass(frozen=True)
class FaultSetup:
    """What a replay needs so that a fault's broken path is taken: the engine profile to replay
    on, scenario switches the golden must be recorded with (`prompt_logprobs`, `salted`), the
    client's concurrency, and engine settings on top of the profile. `golden demo --fault`, the
    detection matrix and its tests all read this one table."""

    profile: str = "hicache"
    scenario: tuple[str, ...] = ()  # ScenarioSpec group switches the golden needs on (any group)
    concurrency: int = DEFAULT_CONCURRENCY
    engine: Mapping[str, Any] = field(default_factory=dict)


# Every fault with a need beyond the default (`hicache`, a plain golden, concurrency 16).
FAULT_SETUPS: Mapping[str, FaultSetup] = MappingProxyType({
    "write-back-early-evict": FaultSetup(profile="hicache-write-back"),
    # only pages read back from L3 take the path
    "storage-read-unfilled": FaultSetup(profile="hicache-storage"),
    # the path is the prefill of positions whose prompt logprobs were asked (docs/faults.md)
    "prompt-logprobs-stale-buffer": FaultSetup(scenario=("prompt_logprobs",)),
    # only requests that differ in their cache key alone can be wrongly shared
    "cache-key-drops-extra-key": FaultSetup(scenario=("salted",)),
    # host-load-race needs the default concurrency: at 1 it passes (docs/faults.md)
})
# Kept for callers of the profile alone.
FAULT_PROFILES = MappingProxyType({f: s.profile for f, s in FAULT_SETUPS.items()
                                   if s.profile != "hicache"})
# Faults a plain golden never reaches (output logprobs only, no cache keys).
BEYOND_REPLAY = frozenset(f for f, s in FAULT_SETUPS.items() if s.scenario)


# ci-quick (replay/golden/scenario.py) is replayed on its fault's profile with this device pool,
# small enough that its pages travel to host and back (`python -m replay.engine
# --max-total-tokens`); docs/faults.md, "Detection per server token".
CI_QUICK = "ci-quick"
CI_QUICK_ENGINE: Mapping[str, Any] = MappingProxyType({"max_total_tokens": 1024})
_ENGINE_FLAGS = {"max_total_tokens": "--max-total-tokens",
                 "test_retract_interval": "--retract-interval",
                 "schedule_jitter_seed": "--jitter-seed"}


def engine_flags(overrides: Mapping[str, Any]) -> tuple[str, ...]:
    """Engine settings as `python -m replay.engine` flags (for a launched server)."""
    unknown = sorted(set(overrides) - set(_ENGINE_FLAGS))
    if unknown:
        raise ValueError(f"no engine flag for {', '.join(unknown)}")
    return tuple(x for k, v in overrides.items() for x in (_ENGINE_FLAGS[k], str(v)))


def setup_for(fault: str | None) -> FaultSetup:
    return FAULT_SETUPS.get(fault or "", FaultSetup())


def profile_for(fault: str | None) -> str:
    return setup_for(fault).profile


def scenario_for(spec: ScenarioSpec, fault: str | None) -> ScenarioSpec:
    """The scenario as the fault needs it recorded: a switch it needs and `spec` lacks is turned
    on for every group (ci-quick has each on for one group already)."""
    missing = {k: spec.groups for k in setup_for(fault).scenario if not getattr(spec, k)}
    return replace(spec, **missing) if missing else spec


def client(concurrency: int = DEFAULT_CONCURRENCY) -> ClientOptions:
    return ClientOptions(concurrency=concurrency)


@dataclass(frozen=True)
class FaultInfo:
    """What `golden faults` lists: a fault, the engine profile whose cache path it breaks, and
    what else a replay needs to see it (scenario switches the golden must be recorded with)."""

    name: str
    profile: str
    description: str
    needs: tuple[str, ...]  # scenario switches (`prompt_logprobs`, `salted`); () for none


def fault_catalogue() -> list[FaultInfo]:
    return [FaultInfo(name, profile_for(name), description, setup_for(name).scenario)
            for name, description in FAULTS.items()]


def record_reference(spec: ScenarioSpec, model: HybridModel) -> Golden:
    with start_server(profile_options("reference", model=model.config.name, seed=model.seed),
                      model=model) as server:
        return record_in_memory(build_plan(spec), ServerTarget(url=server.url),
                                client=client(), api="sglang")


def replay_report(golden: Golden, model: HybridModel, profile: str, fault: str | None = None,
                  repeat: int = 1, concurrency: int = DEFAULT_CONCURRENCY,
                  **overrides: Any) -> dict[str, Any]:
    """`overrides` replace profile settings (e.g. a smaller `max_total_tokens` for a small
    scenario, so that pages still travel to host and back)."""
    options = profile_options(profile, fault=fault, model=model.config.name, seed=model.seed,
                              **overrides)

    with start_server(options, model=model) as server:
        return replay_golden(golden, ServerTarget(url=server.url), ReplayOptions(repeat=repeat),
                             client(concurrency), api="sglang")


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


def fault_report(spec: ScenarioSpec, model: HybridModel, fault: str,
                 goldens: dict[str, Golden], **overrides: Any) -> dict[str, Any]:
    """The replay of `spec` (as the fault needs it recorded; `goldens` caches the recordings
    by scenario) on the fault's setup."""
    setup = setup_for(fault)
    golden = recorded(scenario_for(spec, fault), model, goldens)
    return replay_report(golden, model, setup.profile, fault,
                         concurrency=setup.concurrency, **{**setup.engine, **overrides})


def recorded(spec: ScenarioSpec, model: HybridModel, goldens: dict[str, Golden]) -> Golden:
    """The reference recording of `spec`, made once per scenario (`goldens` keeps them)."""
    key = repr(sorted(spec.to_dict().items()))
    if key not in goldens:
        goldens[key] = record_reference(spec, model)
    return goldens[key]


def detection_matrix(spec: ScenarioSpec, model: HybridModel, faults: list[str] | None = None,
                     **overrides: Any) -> list[FaultOutcome]:
    """Each fault replayed as its setup says, on recordings of `spec` made as it needs them."""
    goldens: dict[str, Golden] = {}
    outcomes = []
    for fault in faults or list(FAULTS):
        report = fault_report(spec, model, fault, goldens, **overrides)
        outcomes.append(judge_fault(fault, profile_for(fault), report))
    return outcomes
