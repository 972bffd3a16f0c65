"""Forced retraction and seeded jitter (test switches): a request retracted mid-decode and
readmitted, and a scheduler that shuffles its steps, still give every bit of a cold run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from replay.engine.engine import LLMEngine
from replay.engine.options import EngineOptions
from tests.unit.engine.test_exactness import (HICACHE, NEW_A, NEW_B, REFERENCE, Out, cold, draw,
                                              generate_all, model, prompts)

ROOMY = replace(HICACHE, max_total_tokens=256)  # every request fits at once: retraction is forced


def _cold_many(requests: dict[str, tuple[list[int], int]]) -> dict[str, Out]:
    engine = LLMEngine(REFERENCE, model())
    try:
        return {name: Out.of(engine.generate(ids, n, 3)) for name, (ids, n) in requests.items()}
    finally:
        engine.close()


def _requests() -> dict[str, tuple[list[int], int]]:
    p = prompts()
    return {"A": (p["A"], NEW_A), "B": (p["B"], NEW_B), "D": (draw(11, 30), 9),
            "E": (draw(12, 17), 12)}


@pytest.mark.parametrize("overlap", [True, False])
def test_retracted_requests_resume_bit_exact(overlap):
    options = replace(ROOMY, test_retract_interval=2, disable_overlap_schedule=not overlap)
    engine = LLMEngine(options, model())
    try:
        seqs = generate_all(engine, _requests())
    finally:
        engine.close()
    assert sum(s.num_retractions for s in seqs.values()) > 0
    assert {name: Out.of(s) for name, s in seqs.items()} == _cold_many(_requests())


def test_jitter_changes_no_bit_and_no_hit():
    p = prompts()
    results = []
    for seed in (None, 0, 1):
        engine = LLMEngine(replace(ROOMY, schedule_jitter_seed=seed), model())
        try:
            first = generate_all(engine, {"A": (p["A"], NEW_A)})
            rest = generate_all(engine, {"C": (p["C"], 1), "B": (p["B"], NEW_B)})
        finally:
            engine.close()
        seqs = first | rest
        results.append(({k: Out.of(s) for k, s in seqs.items()}, seqs["B"].reused))
    assert results[0][0]["B"] == cold()["B"]
    assert results[1] == results[0] and results[2] == results[0]


def test_retraction_never_takes_the_last_running_request():
    engine = LLMEngine(replace(ROOMY, test_retract_interval=1), model())
    try:
        seq = engine.generate(prompts()["A"], NEW_A, 3)
    finally:
        engine.close()
    assert seq.num_retractions == 0 and Out.of(seq) == cold()["A"]


def test_retraction_options_are_checked():
    with pytest.raises(ValueError, match="test_retract_interval"):
        EngineOptions(test_retract_interval=-1)
    with pytest.raises(ValueError, match="schedule_jitter_seed"):
        EngineOptions(schedule_jitter_seed=-2)
