"""Layout 2's stored arrays <-> the logical arrays (layout 1's names), exactly.

Logical arrays are what `golden_codec` encodes and every check reads: `prefix_tokens`,
`prefix_offsets`, `requests` (6 columns), `new_tokens`, `new_token_offsets`, `output_ids`,
`output_offsets`, `logprobs`, `top_ids`, `top_logprobs`, plus `num_retractions` [R]. Layout 1
stores them as they are (`num_retractions` absent: all 0). Layout 2 removes what is redundant:

- under greedy decoding the chosen token is the top-1 entry: `top_ids`/`top_logprobs` keep
  ranks 1..k-1 only (`top_ids_rest`, `top_logprobs_rest`); rank 0 of top row j is the chosen
  token and its logprob (same 64 bits) unless row j is listed in the attribute
  `top1_exceptions` as `[j, token_id, "<float64 bits, 16 hex digits>"]` (exact ties, short rows);
- the request table gains `num_retractions`, `new_token_count`, `output_count`; offsets are
  their running sums; prefix offsets are the running sum of the attribute `prefix_lengths`.

`unpack` never trusts what it reads: a stored golden that contradicts itself gives problems
(one line each), never an exception and never a wrong golden.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.utils.bits import has_float32_specials, narrow_if_exact, same_bits, widen_float32
from replay.golden.layout import INT32_MAX, INT32_MIN, REQUEST_COLUMNS_V1, REQUEST_COLUMNS_V2

_V1_WIDTH = len(REQUEST_COLUMNS_V1)


def top_rows_positions(output_offsets: np.ndarray, no_top: list[int]) -> np.ndarray:
    """The flat output position of every top-k row (requests in `no_top` have no rows)."""
    skip = set(no_top)
    runs = [np.arange(output_offsets[i], output_offsets[i + 1], dtype=np.int64)
            for i in range(len(output_offsets) - 1) if i not in skip]
    return np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)


def pack(logical: dict[str, np.ndarray], no_top: list[int]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Layout 2's stored arrays and the extra root attributes they need."""
    table = np.concatenate([
        logical["requests"],
        logical["num_retractions"].reshape(-1, 1).astype(np.int32),
        np.diff(logical["new_token_offsets"]).reshape(-1, 1).astype(np.int32),
        np.diff(logical["output_offsets"]).reshape(-1, 1).astype(np.int32),
    ], axis=1)
    stored = {
        "prefix_tokens": logical["prefix_tokens"],
        "requests": np.ascontiguousarray(table, dtype=np.int32),
        "new_tokens": logical["new_tokens"],
        "output_ids": logical["output_ids"],
        "logprobs": logical["logprobs"],
    }
    extra: dict[str, Any] = {"prefix_lengths": np.diff(logical["prefix_offsets"]).tolist()}
    if "top_ids" in logical:
        ids, vals = logical["top_ids"], _as_f64(logical["top_logprobs"])
        pos = top_rows_positions(logical["output_offsets"], no_top)
        chosen_ids = logical["output_ids"][pos]
        chosen_lps = _as_f64(logical["logprobs"])[pos]
        same = (ids[:, 0] == chosen_ids) & same_bits(vals[:, 0], chosen_lps)
        rows = np.flatnonzero(~same)
        extra["top1_exceptions"] = [
            [int(j), int(ids[j, 0]), format(int(vals[j:j + 1, 0].view(np.uint64)[0]), "016x")]
            for j in rows]
        stored["top_ids_rest"] = np.ascontiguousarray(ids[:, 1:])
        stored["top_logprobs_rest"] = narrow_if_exact(vals[:, 1:])
    return stored, extra


def unpack(attrs: dict[str, Any], stored: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
    """The logical arrays of a layout-2 golden, or the problems that prevent them."""
    table = stored["requests"]
    n = len(attrs["request_ids"])
    if table.ndim != 2 or table.shape != (n, len(REQUEST_COLUMNS_V2)):
        return {}, [f"requests: shape {list(table.shape)}, expected {[n, len(REQUEST_COLUMNS_V2)]}"]
    lengths = attrs.get("prefix_lengths")
    if not (isinstance(lengths, list) and all(type(x) is int and 0 <= x <= INT32_MAX
                                              for x in lengths)):
        return {}, ["attribute prefix_lengths must be a list of counts (each within int32)"]
    counts = table[:, _V1_WIDTH:].astype(np.int64)
    if counts.size and counts.min() < 0:
        return {}, ["requests: negative num_retractions, new_token_count or output_count"]
    logical = {
        "prefix_tokens": stored["prefix_tokens"],
        "prefix_offsets": _offsets(np.array(lengths, dtype=np.int64)),
        "requests": np.ascontiguousarray(table[:, :_V1_WIDTH]),
        "num_retractions": counts[:, 0].astype(np.int32),
        "new_tokens": stored["new_tokens"],
        "new_token_offsets": _offsets(counts[:, 1]),
        "output_ids": stored["output_ids"],
        "output_offsets": _offsets(counts[:, 2]),
        "logprobs": stored["logprobs"],
    }
    if attrs["top_k"] == 0:
        return logical, []
    problems = _unpack_top(attrs, stored, logical)
    return logical, problems


def _unpack_top(attrs: dict[str, Any], stored: dict[str, np.ndarray],
                logical: dict[str, np.ndarray]) -> list[str]:
    k = attrs["top_k"]
    rest_ids, rest_lps = stored["top_ids_rest"], stored["top_logprobs_rest"]
    out_off, flat_ids, flat_lps = logical["output_offsets"], logical["output_ids"], logical["logprobs"]
    if out_off[-1] != flat_ids.size or flat_lps.shape != flat_ids.shape or flat_ids.ndim != 1:
        return ["output_count column, output_ids and logprobs disagree in length"]
    no_top = attrs["no_top_requests"]
    if not all(type(i) is int and 0 <= i < len(out_off) - 1 for i in no_top):
        return ["no_top_requests: must be sorted, unique request indices"]
    pos = top_rows_positions(out_off, no_top)
    want = (pos.size, k - 1)
    for name, a in (("top_ids_rest", rest_ids), ("top_logprobs_rest", rest_lps)):
        if a.shape != want:
            return [f"{name}: shape {list(a.shape)}, expected {list(want)}"]
    ids = np.empty((pos.size, k), dtype=np.int32)
    vals = np.empty((pos.size, k), dtype=np.float64)
    ids[:, 0] = flat_ids[pos]
    vals[:, 0] = _as_f64(flat_lps)[pos]
    ids[:, 1:] = rest_ids
    if rest_lps.dtype == np.float32 and not has_float32_specials(rest_lps):
        vals[:, 1:] = rest_lps  # the hardware cast, exact without specials (replay.utils.bits)
    else:
        vals[:, 1:] = _as_f64(rest_lps)
    exceptions = attrs.get("top1_exceptions")
    if not isinstance(exceptions, list):
        return ["attribute top1_exceptions must be a list"]
    previous = -1
    for entry in exceptions:
        if not (isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is int
                and type(entry[1]) is int and isinstance(entry[2], str)
                and previous < entry[0] < pos.size and _is_hex64(entry[2])):
            return [f"top1_exceptions: bad entry {entry!r} (sorted [row, token_id, 16 hex digits])"]
        if not INT32_MIN <= entry[1] <= INT32_MAX:
            return [f"top1_exceptions: token id {entry[1]} of row {entry[0]} is outside int32"]
        previous, ids[entry[0], 0] = entry[0], entry[1]
        vals[entry[0], 0] = np.array(int(entry[2], 16), dtype=np.uint64).view(np.float64)
    logical["top_ids"], logical["top_logprobs"] = ids, vals
    return []


def _is_hex64(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def _as_f64(a: np.ndarray) -> np.ndarray:
    return widen_float32(a) if a.dtype == np.float32 else a.astype(np.float64)
