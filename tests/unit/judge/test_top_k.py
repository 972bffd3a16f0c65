"""SGLang's top-k tie rule: one position (`top_k_equal`), and every differing position at once
(`top_k_rows_equal`), which must give the per-position answers on any rows."""

import struct

import numpy as np
from hypothesis import given, settings, strategies as st

from replay.judge.top_k import top_k_equal, top_k_rows_equal

float32_bits = st.integers(min_value=0, max_value=2**32 - 1)
# A small pool of values so that shared tokens, ties at the minimum, zeros of both signs and NaNs
# all come up often; ids from a small range so that rows share tokens and may repeat one.
VALUES = [-1.0, -2.0, -2.5, -3.0, -0.0, 0.0, float("nan"), -1.0000001192092896, float("-inf")]
entry = st.tuples(st.integers(-1, 6), st.sampled_from(VALUES))


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def test_tie_rule_is_symmetric():
    a_ids, a_vals = np.array([1, 2, 3]), np.array([-1.0, -2.0, -3.0])
    b_ids, b_vals = np.array([1, 2, 4]), np.array([-1.0, -2.0, -3.0])
    assert top_k_equal(a_ids, a_vals, b_ids, b_vals) == top_k_equal(b_ids, b_vals, a_ids, a_vals)
    assert top_k_equal(a_ids, a_vals, b_ids, b_vals)[0]


@given(st.lists(st.tuples(st.integers(0, 50), float32_bits), min_size=1, max_size=6, unique_by=lambda t: t[0]),
       st.lists(st.tuples(st.integers(0, 50), float32_bits), min_size=1, max_size=6, unique_by=lambda t: t[0]))
def test_tie_rule_is_symmetric_for_any_lists(a, b):
    ai, av = np.array([t for t, _ in a]), np.array([f32(v) for _, v in a])
    bi, bv = np.array([t for t, _ in b]), np.array([f32(v) for _, v in b])
    assert top_k_equal(ai, av, bi, bv)[:2] == top_k_equal(bi, bv, ai, av)[:2]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5).flatmap(lambda k: st.lists(
    st.tuples(st.lists(entry, min_size=k, max_size=k), st.lists(entry, min_size=k, max_size=k)),
    min_size=1, max_size=12)))
def test_all_rows_at_once_give_each_rows_own_answer(rows):
    gi = np.array([[t for t, _ in g] for g, _ in rows], dtype=np.int64)
    gv = np.array([[v for _, v in g] for g, _ in rows], dtype=np.float64)
    ri = np.array([[t for t, _ in r] for _, r in rows], dtype=np.int64)
    rv = np.array([[v for _, v in r] for _, r in rows], dtype=np.float64)
    equal, members, worst = top_k_rows_equal(gi, gv, ri, rv)
    each = [top_k_equal(gi[i], gv[i], ri[i], rv[i]) for i in range(len(rows))]
    assert list(zip(equal.tolist(), members.tolist(), worst.tolist())) == each


def test_rows_split_across_passes_give_the_same_answers(monkeypatch):
    rng = np.random.default_rng(0)
    gi, ri = rng.integers(-1, 8, (50, 4)), rng.integers(-1, 8, (50, 4))
    gv, rv = -rng.integers(1, 4, (50, 4)).astype(np.float64), -rng.integers(1, 4, (50, 4)).astype(np.float64)
    whole = top_k_rows_equal(gi, gv, ri, rv)
    monkeypatch.setattr("replay.judge.top_k.MATCH_CELLS", 16 * 3)  # 3 rows a pass
    for a, b in zip(whole, top_k_rows_equal(gi, gv, ri, rv)):
        assert a.tolist() == b.tolist()
