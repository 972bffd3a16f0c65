"""Cache-hit expectations for turn >= 1 requests, and how `auto` reads the server."""

import pytest

from replay.judge.cache_check import CacheExpectation, check_expectation, parse_expectation
from replay.run.replayer import ReplayOptions
from replay.utils.errors import UsageError

ATTN = CacheExpectation("attention", page_size=16)
MAMBA = CacheExpectation("mamba", page_size=16, interval=128)


def problem(exp, cached, history=600, output=160, prompt=792, turn=1):
    return exp.problem(turn=turn, history=history, output=output, cached=cached, prompt=prompt)


@pytest.mark.parametrize("cached", [760, 759, 752])
def test_attention_accepts_the_three_hit_lengths(cached):
    assert problem(ATTN, cached) is None


def test_attention_rejects_a_short_hit():
    assert "not in" in problem(ATTN, 512)


def test_mamba_accepts_hits_at_or_past_the_track_boundary():
    assert problem(MAMBA, 640) is None  # floor(759 / 128) * 128
    assert problem(MAMBA, 768) is None


def test_mamba_rejects_a_hit_before_the_boundary():
    assert "< 640" in problem(MAMBA, 512)


def test_no_expectation_on_turn_zero():
    assert problem(MAMBA, 0, turn=0) is None


def test_over_reported_hit_is_caught_even_without_expectations():
    assert "over-reported" in problem(CacheExpectation("none"), 792)


def test_auto_is_none_when_the_radix_cache_is_disabled():
    assert parse_expectation("auto", {"disable_radix_cache": True}, {}).kind == "none"


def test_auto_is_mamba_for_a_hybrid_model():
    e = parse_expectation("auto", {"page_size": 64, "mamba_track_interval": 128},
                          {"model_type": "hybrid"})
    assert (e.kind, e.interval) == ("mamba", 128)


def test_auto_is_attention_for_other_models():
    e = parse_expectation("auto", {"page_size": 64, "mamba_track_interval": 256},
                          {"model_type": "llama"})
    assert (e.kind, e.page_size) == ("attention", 64)


def test_mamba_interval_can_be_given():
    assert parse_expectation("mamba:256", {}, {}).interval == 256


@pytest.mark.parametrize("text", ["mamba", "mamba:x", "mamba:0", "radix", ""])
def test_invalid_expectations_are_refused(text):
    with pytest.raises(UsageError):
        parse_expectation(text, {}, {})


def test_auto_trusts_sglangs_own_hybrid_detection_over_the_name():
    info = {"page_size": 128, "mamba_track_interval": 128, "uses_mamba_radix_cache": True,
            "mamba_radix_cache_strategy": "extra_buffer", "model_path": "/models/plain-name"}
    assert str(parse_expectation("auto", info, {})) == "mamba:128"


def test_auto_is_attention_when_sglang_says_the_model_is_not_hybrid():
    info = {"page_size": 128, "mamba_track_interval": 256, "uses_mamba_radix_cache": False,
            "model_path": "org/some-hybrid-sounding-name"}
    assert str(parse_expectation("auto", info, {})) == "attention(page=128)"


def test_auto_asks_only_for_some_reuse_of_a_no_buffer_hybrid():
    info = {"page_size": 1, "mamba_track_interval": 256, "uses_mamba_radix_cache": True,
            "mamba_radix_cache_strategy": "no_buffer"}
    assert str(parse_expectation("auto", info, {})) == "any"


@pytest.mark.parametrize("model_info", [
    {"model_type": "inkling_model"},
    {"architectures": ["InklingForConditionalGeneration"]},
    {"architectures": ["KimiLinearForCausalLM"]},
    {"architectures": ["Qwen3_5MoeForCausalLM"]},
    {"model_path": "Qwen/Qwen3.5-35B-A3B"},
    {"architectures": ["Lfm2MoeForCausalLM"]},
    {"model_type": "gigachat3_5"},
])
def test_older_servers_fall_back_to_name_markers_that_know_the_seeds_model(model_info):
    info = {"page_size": 128, "mamba_track_interval": 128}
    assert str(parse_expectation("auto", info, model_info)) == "mamba:128"


def test_tier_counts_kept_apart_from_the_answers_add_their_difference():
    from replay.judge.cache_check import HitTally

    tally = HitTally()
    tally.add_sources({"device": 100, "storage": 0}, {"device": 484, "storage": 256, "host": 0})
    tally.add_sources(None, {"device": 999})  # a server without such counts adds nothing
    assert dict(tally.tiers) == {"device": 384, "storage": 256}


@pytest.mark.parametrize("text", ["auto", "none", "any", "attention", "mamba", "mamba:", "mamba:64"])
def test_every_expectation_form_passes_the_check_made_before_any_server_runs(text):
    check_expectation(text)


@pytest.mark.parametrize("text, message", [
    ("atention", "use auto, none, any, attention or mamba:INTERVAL"),
    ("mamba:0", "INTERVAL > 0"), ("mamba:x", "INTERVAL > 0"), ("", "use auto")])
def test_a_malformed_expectation_is_refused_with_no_server_facts(text, message):
    with pytest.raises(UsageError, match=message):
        check_expectation(text)


def test_replay_options_refuse_an_expect_cache_typo_on_construction():
    with pytest.raises(UsageError, match="invalid --expect-cache 'nonee'"):
        ReplayOptions(expect_cache="nonee")
