"""Requests served from any cache path give the bits a cold engine gives (real tiny model).

One small conversation drives every test: A (21 tokens, 6 new: its decode crosses the track
boundary at 24), then C (an unrelated prompt that pushes A's last pages off a 10-page device
pool), then B = A + A's output + 5 tokens, whose hit is 24 tokens split over the tiers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pytest

from replay.engine.config import get_config
from replay.engine.engine import LLMEngine
from replay.engine.model import HybridModel
from replay.engine.options import EngineOptions
from replay.engine.sequence import Sequence

TOP_K = 3
NEW_A, NEW_B = 6, 6
HIT_B = 24  # floor((21 + 6 - 1) / 8) * 8: the decode checkpoint of A

# Pages of 4, a checkpoint every 8 tokens, a 10-page device pool, host write_through.
HICACHE = EngineOptions(page_size=4, mamba_track_interval=8, max_total_tokens=40,
                        chunked_prefill_size=64, enable_hierarchical_cache=True,
                        hicache_ratio=4.0, hicache_mem_layout="page_first")
REFERENCE = EngineOptions(page_size=4, disable_radix_cache=True, disable_overlap_schedule=True)


@lru_cache(maxsize=1)
def model() -> HybridModel:
    return HybridModel(get_config("tiny"), seed=0)


def draw(seed: int, n: int) -> list[int]:
    return np.random.default_rng(seed).integers(100, 4000, n).tolist()


@dataclass(frozen=True)
class Out:
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple

    @classmethod
    def of(cls, seq: Sequence) -> "Out":
        assert seq.error is None, seq.error
        return cls(tuple(seq.output_ids), tuple(seq.output_logprobs),
                   tuple((tuple(i), tuple(v)) for i, v in seq.output_top))


@lru_cache(maxsize=1)
def prompts() -> dict[str, list[int]]:
    a, c = draw(1, 21), draw(2, 21)
    return {"A": a, "C": c, "B": a + list(cold()["A"].ids) + draw(3, 5)}


@lru_cache(maxsize=1)
def cold() -> dict[str, Out]:
    """Every prompt computed from scratch by a cache-less engine."""
    engine = LLMEngine(REFERENCE, model())
    try:
        a = draw(1, 21)
        out = {"A": Out.of(engine.generate(a, NEW_A, TOP_K)),
               "C": Out.of(engine.generate(draw(2, 21), 1, TOP_K))}
        b = a + list(out["A"].ids) + draw(3, 5)
        out["B"] = Out.of(engine.generate(b, NEW_B, TOP_K))
        return out
    finally:
        engine.close()


def generate_all(engine: LLMEngine, requests: dict[str, tuple[list[int], int]]) -> dict[str, Sequence]:
    """Submit all at once (in order) and wait for all."""
    left = threading.Semaphore(0)
    seqs = {name: engine.submit(ids, n, TOP_K, lambda _: left.release())
            for name, (ids, n) in requests.items()}
    for _ in seqs:
        left.acquire()
    return seqs


def run_conversation(options: EngineOptions) -> dict[str, Sequence]:
    """A; then C and B queued together (C is admitted first and evicts A's deepest pages)."""
    p = prompts()
    engine = LLMEngine(options, model())
    try:
        seqs = generate_all(engine, {"A": (p["A"], NEW_A)})
        return seqs | generate_all(engine, {"C": (p["C"], 1), "B": (p["B"], NEW_B)})
    finally:
        engine.close()


def assert_all_exact(seqs: dict[str, Sequence]) -> None:
    reference = cold()
    for name, seq in seqs.items():
        assert Out.of(seq) == reference[name], f"request {name} differs from the cold engine"


def test_device_cache_hit_is_bit_identical_to_a_cold_engine():
    options = replace(HICACHE, enable_hierarchical_cache=False, max_total_tokens=1024)
    seqs = run_conversation(options)
    assert seqs["B"].cached.device == HIT_B and seqs["B"].cached.total == HIT_B
    assert_all_exact(seqs)


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_hits_loaded_back_from_host_are_bit_identical(layout):
    seqs = run_conversation(replace(HICACHE, hicache_mem_layout=layout))
    cached = seqs["B"].cached
    assert cached.host > 0 and cached.total == HIT_B
    assert_all_exact(seqs)


def test_write_back_hits_from_host_are_bit_identical():
    seqs = run_conversation(replace(HICACHE, hicache_write_policy="write_back"))
    assert seqs["B"].cached.host > 0 and seqs["B"].cached.total == HIT_B
    assert_all_exact(seqs)


def test_storage_tier_hits_are_bit_identical(tmp_path):
    options = replace(HICACHE, hicache_ratio=0.6, hicache_storage_backend="file",
                      hicache_storage_dir=str(tmp_path))
    seqs = run_conversation(options)
    assert seqs["B"].cached.storage > 0 and seqs["B"].cached.total == HIT_B
    assert_all_exact(seqs)


def test_overlap_on_and_off_give_identical_bits_and_hits():
    on = run_conversation(HICACHE)
    off = run_conversation(replace(HICACHE, disable_overlap_schedule=True))
    assert {k: Out.of(s) for k, s in on.items()} == {k: Out.of(s) for k, s in off.items()}
    assert on["B"].cached == off["B"].cached


def test_concurrent_requests_in_one_batch_match_their_cold_runs():
    p = prompts()
    engine = LLMEngine(replace(HICACHE, max_total_tokens=1024), model())
    try:
        seqs = generate_all(engine, {"A": (p["A"], NEW_A), "C": (p["C"], 1)})
    finally:
        engine.close()
    assert Out.of(seqs["A"]) == cold()["A"] and Out.of(seqs["C"]) == cold()["C"]
