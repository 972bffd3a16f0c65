"""Shards: whole groups (or whole conversations), disjoint, covering, deterministic, valid trees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.utils.errors import UsageError
from replay.golden.model import Golden, RecordedRequest
from replay.golden.scenario import ScenarioSpec, build_plan
from replay.golden.shard import ShardSpec, parse_shard, shard_golden


def fake_golden(groups: int, branches: int, turns: int) -> Golden:
    """A golden with the scenario's tree and made-up outputs (sharding never looks at them)."""
    spec = ScenarioSpec(name="t", groups=groups, branches=branches, prefix_len=4, suffix_len=2,
                        turns=turns, turn_suffix_len=1, max_new_tokens=2)
    plan = build_plan(spec)
    requests = [
        RecordedRequest(id=r.id, group=r.group, branch=r.branch, turn=r.turn, parent=r.parent,
                        new_tokens=r.new_tokens, max_new_tokens=2,
                        output_ids=np.array([i, i + 1], dtype=np.int32),
                        logprobs=np.array([-1.0, -2.0]))
        for i, r in enumerate(plan.requests)
    ]
    return Golden(scenario=spec.to_dict(), prefixes=plan.prefixes, requests=requests,
                  sampling={}, meta={"model_info": {"model_path": "m"}})


def all_shards(golden: Golden, n: int) -> list[Golden]:
    return [shard_golden(golden, f"{i}/{n}") for i in range(1, n + 1)]


@pytest.mark.parametrize("text, index, count", [("1/1", 1, 1), ("2/4", 2, 4), (" 3 / 3 ", 3, 3)])
def test_parse_shard(text, index, count):
    assert parse_shard(text) == ShardSpec(index, count)


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "1", "a/b", "-1/2", "1/2/3", ""])
def test_invalid_shard_specs_are_usage_errors(text):
    with pytest.raises(UsageError, match="invalid --shard"):
        parse_shard(text)


@settings(max_examples=40, deadline=None)
@given(groups=st.integers(1, 5), branches=st.integers(1, 3), turns=st.integers(0, 2),
       data=st.data())
def test_shards_partition_the_golden(groups, branches, turns, data):
    golden = fake_golden(groups, branches, turns)
    n = data.draw(st.integers(1, groups * branches))
    shards = all_shards(golden, n)
    ids = [r.id for s in shards for r in s.requests]
    assert sorted(ids) == sorted(r.id for r in golden.requests)  # union is all, nothing twice
    assert all(s.requests for s in shards)  # no empty shard
    assert [[r.id for r in s.requests] for s in shards] == \
        [[r.id for r in s.requests] for s in all_shards(golden, n)]  # deterministic


@settings(max_examples=30, deadline=None)
@given(groups=st.integers(1, 4), branches=st.integers(1, 3), turns=st.integers(0, 2),
       data=st.data())
def test_every_shard_keeps_whole_conversations_with_exact_inputs(groups, branches, turns, data):
    golden = fake_golden(groups, branches, turns)
    n = data.draw(st.integers(1, groups * branches))
    for shard in all_shards(golden, n):
        for i, r in enumerate(shard.requests):
            if r.parent >= 0:
                assert r.parent < i  # still topological
                parent = shard.requests[r.parent]
                assert (parent.group, parent.branch, parent.turn) == (r.group, r.branch, r.turn - 1)
            original = golden.index(r.id)
            assert np.array_equal(shard.input_ids(i), golden.input_ids(original))


def test_whole_groups_when_there_are_enough_of_them():
    golden = fake_golden(groups=4, branches=3, turns=2)
    shards = all_shards(golden, 2)
    assert [sorted({r.group for r in s.requests}) for s in shards] == [[0, 2], [1, 3]]
    assert all(s.meta["shard"]["unit"] == "group" for s in shards)
    assert shards[0].meta["shard"] == {"index": 1, "count": 2, "unit": "group", "requests": 18,
                                       "of_requests": 36}
    assert shards[0].meta["model_info"] == {"model_path": "m"}  # the rest of meta is kept


def test_whole_conversations_when_groups_are_too_few():
    golden = fake_golden(groups=1, branches=3, turns=2)
    shards = all_shards(golden, 3)
    assert [sorted({r.branch for r in s.requests}) for s in shards] == [[0], [1], [2]]
    assert all(len(s.requests) == 3 for s in shards)
    assert shards[0].meta["shard"]["unit"] == "conversation"


def test_more_shards_than_conversations_is_refused():
    with pytest.raises(UsageError, match="at most 4 shards"):
        shard_golden(fake_golden(groups=2, branches=2, turns=1), "5/5")


def test_the_original_golden_is_not_modified():
    golden = fake_golden(groups=3, branches=2, turns=2)
    parents = [r.parent for r in golden.requests]
    shard_golden(golden, "2/3")
    assert [r.parent for r in golden.requests] == parents and "shard" not in golden.meta


def forked_golden() -> Golden:
    """One group whose branch b1 forks from b0's first turn (its t1's parent is g0/b0/t0), so a
    conversation tree is not a branch: the unit must follow `parent`, not the branch number."""
    golden = fake_golden(groups=1, branches=3, turns=1)
    ids = [r.id for r in golden.requests]
    fork = ids.index("g0/b1/t1")
    golden.requests[fork].parent = ids.index("g0/b0/t0")
    return golden


def test_a_conversation_tree_is_followed_through_parent_not_branch_numbers():
    golden = forked_golden()
    shards = all_shards(golden, 2)
    ids = [r.id for s in shards for r in s.requests]
    assert sorted(ids) == sorted(r.id for r in golden.requests)  # no request in two shards
    first = {r.id for r in shards[0].requests}
    assert {"g0/b0/t0", "g0/b0/t1", "g0/b1/t1"} <= first  # the fork stays with its tree


def test_shard_meta_counts_the_requests_the_shard_replays():
    for shard in all_shards(forked_golden(), 2):
        assert shard.meta["shard"]["requests"] == len(shard.requests)
