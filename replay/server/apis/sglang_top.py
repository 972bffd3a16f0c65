"""The top-k of SGLang's /generate answer in its two forms (replay/server/apis/sglang_parse.py
reads the rest of the answer): nested `[[logprob, token_id, text], ...]` rows, or the flat arrays
of `return_flat_raw_output_top_logprobs` (base64 or JSON lists, a shape and a null prefix).
Strict like the rest of the parser: a fast pass over the well-formed case, and where it finds
anything unusual a checked pass that names the first bad entry (`MalformedResponse`).
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np
import pybase64  # SIMD base64: 30x the standard library's decoder (docs/benchmarks.md)

from replay.server.apis.base import malformed, number, token_id
from replay.utils.bits import widen_float32

NUMBER_TYPES = {float, int}
INT32_LIMIT = 2**31
FLAT_DTYPES = {"float32": "<f4", "float64": "<f8", "int32": "<i4", "int64": "<i8"}
FLAT_KEY = "output_top_logprobs_val_flat"  # the flat form's marker (plus `_b64` when base64)


def number_and_id_columns(entries: Iterable[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The logprob and token-id columns of `[logprob, id, text]` entries when every logprob is
    a number and every id an int; None when anything is unusual (the slow path names it)."""
    try:  # an entry that is no list shows up in the column types below
        columns = list(zip(*entries))
    except TypeError:
        return None
    if len(columns) < 2:
        return None
    values, tokens = columns[:2]
    if not set(map(type, values)) <= NUMBER_TYPES or set(map(type, tokens)) != {int}:
        return None
    return values, tokens


# ---------------------------------------------------------------------------------------------
# Top-k, nested lists
# ---------------------------------------------------------------------------------------------


def nested_top(meta: dict[str, Any], request_id: str, n: int, k: int,
                vocab_size: int | None) -> tuple[np.ndarray, np.ndarray]:
    rows = meta.get("output_top_logprobs")
    if type(rows) is not list or len(rows) != n:
        got = len(rows) if isinstance(rows, list) else rows
        raise malformed(request_id, f"output_top_logprobs has {got!r} rows for {n} output ids")
    fast = _fast_nested_top(rows, k, vocab_size)
    return fast if fast else _checked_nested_top(rows, request_id, k, vocab_size)


def _fast_nested_top(
    rows: list[Any], k: int, vocab_size: int | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Full rows of exactly k well-typed, in-vocabulary, distinct entries; else None."""
    n = len(rows)
    if not n:
        return np.zeros((0, k), np.int32), np.zeros((0, k), np.float64)
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {k}:
        return None
    columns = number_and_id_columns(chain.from_iterable(rows))
    if columns is None:
        return None
    values, tokens = columns
    ids = int64(tokens)
    if ids is None or not ids_ok(ids.reshape(n, k), vocab_size):
        return None
    return ids.reshape(n, k).astype(np.int32), np.array(values, dtype=np.float64).reshape(n, k)


def ids_ok(ids: np.ndarray, vocab_size: int | None) -> bool:
    """In the vocabulary (and int32) and distinct within each row."""
    limit = INT32_LIMIT if vocab_size is None else vocab_size
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        return False
    if ids.shape[1] > 1:
        ordered = np.sort(ids, axis=1)
        if np.any(ordered[:, 1:] == ordered[:, :-1]):
            return False
    return True


def _checked_nested_top(
    rows: list[Any], request_id: str, k: int, vocab_size: int | None
) -> tuple[np.ndarray, np.ndarray]:
    n = len(rows)
    ids = np.full((n, k), -1, dtype=np.int32)
    vals = np.full((n, k), np.nan, dtype=np.float64)
    for i, row in enumerate(rows):
        if row is None:
            continue
        if not isinstance(row, list) or len(row) > k:
            raise malformed(request_id, f"output_top_logprobs[{i}] is not a list of at most {k} entries")
        seen: set[int] = set()
        for j, entry in enumerate(row):
            if not isinstance(entry, list) or len(entry) < 2:
                raise malformed(request_id, f"output_top_logprobs[{i}][{j}] is {entry!r}")
            tok = token_id(entry[1], request_id, f"output_top_logprobs[{i}][{j}][1]", vocab_size)
            if tok in seen:
                raise malformed(request_id, f"output_top_logprobs[{i}] lists token {tok} twice")
            seen.add(tok)
            ids[i, j] = tok
            vals[i, j] = number(entry[0], request_id, f"output_top_logprobs[{i}][{j}][0]")
    return ids, vals


# ---------------------------------------------------------------------------------------------
# Top-k, flat arrays
# ---------------------------------------------------------------------------------------------


def flat_top(meta: dict[str, Any], request_id: str, n: int, k: int,
              vocab_size: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The flat form as [n, k] arrays: the null prefix and any columns beyond the server's k
    are absent entries (-1, NaN), like short nested rows."""
    shape = meta.get("output_top_logprobs_shape")
    prefix = meta.get("output_top_logprobs_null_prefix", 0)
    if (type(shape) is not list or len(shape) != 2 or set(map(type, shape)) != {int}
            or min(shape) < 0):
        raise malformed(request_id, f"output_top_logprobs_shape is {shape!r}, not [rows, k]")
    if type(prefix) is not int or prefix < 0:
        raise malformed(request_id, f"output_top_logprobs_null_prefix is {prefix!r}, not a count")
    rows, width = shape
    if prefix + rows != n:
        raise malformed(request_id, f"flat top logprobs cover {prefix} + {rows} positions for "
                                    f"{n} output ids")
    if width > k:
        raise malformed(request_id, f"flat top logprobs have {width} entries per row, asked for {k}")
    if FLAT_KEY + "_b64" in meta:
        vals = _b64_array(meta, FLAT_KEY + "_b64", ("float32", "float64"), request_id)
        idx = _b64_array(meta, "output_top_logprobs_idx_flat_b64", ("int32", "int64"), request_id)
    else:
        vals = _json_array(meta, FLAT_KEY, request_id, numbers=True)
        idx = _json_array(meta, "output_top_logprobs_idx_flat", request_id, numbers=False)
    for name, arr in (("val", vals), ("idx", idx)):
        if arr.size != rows * width:
            raise malformed(request_id, f"output_top_logprobs_{name}_flat holds {arr.size} "
                                        f"values for shape [{rows}, {width}]")
    ids = idx.reshape(rows, width)  # int32 as sent (sorting int32 is the cheaper check)
    if not ids_ok(ids, vocab_size):
        _name_bad_id(ids.astype(np.int64), request_id, vocab_size, prefix)
    values = (widen_float32(vals) if vals.dtype == np.float32 else vals.astype(np.float64))
    if prefix == 0 and width == k:
        return ids.astype(np.int32), values.reshape(rows, width)
    top_ids = np.full((n, k), -1, dtype=np.int32)
    top_lps = np.full((n, k), np.nan, dtype=np.float64)
    top_ids[prefix:, :width] = ids
    top_lps[prefix:, :width] = values.reshape(rows, width)
    return top_ids, top_lps


def _b64_array(meta: dict[str, Any], key: str, dtypes: tuple[str, ...],
               request_id: str) -> np.ndarray:
    text = meta.get(key)
    dtype = meta.get(key + "_dtype", dtypes[0])
    if dtype not in dtypes:
        raise malformed(request_id, f"{key}_dtype is {dtype!r} (understood: {', '.join(dtypes)})")
    if type(text) is not str:
        raise malformed(request_id, f"{key} is missing or not a string")
    try:
        raw = pybase64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise malformed(request_id, f"{key} is not base64 ({exc})") from None
    item = np.dtype(FLAT_DTYPES[dtype])
    if len(raw) % item.itemsize:
        raise malformed(request_id, f"{key} holds {len(raw)} bytes, not whole {dtype} values")
    return np.frombuffer(raw, dtype=item)


def _json_array(meta: dict[str, Any], key: str, request_id: str, *, numbers: bool) -> np.ndarray:
    values = meta.get(key)
    if type(values) is not list:
        raise malformed(request_id, f"{key} is missing or not a list")
    allowed = NUMBER_TYPES if numbers else {int}
    if not set(map(type, values)) <= allowed:
        bad = next(v for v in values if type(v) not in allowed)
        raise malformed(request_id, f"{key} holds {bad!r}, not a {'number' if numbers else 'token id'}")
    if numbers:
        return np.array(values, dtype=np.float64)
    ids = int64(values)
    if ids is None:
        raise malformed(request_id, f"{key} holds a token id outside the int64 range")
    return ids


def int64(values: Sequence[int]) -> np.ndarray | None:
    """Python ints as an int64 array; None when one is outside int64 (the caller's slow path
    then names it: a token id >= 2^63 is a malformed answer, never an OverflowError)."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return None


def _name_bad_id(ids: np.ndarray, request_id: str, vocab_size: int | None, prefix: int) -> None:
    """Raise naming the first out-of-vocabulary or repeated id of the flat top-k."""
    for i, row in enumerate(ids.tolist()):
        seen: set[int] = set()
        for j, tok in enumerate(row):
            token_id(tok, request_id, f"flat output_top_logprobs[{prefix + i}][{j}]", vocab_size)
            if tok in seen:
                raise malformed(request_id, f"output_top_logprobs[{prefix + i}] lists token {tok} twice")
            seen.add(tok)
    raise AssertionError("unreachable: ids_ok found a problem")
