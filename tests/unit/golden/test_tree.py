"""The conversation tree: one node type and one input rule for record and replay."""

import numpy as np

from replay.golden.scenario import ScenarioSpec, build_plan
from replay.golden.tree import (TreeColumns, input_ids, input_lengths, parse_request_id,
                                request_id)


def test_a_request_id_round_trips():
    assert parse_request_id(request_id(3, 1, 2)) == (3, 1, 2)


def test_anything_else_is_not_a_request_id():
    assert parse_request_id("g1/b2") is None and parse_request_id("x") is None


def test_turn_zero_input_is_prefix_then_new_tokens():
    plan = build_plan(ScenarioSpec(name="t", groups=1, branches=1, prefix_len=3, suffix_len=2,
                                   turns=1, turn_suffix_len=1, max_new_tokens=2))
    got = input_ids(plan.requests, plan.prefixes, lambda j: np.array([], np.int32), 0)
    assert got.tolist() == plan.prefixes[0].tolist() + plan.requests[0].new_tokens.tolist()


def test_a_later_turn_appends_the_parents_output_then_its_own_tokens():
    plan = build_plan(ScenarioSpec(name="t", groups=1, branches=1, prefix_len=3, suffix_len=2,
                                   turns=2, turn_suffix_len=1, max_new_tokens=2))
    outputs = {0: np.array([7, 8], np.int32), 1: np.array([9, 10], np.int32)}
    got = input_ids(plan.requests, plan.prefixes, outputs.__getitem__, 2)
    r = plan.requests
    expected = (plan.prefixes[0].tolist() + r[0].new_tokens.tolist() + [7, 8]
                + r[1].new_tokens.tolist() + [9, 10] + r[2].new_tokens.tolist())
    assert got.dtype == np.int32 and got.tolist() == expected


def test_columns_hold_every_nodes_tree_fields_in_order():
    plan = build_plan(ScenarioSpec(name="t", groups=2, branches=2, prefix_len=3, suffix_len=2,
                                   turns=2, turn_suffix_len=1, max_new_tokens=2))
    columns = TreeColumns.of(plan.requests)
    assert len(columns) == len(plan.requests)
    assert [(int(g), int(b), int(t), int(p), int(n)) for g, b, t, p, n in zip(
        columns.group, columns.branch, columns.turn, columns.parent, columns.new_lengths)] == [
        (r.group, r.branch, r.turn, r.parent, len(r.new_tokens)) for r in plan.requests]


def test_input_lengths_count_what_input_ids_builds():
    plan = build_plan(ScenarioSpec(name="t", groups=2, branches=2, prefix_len=3, suffix_len=2,
                                   turns=3, turn_suffix_len=1, max_new_tokens=2))
    outputs = [np.arange(1 + i % 3, dtype=np.int32) for i in range(len(plan.requests))]
    lengths = input_lengths(TreeColumns.of(plan.requests), plan.prefixes,
                            np.array([len(o) for o in outputs], np.int64))
    assert lengths.tolist() == [len(input_ids(plan.requests, plan.prefixes, outputs.__getitem__, i))
                                for i in range(len(plan.requests))]
