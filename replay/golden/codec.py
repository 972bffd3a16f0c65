"""Golden -> stored arrays and root attributes: the encoding of a golden, without any file I/O.

`encode` turns an in-memory Golden into the logical arrays (`encode_arrays`), packs them into
the stored arrays of the current layout (`replay.golden.pack`) and builds the JSON attributes
docs/golden-format.md describes. Reading goes the other way in `replay.golden.pack.unpack_table`
(the request table) and `replay.golden.stored` (each request, from the chunks that hold it).
Exactness: logprobs are stored as float32 only when every value of an array is the widening of
a float32 bit for bit (`replay.utils.bits.narrow_if_exact`), else as float64; reading widens on
integer bit patterns (`replay.utils.bits.widen_float32`), so a reader's floating-point environment
cannot change a bit. Nothing ever goes through a decimal rendering.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from replay.utils.bits import narrow_if_exact, widen_float32
from replay.utils.errors import GoldenFormatError
from replay.golden.model import Golden, RecordedRequest
from replay.golden.checks import array_sha256, attrs_sha256, check_in_memory
from replay.golden.layout import (
    INT32_MAX, INT32_MIN, PROMPT_ARRAY, REQUEST_COLUMNS, SCHEMA_PREFIX, SCHEMA_VERSION,
    request_columns,
)
from replay.golden.pack import pack
from replay.utils.redact import redact_secrets

# ---------------------------------------------------------------------------------------------
# Golden -> arrays + attributes
# ---------------------------------------------------------------------------------------------


def encode(golden: Golden) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The stored arrays and root attributes of the golden in the current layout."""
    logical = encode_arrays(golden)
    no_top = _no_top(golden)
    stored, extra = pack(logical, no_top)
    return stored, encode_attrs(golden, logical, stored, extra, no_top)


def encode_arrays(golden: Golden) -> dict[str, np.ndarray]:
    """The golden's tree as flat logical arrays (docs/golden-format.md). Validates the golden."""
    reqs = golden.requests
    k = golden.top_k
    problems = check_in_memory(golden, k)
    if problems:
        raise GoldenFormatError(f"cannot write golden: {problems[0]}")
    arrays = {
        "prefix_tokens": concat_int32([p for p in golden.prefixes], "prefix"),
        "prefix_offsets": _offsets(len(p) for p in golden.prefixes),
        "requests": _request_table(reqs),
        "new_tokens": concat_int32([r.new_tokens for r in reqs], "new_tokens"),
        "new_token_offsets": _offsets(len(r.new_tokens) for r in reqs),
        "output_ids": concat_int32([r.output_ids for r in reqs], "output_ids"),
        "output_offsets": _offsets(len(r.output_ids) for r in reqs),
        "logprobs": narrow_if_exact(concat_f64([r.logprobs for r in reqs], "logprobs")),
        "num_retractions": np.array([int(r.num_retractions) for r in reqs], dtype=np.int32),
    }
    if k > 0:
        with_top = [r for r in reqs if r.top_ids is not None]
        top_ids = concat_int32([r.top_ids for r in with_top], "top_ids").reshape(-1, k)
        top_lp = concat_f64([r.top_logprobs for r in with_top], "top_logprobs").reshape(-1, k)
        arrays["top_ids"] = top_ids
        arrays["top_logprobs"] = narrow_if_exact(top_lp)
    if golden.has_prompt_logprobs:
        arrays[PROMPT_ARRAY] = narrow_if_exact(concat_f64(
            [r.prompt_logprobs for r in reqs if r.prompt_logprobs is not None], PROMPT_ARRAY))
    return arrays


def _no_top(golden: Golden) -> list[int]:
    k = golden.top_k
    return [i for i, r in enumerate(golden.requests) if k > 0 and r.top_ids is None]


def encode_attrs(golden: Golden, arrays: dict[str, np.ndarray], stored: dict[str, np.ndarray],
                 extra: dict[str, Any], no_top: list[int]) -> dict[str, Any]:
    """Root attributes: metadata, per-request JSON columns, counts of the logical `arrays`,
    checksums of the `stored` ones, the layout's `extra` attributes, their own checksum."""
    reqs = golden.requests
    k = golden.top_k
    counts = {
        "groups": len(golden.prefixes),
        "requests": len(reqs),
        "prefix_tokens": int(arrays["prefix_tokens"].size),
        "new_tokens": int(arrays["new_tokens"].size),
        "output_tokens": int(arrays["output_ids"].size),
        "top_rows": int(arrays["top_ids"].shape[0]) if k > 0 else 0,
    }
    entries = {name: array_entry(a.dtype.name, list(a.shape), array_sha256(a))
               for name, a in stored.items()}
    prompt = None
    if golden.has_prompt_logprobs:
        prompt = {
            "starts": [int(r.prompt_logprob_start) for r in reqs],
            "counts": [0 if r.prompt_logprobs is None else len(r.prompt_logprobs) for r in reqs],
        }
    columns = RequestColumns([r.id for r in reqs], [r.finish_reason for r in reqs],
                             [r.cached_details for r in reqs], no_top)
    return root_attrs(golden.scenario, golden.sampling, golden.meta, k, columns, counts,
                      entries, extra, prompt)


@dataclass
class RequestColumns:
    """The per-request columns the root attributes hold (one entry per request, in order)."""

    ids: list[str]
    finish_reasons: list[Any]
    cached_details: list[Any]
    no_top: list[int]


def array_entry(data_type: str, shape: list[int], sha256: str) -> dict[str, Any]:
    return {"data_type": data_type, "shape": shape, "sha256": sha256}


def root_attrs(scenario: dict[str, Any], sampling: dict[str, Any], meta: dict[str, Any], k: int,
               columns: RequestColumns, counts: dict[str, int], entries: dict[str, Any],
               extra: dict[str, Any], prompt: dict[str, list[int]] | None,
               version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The root attributes of layout `version` from their parts, with their own checksum."""
    attrs: dict[str, Any] = {
        "schema": f"{SCHEMA_PREFIX}{version}",
        "scenario": _strict_json(scenario, "scenario"),
        "sampling": _strict_json(sampling, "sampling"),
        "meta": redact_secrets(_strict_json(_nonfinite_as_strings(meta), "meta")),
        "top_k": k,
        "request_columns": list(request_columns(version)),
        "request_ids": columns.ids,
        "finish_reasons": _strict_json(columns.finish_reasons, "finish_reason"),
        "cached_tokens_details": _strict_json(columns.cached_details, "cached_details"),
        "no_top_requests": columns.no_top,
        "counts": counts,
        "arrays": entries,
        **extra,
    }
    if prompt is not None:
        attrs[PROMPT_ARRAY] = prompt
    attrs["attrs_sha256"] = attrs_sha256(attrs)
    return attrs


def as_float64(values: Any, what: str) -> np.ndarray:
    """The exact float64 values of a float32 or float64 array; anything else is refused."""
    arr = np.asarray(values)
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
        raise GoldenFormatError(f"cannot write golden: {what} has dtype {arr.dtype}, expected float64")
    if arr.dtype.itemsize == 4:
        return widen_float32(arr)
    return np.ascontiguousarray(arr, dtype=np.float64)


def _request_table(reqs: list[RecordedRequest]) -> np.ndarray:
    rows = [[int(getattr(r, c)) for c in REQUEST_COLUMNS] for r in reqs]  # the logical columns
    return np.array(rows, dtype=np.int32).reshape(len(reqs), len(REQUEST_COLUMNS))


def concat_int32(parts: list[Any], what: str) -> np.ndarray:
    """Concatenate integer arrays into int32, refusing non-integer dtypes and overflow."""
    arrs = [np.asarray(p) for p in parts]
    for a in arrs:
        if a.dtype.kind not in "iu":
            raise GoldenFormatError(f"cannot write golden: {what} has dtype {a.dtype}, expected int32")
        if a.size and (a.min() < INT32_MIN or a.max() > INT32_MAX):
            raise GoldenFormatError(f"cannot write golden: {what} has values outside int32")
    if not arrs:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate([a.astype(np.int32).reshape(-1) for a in arrs])


def concat_f64(parts: list[Any], what: str) -> np.ndarray:
    arrs = [as_float64(p, what).reshape(-1) for p in parts]
    return np.concatenate(arrs) if arrs else np.zeros(0, dtype=np.float64)


def _offsets(lengths: Iterable[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(list(lengths), dtype=np.int64)]).astype(np.int64)


def _strict_json(value: Any, what: str) -> Any:
    """The value as it will read back from JSON (tuples as lists, keys as strings), refusing
    anything JSON cannot hold exactly. numpy scalars and arrays become plain numbers/lists."""
    try:
        text = json.dumps(value, allow_nan=False, default=_numpy_to_json)
    except (TypeError, ValueError) as exc:
        raise GoldenFormatError(f"cannot write golden: {what} is not plain JSON ({exc})") from None
    return json.loads(text)


def _numpy_to_json(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray) and obj.dtype.kind in "iufb":
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _nonfinite_as_strings(value: Any) -> Any:
    """Informational metadata may hold inf/NaN (server args); strict JSON cannot, so they are
    stored as the strings "Infinity", "-Infinity", "NaN"."""
    if isinstance(value, dict):
        return {k: _nonfinite_as_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nonfinite_as_strings(v) for v in value]
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value
