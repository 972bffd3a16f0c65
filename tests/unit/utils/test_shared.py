"""One object per distinct small value (replay/utils/shared.py)."""

from __future__ import annotations

from replay.utils.shared import SharedValues


def test_an_equal_dict_is_handed_back_as_the_first_one_seen():
    shared = SharedValues()
    first = shared({"device": 64})
    assert shared({"device": 64}) is first and len(shared) == 1


def test_dicts_that_differ_in_a_value_or_in_order_stay_apart():
    shared = SharedValues()
    a, b = shared({"device": 64, "host": 0}), shared({"device": 64, "host": 16})
    c = shared({"host": 0, "device": 64})
    assert a is not b and c is not a and len(shared) == 3


def test_a_dict_with_an_unhashable_value_is_held_as_it_is():
    shared = SharedValues()
    odd = {"tiers": [1, 2]}
    assert shared(odd) is odd and len(shared) == 0
