"""Continuous batching: how prompts are chunked, and what happens when a step fails."""

from __future__ import annotations

from dataclasses import replace

from replay.engine.engine import LLMEngine
from replay.engine.faults import Faults
from replay.engine.kv_pool import KVPool
from replay.engine.radix_cache import RadixCache
from replay.engine.scheduler import Scheduler
from replay.engine.sequence import Sequence, SeqState
from tests.unit.engine.test_exactness import HICACHE, Out, cold, model, prompts


def scheduler(budget: int, interval: int | None = 8) -> Scheduler:
    pool = KVPool(64, 4, layers=1, kv_heads=1, head_dim=2, device="cpu")
    cache = RadixCache(pool, track_interval=8, hybrid=True)
    return Scheduler(pool, cache, empty_ssm=list, chunked_prefill_size=budget, max_running=8,
                     track_interval=interval, overlap=True, faults=Faults(),
                     on_finish=lambda _: None)


def planned(s: Scheduler) -> list[tuple[str, int, int]]:
    batch = s.schedule()
    return [(c.seq.rid, c.start, c.end) for c in batch.chunks] if batch else []


def test_prefill_chunks_stop_at_track_boundaries_then_decode_one_token_per_step():
    s = scheduler(budget=64)
    s.add(Sequence("a", list(range(21)), max_new_tokens=3))
    # Planning needs no results (lengths are known), as overlap scheduling requires.
    steps = [planned(s) for _ in range(6)]
    assert steps == [[("a", 0, 8)], [("a", 8, 16)], [("a", 16, 21)],
                     [("a", 21, 22)], [("a", 22, 23)], []]
    assert s.running[0].state is SeqState.DECODING and s.running[0].fully_scheduled


def test_prefill_budget_is_shared_and_decodes_ride_along():
    s = scheduler(budget=10, interval=None)
    s.add(Sequence("a", list(range(6)), max_new_tokens=4))
    s.add(Sequence("b", list(range(100, 130)), max_new_tokens=2))
    assert planned(s) == [("a", 0, 6), ("b", 0, 4)]
    assert planned(s) == [("a", 6, 7), ("b", 4, 14)]  # a decodes while b keeps prefilling


def test_a_failing_step_fails_its_requests_and_the_engine_recovers():
    class Flaky:
        """The real model, failing its first call."""

        def __init__(self) -> None:
            self.inner, self.calls = model(), 0

        def __getattr__(self, name: str):
            return getattr(self.inner, name)

        def forward(self, items):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("device lost")
            return self.inner.forward(items)

    engine = LLMEngine(replace(HICACHE, max_total_tokens=1024), Flaky())
    try:
        failed = engine.generate(prompts()["A"], 6, 3)
        assert failed.error == "engine error: RuntimeError: device lost"
        assert Out.of(engine.generate(prompts()["A"], 6, 3)) == cold()["A"]
    finally:
        engine.close()
