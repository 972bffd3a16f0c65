"""The eviction-pressure hit rule (replay/judge/cache_check.py; docs/report.md, `expect_cache`):
under a device pool smaller than what the golden puts through the cache, a hit short of the expected by whole
pages is an eviction, not a cache miss; a hit longer than possible, or not page-aligned, stays a
fail. The numbers are those seen against SGLang's real server on a CPU: page 128, a 4,096-token
pool, a parent of 576 prompt + 160 output tokens (expected hit 640, seen 512)."""

from __future__ import annotations

from replay.judge.cache_check import CacheExpectation, pool_tokens, with_eviction_pressure

PAGE = 128
POOL = {"max_total_num_tokens": 4096, "page_size": PAGE}
ATTENTION = CacheExpectation("attention", page_size=PAGE)


def problem(expectation: CacheExpectation, cached: int) -> str | None:
    return expectation.problem(turn=1, history=576, output=160, cached=cached, prompt=768)


def test_a_hit_one_page_short_under_pool_pressure_is_not_a_cache_miss():
    pressed = with_eviction_pressure(ATTENTION, POOL, footprint=6912)
    assert problem(pressed, 512) is None


def test_the_same_short_hit_without_pool_pressure_is_still_a_cache_miss():
    roomy = with_eviction_pressure(ATTENTION, POOL, footprint=4096)
    assert "not in [640, 735, 736]" in problem(roomy, 512)


def test_a_hit_longer_than_the_parents_tokens_fails_even_under_pressure():
    pressed = with_eviction_pressure(ATTENTION, POOL, footprint=6912)
    assert "not in [640, 735, 736]" in problem(pressed, 740)


def test_an_over_reported_hit_fails_even_under_pressure():
    pressed = with_eviction_pressure(ATTENTION, POOL, footprint=6912)
    assert "over-reported" in problem(pressed, 768)


def test_a_shortfall_that_is_not_whole_pages_fails_under_pressure():
    pressed = with_eviction_pressure(ATTENTION, POOL, footprint=6912)
    assert "pool pressure" in problem(pressed, 600)


def test_no_reported_pool_size_means_no_allowance():
    assert with_eviction_pressure(ATTENTION, {"page_size": PAGE}, footprint=10**6) == ATTENTION


def test_only_page_based_attention_expectations_are_relaxed():
    mamba = CacheExpectation("mamba", page_size=PAGE, interval=PAGE)
    assert with_eviction_pressure(mamba, POOL, footprint=10**6) == mamba


def test_the_pool_size_is_read_from_the_schedulers_internal_state():
    info = {"internal_states": [{"max_total_num_tokens": 4096}], "page_size": PAGE}
    assert pool_tokens(info) == 4096


def test_the_expectation_names_the_pressure_in_the_report():
    assert str(with_eviction_pressure(ATTENTION, POOL, footprint=6912)) == \
        "attention(page=128, pool pressure)"
