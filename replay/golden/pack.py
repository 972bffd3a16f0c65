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

from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.utils.bits import narrow_if_exact, same_bits, widen_float32
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
    if "prompt_logprobs" in logical:
        stored["prompt_logprobs"] = logical["prompt_logprobs"]
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


@dataclass
class Table:
    """The logical request table of a stored golden, from its small arrays and attributes only
    (no per-position array is read): what `replay.golden.stored` reads requests with."""

    requests: np.ndarray  # int32 [R, 6]: the version-1 columns
    num_retractions: np.ndarray  # int32 [R]
    prefix_offsets: np.ndarray  # int64 [G + 1]
    new_token_offsets: np.ndarray  # int64 [R + 1]
    output_offsets: np.ndarray  # int64 [R + 1]
    top1: Top1 | None = None  # layouts 2 and 3 with top-k: rank 0 is the chosen token but here


@dataclass
class Top1:
    """Top rows whose rank 0 is not the chosen token and its logprob (layout 2's
    `top1_exceptions`), sorted by row."""

    rows: np.ndarray  # int64
    ids: np.ndarray  # int32
    values: np.ndarray  # float64, from the stored bits


def unpack_table(version: int, attrs: dict[str, Any], small: dict[str, np.ndarray],
                 shapes: dict[str, tuple[int, ...]]) -> tuple[Table | None, list[str]]:
    """The logical table of a stored golden of layout `version` (`small`: its stored `requests`
    and, for layout 1, its offsets arrays; `shapes`: every stored array's shape), or the
    problems that prevent it."""
    if version < 2:
        n = len(attrs["request_ids"])
        return Table(small["requests"], np.zeros(n, dtype=np.int32), small["prefix_offsets"],
                     small["new_token_offsets"], small["output_offsets"]), []
    table = small["requests"]
    n = len(attrs["request_ids"])
    if table.ndim != 2 or table.shape != (n, len(REQUEST_COLUMNS_V2)):
        return None, [f"requests: shape {list(table.shape)}, expected {[n, len(REQUEST_COLUMNS_V2)]}"]
    lengths = attrs.get("prefix_lengths")
    if not (isinstance(lengths, list) and all(type(x) is int and 0 <= x <= INT32_MAX
                                              for x in lengths)):
        return None, ["attribute prefix_lengths must be a list of counts (each within int32)"]
    counts = table[:, _V1_WIDTH:].astype(np.int64)
    if counts.size and counts.min() < 0:
        return None, ["requests: negative num_retractions, new_token_count or output_count"]
    logical = Table(
        requests=np.ascontiguousarray(table[:, :_V1_WIDTH]),
        num_retractions=counts[:, 0].astype(np.int32),
        prefix_offsets=_offsets(np.array(lengths, dtype=np.int64)),
        new_token_offsets=_offsets(counts[:, 1]),
        output_offsets=_offsets(counts[:, 2]),
    )
    if attrs["top_k"] == 0:
        return logical, []
    logical.top1, problems = _unpack_top1(attrs, shapes, logical)
    return logical, problems


def _unpack_top1(attrs: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                 table: Table) -> tuple[Top1 | None, list[str]]:
    k = attrs["top_k"]
    out_off = table.output_offsets
    flat = shapes["output_ids"]
    if out_off[-1] != (flat[0] if flat else 0) or shapes["logprobs"] != flat or len(flat) != 1:
        return None, ["output_count column, output_ids and logprobs disagree in length"]
    no_top = attrs["no_top_requests"]
    if not all(type(i) is int and 0 <= i < len(out_off) - 1 for i in no_top):
        return None, ["no_top_requests: must be sorted, unique request indices"]
    lengths = np.diff(out_off)
    rows = int(lengths.sum() - lengths[sorted(set(no_top))].sum())
    want = (rows, k - 1)
    for name in ("top_ids_rest", "top_logprobs_rest"):
        if shapes[name] != want:
            return None, [f"{name}: shape {list(shapes[name])}, expected {list(want)}"]
    exceptions = attrs.get("top1_exceptions")
    if not isinstance(exceptions, list):
        return None, ["attribute top1_exceptions must be a list"]
    previous = -1
    for entry in exceptions:
        if not (isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is int
                and type(entry[1]) is int and isinstance(entry[2], str)
                and previous < entry[0] < rows and _is_hex64(entry[2])):
            return None, [f"top1_exceptions: bad entry {entry!r} (sorted [row, token_id, 16 hex digits])"]
        if not INT32_MIN <= entry[1] <= INT32_MAX:
            return None, [f"top1_exceptions: token id {entry[1]} of row {entry[0]} is outside int32"]
        previous = entry[0]
    return Top1(
        rows=np.array([e[0] for e in exceptions], dtype=np.int64),
        ids=np.array([e[1] for e in exceptions], dtype=np.int32),
        values=np.array([int(e[2], 16) for e in exceptions], dtype=np.uint64).view(np.float64),
    ), []


def _is_hex64(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)


def _as_f64(a: np.ndarray) -> np.ndarray:
    return widen_float32(a) if a.dtype == np.float32 else a.astype(np.float64)
