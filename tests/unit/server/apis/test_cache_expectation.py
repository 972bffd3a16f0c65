"""The cache expectation an API adapter can name for `--expect-cache auto`, and the `any` rule
(some prefix reused on every turn >= 1) for caches that are not page-based (llama.cpp)."""

import pytest

from replay.judge.cache_check import CacheExpectation, auto_expectation, parse_expectation
from replay.utils.errors import UsageError


def test_any_asks_for_some_hit_on_later_turns_only():
    e = parse_expectation("any", {}, {})
    assert e == CacheExpectation("any") and str(e) == "any"
    assert e.problem(turn=0, history=0, output=0, cached=0, prompt=50) is None
    assert e.problem(turn=1, history=50, output=8, cached=1, prompt=70) is None
    assert "no prefix was reused" in e.problem(turn=1, history=50, output=8, cached=0, prompt=70)
    assert e.minimum(50, 8) == 1


def test_any_still_catches_an_over_reported_hit():
    e = CacheExpectation("any")
    assert "over-reported" in e.problem(turn=1, history=50, output=8, cached=70, prompt=70)


@pytest.mark.parametrize("suggested", ["none", "any"])
def test_auto_takes_the_adapters_rule(suggested):
    info = {"page_size": 16}
    assert auto_expectation(info, {}, suggested) == CacheExpectation(suggested)
    assert parse_expectation("auto", info, {}, suggested) == CacheExpectation(suggested)


def test_a_disabled_cache_wins_over_the_adapters_rule():
    info = {"disable_radix_cache": True}
    assert auto_expectation(info, {}, "any") == CacheExpectation("none")


def test_other_suggestions_are_ignored():
    assert auto_expectation({"page_size": 16}, {}, "mamba:1") == CacheExpectation("attention", page_size=16)


def test_a_server_cannot_inject_the_adapters_rule_through_its_settings():
    info = {"expect_cache_auto": "none", "page_size": 16}
    assert auto_expectation(info, {}) == CacheExpectation("attention", page_size=16)


@pytest.mark.parametrize("name, rule", [("sglang", None), ("llamacpp", "none"), ("openai", "none")])
def test_each_adapter_states_its_rule_as_a_trait(name, rule):
    from replay.server.apis import get_api

    assert get_api(name).expect_cache_auto == rule


def test_sglang_servers_are_unchanged():
    assert auto_expectation({"page_size": 64}, {}) == CacheExpectation("attention", page_size=64)


def test_the_error_lists_any():
    with pytest.raises(UsageError, match="auto, none, any, attention"):
        parse_expectation("some", {}, {})
