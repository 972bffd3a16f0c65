"""SGLang's tie-tolerant bitwise top-k equality, for one position and for many at once.

Why two forms: `top_k_equal` states the rule for one position, as SGLang's test does (a dict per
side). A replay that a cache bug breaks has thousands of differing positions, and the rule in
Python costs about a millisecond each; `top_k_rows_equal` applies the same rule to every
differing position in a few numpy passes, and hands a row to `top_k_equal` only where a numpy
minimum or match could read it differently from the dicts (a token listed twice on one side, a
NaN or a zero among the values). A property test holds the two to the same answers.

The rule: two top-k maps are equal when every shared token has the identical value (bits) and
every token present in only one of them has the value of the other map's minimum. Ids of -1
mark absent entries.
"""

from __future__ import annotations

import numpy as np

from replay.utils.bits import same_bits, ulp_distance

MATCH_CELLS = 1 << 22  # bounds the [rows, k, k] id-match array of one pass (4 MiB of bools)


def top_k_equal(g_ids: np.ndarray, g_vals: np.ndarray, r_ids: np.ndarray,
                r_vals: np.ndarray) -> tuple[bool, bool, int]:
    """The rule for one position.

    Returns (equal, same_members, worst): `equal` under the tie rule; `same_members` when the
    token sets agree up to the tie rule (values of shared tokens may differ); `worst` the max ULP
    distance over shared tokens."""
    g = {int(t): v for t, v in zip(g_ids, g_vals) if t >= 0}
    r = {int(t): v for t, v in zip(r_ids, r_vals) if t >= 0}
    shared = g.keys() & r.keys()
    worst = 0
    values_equal = True
    for t in shared:
        a, b = np.array([g[t]]), np.array([r[t]])
        if not same_bits(a, b)[0]:
            values_equal = False
            worst = max(worst, int(ulp_distance(a, b)[0]))
    members = True
    for source, other in ((g, r), (r, g)):
        only = source.keys() - other.keys()
        if not only:
            continue
        if not other:
            members = False
            continue
        floor = np.array([min(other.values())])
        if not all(same_bits(np.array([source[t]]), floor)[0] for t in only):
            members = False
    return values_equal and members, members, worst


def top_k_rows_equal(g_ids: np.ndarray, g_vals: np.ndarray, r_ids: np.ndarray,
                     r_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`top_k_equal` for every row of [rows, k] arrays: (equal, same_members, worst) arrays."""
    rows = g_ids.shape[0]
    equal = np.empty(rows, dtype=bool)
    members = np.empty(rows, dtype=bool)
    worst = np.empty(rows, dtype=np.int64)
    k = max(1, g_ids.shape[1])
    step = max(1, MATCH_CELLS // (k * k))
    for lo in range(0, rows, step):
        part = slice(lo, min(rows, lo + step))
        equal[part], members[part], worst[part] = _rows(g_ids[part], np.asarray(g_vals[part], np.float64),
                                                        r_ids[part], np.asarray(r_vals[part], np.float64))
    return equal, members, worst


def _rows(gi: np.ndarray, gv: np.ndarray, ri: np.ndarray,
          rv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g_valid, r_valid = gi >= 0, ri >= 0
    match = (gi[:, :, None] == ri[:, None, :]) & g_valid[:, :, None] & r_valid[:, None, :]
    g_shared, r_shared = match.any(axis=2), match.any(axis=1)
    partner = np.take_along_axis(rv, match.argmax(axis=2), axis=1)  # r's value of g's token
    differs = g_shared & ~same_bits(gv, partner)
    worst = np.where(differs, ulp_distance(gv, partner), 0).max(axis=1, initial=0)
    members = (_onlies_at_floor(gv, g_valid & ~g_shared, rv, r_valid)
               & _onlies_at_floor(rv, r_valid & ~r_shared, gv, g_valid))
    equal = ~differs.any(axis=1) & members
    for row in np.flatnonzero(_dict_may_differ(gi, gv, g_valid) | _dict_may_differ(ri, rv, r_valid)):
        equal[row], members[row], worst[row] = top_k_equal(gi[row], gv[row], ri[row], rv[row])
    return equal, members, worst


def _onlies_at_floor(values: np.ndarray, only: np.ndarray, other_values: np.ndarray,
                     other_valid: np.ndarray) -> np.ndarray:
    """Per row: does every token only this side lists carry the other side's minimum (bits)?"""
    floor = np.where(other_valid, other_values, np.inf).min(axis=1, keepdims=True)
    at_floor = same_bits(values, np.broadcast_to(floor, values.shape))
    return ~(only & ~at_floor).any(axis=1) & (other_valid.any(axis=1) | ~only.any(axis=1))


def _dict_may_differ(ids: np.ndarray, values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Rows where a dict of the side's entries could read differently from the arrays: an id
    listed twice (the dict keeps the last), or a NaN or zero value (Python's `min` then depends
    on the order, and -0.0 ties +0.0)."""
    ordered = np.sort(np.where(valid, ids, -1), axis=1)
    repeated = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any(axis=1)
    odd = (valid & (np.isnan(values) | (values == 0))).any(axis=1)
    return repeated | odd
