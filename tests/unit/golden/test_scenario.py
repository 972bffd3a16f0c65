"""Scenario specs and plans: the conversation trees that get recorded."""

from dataclasses import replace

import numpy as np
import pytest

from replay.utils.errors import UsageError
from replay.golden.scenario import PRESETS, ScenarioSpec, build_plan, check_vocab, load_scenario


def test_hicache_branching_matches_the_seed_test_shape():
    plan = build_plan(PRESETS["hicache-branching"])
    assert len(plan.requests) == 27
    assert [len(p) for p in plan.prefixes] == [512, 512, 512]
    turn0 = [r for r in plan.requests if r.turn == 0]
    assert {len(r.new_tokens) for r in turn0} == {64}
    later = [r for r in plan.requests if r.turn > 0]
    assert {len(r.new_tokens) for r in later} == {32}
    assert {r.max_new_tokens for r in plan.requests} == {160}


def test_request_ids_name_group_branch_and_turn():
    plan = build_plan(PRESETS["hicache-branching"])
    assert plan.requests[0].id == "g0/b0/t0"
    assert plan.requests[-1].id == "g2/b2/t2"


def test_parents_come_before_children():
    plan = build_plan(PRESETS["deep"])
    for i, r in enumerate(plan.requests):
        assert r.parent < i
        if r.turn > 0:
            assert plan.requests[r.parent].turn == r.turn - 1


def test_same_seed_gives_the_same_tokens():
    a, b = build_plan(PRESETS["wide"]), build_plan(PRESETS["wide"])
    assert all(np.array_equal(x.new_tokens, y.new_tokens) for x, y in zip(a.requests, b.requests))


def test_other_seed_gives_other_tokens():
    spec = PRESETS["single"]
    other = ScenarioSpec(**{**spec.to_dict(), "seed": 1})
    assert not np.array_equal(build_plan(spec).requests[0].new_tokens,
                              build_plan(other).requests[0].new_tokens)


def test_tokens_stay_in_the_declared_range():
    spec = ScenarioSpec(name="t", groups=2, branches=2, prefix_len=50, suffix_len=5, turns=1,
                        turn_suffix_len=5, max_new_tokens=4, token_lo=10, token_hi=20)
    plan = build_plan(spec)
    every = np.concatenate(plan.prefixes + [r.new_tokens for r in plan.requests])
    assert every.min() >= 10 and every.max() < 20


def test_preset_sizes():
    assert PRESETS["single"].requests == 1
    assert PRESETS["deep"].requests == 8
    assert PRESETS["wide"].requests == 16 * 4 * 2


def test_toml_file_loads(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text("groups = 1\nbranches = 2\nprefix_len = 8\nsuffix_len = 4\nturns = 1\n"
                 "turn_suffix_len = 2\nmax_new_tokens = 3\n")
    spec = load_scenario(str(f))
    assert spec.name == "mine" and spec.branches == 2 and spec.top_k == 5


def test_toml_unknown_key_is_refused(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("groups = 1\nbrnches = 2\n")
    with pytest.raises(UsageError, match="unknown scenario key"):
        load_scenario(str(f))


def test_toml_non_integer_is_refused(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('groups = "1"\nbranches = 1\nprefix_len = 8\nsuffix_len = 4\nturns = 0\n'
                 "turn_suffix_len = 0\nmax_new_tokens = 3\n")
    with pytest.raises(UsageError, match="must be an integer"):
        load_scenario(str(f))


def test_unknown_name_is_refused_with_the_presets_listed():
    with pytest.raises(UsageError, match="hicache-branching"):
        load_scenario("no-such-scenario")


def test_invalid_values_are_refused():
    with pytest.raises(UsageError, match="token_hi"):
        ScenarioSpec(name="x", groups=1, branches=1, prefix_len=1, suffix_len=1, turns=0,
                     turn_suffix_len=0, max_new_tokens=1, token_lo=5, token_hi=5)


def test_token_range_beyond_the_vocabulary_is_refused():
    with pytest.raises(UsageError, match="vocabulary has 1000 tokens"):
        check_vocab(PRESETS["single"], 1000)
    check_vocab(PRESETS["single"], 4096)


# --- per-group switches and ci-quick ------------------------------------------------------------


def _server_tokens(spec):
    """Prompt tokens sent plus tokens decoded by one replay of the scenario (outputs are always
    max_new_tokens long)."""
    from replay.golden.tree import input_ids
    plan = build_plan(spec)
    outputs = lambda j: np.zeros(plan.requests[j].max_new_tokens, dtype=np.int32)  # noqa: E731
    prompt = sum(len(input_ids(plan.requests, plan.prefixes, outputs, i))
                 for i in range(len(plan.requests)))
    return prompt + spec.requests * spec.max_new_tokens


def test_ci_quick_costs_at_most_a_quarter_of_hicache_branchings_server_tokens():
    assert 4 * _server_tokens(PRESETS["ci-quick"]) <= _server_tokens(PRESETS["hicache-branching"])


@pytest.mark.parametrize("key", ["prompt_logprobs", "salted"])
def test_a_group_switch_counts_groups_and_no_more(key):
    base = PRESETS["ci-quick"]
    assert replace(base, **{key: base.groups}).to_dict()[key] == base.groups
    with pytest.raises(UsageError, match=key):
        replace(base, **{key: base.groups + 1})
    with pytest.raises(UsageError, match=key):
        replace(base, **{key: -1})


def test_switches_that_are_off_are_not_stored_so_older_goldens_read_the_same():
    data = PRESETS["hicache-branching"].to_dict()
    assert "prompt_logprobs" not in data and "salted" not in data
    assert ScenarioSpec.from_dict(data) == PRESETS["hicache-branching"]


def test_prompt_logprobs_start_at_the_parents_input_end_and_cache_keys_are_per_request():
    from replay.golden.tree import cache_key, prompt_logprob_start
    plan = build_plan(PRESETS["ci-quick"])
    lengths = {0: 160, 6: 232}  # g0/b0/t0 and its child g0/b0/t1
    assert prompt_logprob_start(plan.requests, plan.prefixes, lengths.__getitem__, 0) == 96
    assert prompt_logprob_start(plan.requests, plan.prefixes, lengths.__getitem__, 6) == 160
    assert cache_key(plan.requests[6], 1) == "salt-g0/b0/t1"
    assert cache_key(plan.requests[2], 1) is None  # group 1 is not salted
