"""Seeded sampling as SGLang defines it: deterministic per request, exact, so a sampled
conversation served from the cache replays the bits of a cold engine."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replay.engine.engine import LLMEngine
from replay.engine.exact import prefix_sum
from replay.engine.sampling import SamplingParams, uniforms
from tests.unit.engine.test_exactness import HICACHE, REFERENCE, cold, draw, model, prompts

HOT = SamplingParams(temperature=1.3, top_p=0.95, top_k=200, sampling_seed=11)


def conversation(engine: LLMEngine, sampling: SamplingParams) -> list[tuple]:
    """A, then B = A + A's output + 5 tokens (B hits A's pages on a cached engine)."""
    a = engine.generate(prompts()["A"], 6, 3, sampling=sampling)
    b = engine.generate(a.input_ids + a.output_ids + draw(3, 5), 6, 3, sampling=sampling)
    return [(s.output_ids, s.output_logprobs, s.output_top, s.reused) for s in (a, b)]


@pytest.fixture(scope="module")
def engines():
    cold_engine, cached_engine = LLMEngine(REFERENCE, model()), LLMEngine(HICACHE, model())
    yield cold_engine, cached_engine
    cold_engine.close()
    cached_engine.close()


def test_a_seeded_sampled_conversation_replays_bit_for_bit_from_the_cache(engines):
    cold_run, cached_run = (conversation(e, HOT) for e in engines)
    assert cached_run[1][3] > 0  # B was served from the cache
    assert [r[:3] for r in cached_run] == [r[:3] for r in cold_run]


def test_the_seed_decides_the_draw(engines):
    engine = engines[0]
    ids = prompts()["C"]
    same = [engine.generate(ids, 8, sampling=HOT).output_ids for _ in range(2)]
    other = engine.generate(ids, 8, sampling=SamplingParams(1.3, 0.95, 200, 0.0, 12)).output_ids
    assert same[0] == same[1] != other


def test_temperature_zero_and_top_k_one_are_greedy(engines):
    engine = engines[0]
    greedy = cold()["A"]
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=0.7, top_k=1)):
        seq = engine.generate(prompts()["A"], 6, 3, sampling=params)
        assert tuple(seq.output_ids) == greedy.ids and tuple(seq.output_logprobs) == greedy.logprobs


def test_a_tiny_top_p_or_min_p_one_keeps_only_the_most_likely_token(engines):
    engine = engines[0]
    for params in (SamplingParams(temperature=2.0, top_p=1e-6, sampling_seed=3),
                   SamplingParams(temperature=2.0, min_p=1.0, sampling_seed=3)):
        seq = engine.generate(prompts()["A"], 6, sampling=params)
        assert tuple(seq.output_ids) == cold()["A"].ids


def test_temperature_one_reports_the_raw_logprobs_a_prefill_gives(engines):
    engine = engines[0]
    sampled = engine.generate(prompts()["A"], 6, sampling=SamplingParams(temperature=1.0))
    replayed = engine.generate(sampled.input_ids + sampled.output_ids, 0, logprob_start_len=0)
    assert replayed.input_logprobs[-6:] == sampled.output_logprobs


def test_other_temperatures_report_temperature_scaled_logprobs(engines):
    seq = engines[0].generate(prompts()["A"], 1, 5, sampling=SamplingParams(temperature=0.5))
    ids, values = seq.output_top[0]
    greedy_ids, greedy_values = cold()["A"].top[0]
    assert ids[:3] == list(greedy_ids) and values[0] > greedy_values[0]  # sharper distribution


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("inf")}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"min_p": -0.5}, "min_p"),
    ({"top_k": 0}, "top_k"), ({"top_k": -2}, "top_k"), ({"sampling_seed": 2**63}, "sampling_seed"),
])
def test_sampling_params_refuse_what_sglang_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_uniforms_lie_strictly_inside_the_unit_interval_and_depend_on_every_key():
    ids = np.arange(4096)
    u = uniforms(42, 7, ids)
    assert u.dtype == np.float32 and 0 < u.min() and u.max() < 1
    assert not np.array_equal(u, uniforms(43, 7, ids))
    assert not np.array_equal(u, uniforms(42, 8, ids))
    assert np.array_equal(u, uniforms(42, 7, ids))


def test_prefix_sum_is_a_running_total():
    values = torch.from_numpy(np.random.default_rng(0).random(1000, dtype=np.float32))
    expected = np.cumsum(values.numpy().astype(np.float64))
    assert np.allclose(prefix_sum(values).numpy(), expected, rtol=1e-5)
