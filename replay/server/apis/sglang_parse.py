"""The strict parser of SGLang's /generate answer (sglang-protocol.md), fast on the usual case.

Every answer is validated in full: types (an int is never a bool, a logprob is a number), token
ids inside the vocabulary, no token twice in one top-k row, counts, and `output_token_logprobs`
aligned with `output_ids`. Anything outside the protocol's promise raises `MalformedResponse`
naming the request, because an answer that cannot be read exactly must never become a verdict.

Speed: `parse_text` decodes the answer's text with a typed msgspec schema, so every type is
checked in C while decoding, then checks ids, counts and alignment with numpy. Whatever that
fast path does not accept as a whole (a type outside the schema, an abort, a short answer,
anything unusual) is decoded untyped and judged by `parse_completion`, the one authority on
what is malformed and how the message reads. `parse_completion` itself checks a well-formed
answer in a few C-speed passes (type sets, numpy); only when a pass finds something unusual does
the slow path walk the entries to name the first bad one.

Top-k comes in one of two forms, detected per answer (an older server ignores the request for
the flat form and answers with nested lists):
- nested: `output_top_logprobs[i] = [[logprob, token_id, text], ...]`;
- flat (`return_flat_raw_output_top_logprobs`, SGLang >= 0.5.23): `output_top_logprobs_val_flat_b64`
  / `_idx_flat_b64` (base64 of little-endian arrays, dtype in the `_dtype` markers) or, without
  b64, `_val_flat` / `_idx_flat` JSON lists; `output_top_logprobs_shape = [rows, k]` and
  `output_top_logprobs_null_prefix` leading positions without top-k. float32 values are widened
  on bit patterns (`replay.utils.bits.widen_float32`): the very bits the nested form carries.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any, Optional, TypeVar, Union

import msgspec
import numpy as np
import pybase64  # SIMD base64: 30x the standard library's decoder (docs/benchmarks.md)

from replay.server.apis.base import Completion, MisreportedId, malformed, number, token_id
from replay.utils.bits import widen_float32
from replay.utils.errors import MalformedResponse
from replay.server.jsonio import decode, too_deep

_NUMBER_TYPES = {float, int}
_INT32_LIMIT = 2**31
_FLAT_DTYPES = {"float32": "<f4", "float64": "<f8", "int32": "<i4", "int64": "<i8"}
FLAT_KEY = "output_top_logprobs_val_flat"  # the flat form's marker (plus `_b64` when base64)


_Entry = tuple[float, int, Optional[str]]  # [logprob, token_id, text]
_T = TypeVar("_T")
_Maybe = Union[_T, None, msgspec.UnsetType]


class _Finish(msgspec.Struct):
    type: str


class _Meta(msgspec.Struct):
    """The meta_info keys the fast path reads (others are ignored, as by parse_completion)."""

    output_token_logprobs: list[_Entry]
    cached_tokens: int
    finish_reason: _Finish
    prompt_tokens: Optional[int] = None
    num_retractions: Optional[int] = None
    cached_tokens_details: Optional[dict[str, Any]] = None
    output_top_logprobs: Optional[list[list[_Entry]]] = None
    # The flat form: UNSET when absent, so that an explicit null reaches `_flat_top` as null.
    output_top_logprobs_val_flat_b64: _Maybe[str] = msgspec.UNSET
    output_top_logprobs_idx_flat_b64: _Maybe[str] = msgspec.UNSET
    output_top_logprobs_val_flat_b64_dtype: _Maybe[str] = msgspec.UNSET
    output_top_logprobs_idx_flat_b64_dtype: _Maybe[str] = msgspec.UNSET
    output_top_logprobs_val_flat: _Maybe[list[float]] = msgspec.UNSET
    output_top_logprobs_idx_flat: _Maybe[list[int]] = msgspec.UNSET
    output_top_logprobs_shape: _Maybe[list[int]] = msgspec.UNSET
    output_top_logprobs_null_prefix: _Maybe[int] = msgspec.UNSET


class _Answer(msgspec.Struct):
    output_ids: list[int]
    meta_info: _Meta


_DECODER = msgspec.json.Decoder(_Answer)
_FLAT_FIELDS = tuple(f for f in _Meta.__struct_fields__ if f.startswith("output_top_logprobs_"))


def parse_text(text: str | bytes, request_id: str, *, max_new_tokens: int, top_k: int,
               vocab_size: int | None = None) -> Completion:
    """Validate and convert one /generate answer from its JSON text."""
    try:
        answer = _DECODER.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError):
        answer = None
    except RecursionError:
        raise too_deep(f"request {request_id}") from None
    fast = _typed(answer, request_id, max_new_tokens, top_k, vocab_size) if answer else None
    if fast is not None:
        return fast
    return parse_completion(decode(text, f"request {request_id}"), request_id,
                            max_new_tokens=max_new_tokens, top_k=top_k, vocab_size=vocab_size)


def _typed(answer: _Answer, request_id: str, n: int, k: int,
           vocab_size: int | None) -> Completion | None:
    """The Completion of a typed answer that passes every check, else None."""
    meta = answer.meta_info
    ids_raw = answer.output_ids
    counts = (meta.cached_tokens, meta.prompt_tokens or 0, meta.num_retractions or 0)
    if (len(ids_raw) != n or meta.finish_reason.type == "abort" or min(counts) < 0
            or len(meta.output_token_logprobs) != n):
        return None
    output_ids = _int64(ids_raw)
    limit = _INT32_LIMIT if vocab_size is None else vocab_size
    if output_ids is None or output_ids.size and (output_ids.min() < 0 or output_ids.max() >= limit):
        return None
    if n:
        values, tokens, _ = zip(*meta.output_token_logprobs)
        if list(tokens) != ids_raw:
            return None
        logprobs = np.array(values, dtype=np.float64)
    else:
        logprobs = np.zeros(0, dtype=np.float64)
    top_ids = top_lps = None
    if k > 0:
        if meta.output_top_logprobs_val_flat_b64 is not msgspec.UNSET \
                or meta.output_top_logprobs_val_flat is not msgspec.UNSET:
            flat = {f: getattr(meta, f) for f in _FLAT_FIELDS
                    if getattr(meta, f) is not msgspec.UNSET}
            top_ids, top_lps = _flat_top(flat, request_id, n, k, vocab_size)
        else:
            rows = meta.output_top_logprobs
            if rows is None or len(rows) != n or (n and set(map(len, rows)) != {k}):
                return None
            if n:  # types were checked while decoding
                values, tokens, _ = zip(*chain.from_iterable(rows))
                ids = _int64(tokens)
                if ids is None or not _ids_ok(ids.reshape(n, k), vocab_size):
                    return None
                top_ids = ids.reshape(n, k).astype(np.int32)
                top_lps = np.array(values, dtype=np.float64).reshape(n, k)
            else:
                top_ids, top_lps = np.zeros((0, k), np.int32), np.zeros((0, k), np.float64)
    details = meta.cached_tokens_details or {}
    return Completion(
        output_ids=output_ids.astype(np.int32),
        logprobs=logprobs,
        top_ids=top_ids,
        top_logprobs=top_lps,
        cached_tokens=meta.cached_tokens,
        cached_details={key: int(v) for key, v in details.items()
                        if isinstance(v, int) and not isinstance(v, bool)},
        finish_reason=meta.finish_reason.type,
        prompt_tokens=meta.prompt_tokens,
        num_retractions=meta.num_retractions or 0,
    )


def parse_completion(
    obj: Any,
    request_id: str,
    *,
    max_new_tokens: int,
    top_k: int,
    vocab_size: int | None = None,
) -> Completion:
    """Validate and convert one /generate response object."""
    if type(obj) is not dict:
        raise malformed(request_id, f"expected a JSON object, got {type(obj).__name__}")
    meta = obj.get("meta_info")
    if type(meta) is not dict:
        raise malformed(request_id, "meta_info is missing")
    finish_type = _finish_type(meta, request_id)
    ids_raw = obj.get("output_ids")
    if type(ids_raw) is not list:
        raise malformed(request_id, "output_ids is missing")
    n = len(ids_raw)
    output_ids = _token_ids(ids_raw, request_id, vocab_size)
    if n != max_new_tokens:
        raise _length_error(meta, request_id, n, max_new_tokens, finish_type)

    token_lps = meta.get("output_token_logprobs")
    if type(token_lps) is not list or len(token_lps) != n:
        got = len(token_lps) if isinstance(token_lps, list) else token_lps
        raise malformed(request_id, f"output_token_logprobs has {got!r} entries for {n} output ids")
    logprobs = _fast_token_logprobs(token_lps, output_ids)
    if logprobs is None:  # something is off: the slow path names it
        logprobs = _checked_token_logprobs(token_lps, output_ids, request_id, vocab_size)

    top_ids = top_lps = None
    if top_k > 0:
        if FLAT_KEY + "_b64" in meta or FLAT_KEY in meta:
            top_ids, top_lps = _flat_top(meta, request_id, n, top_k, vocab_size)
        else:
            top_ids, top_lps = _nested_top(meta, request_id, n, top_k, vocab_size)

    cached = _count(meta, "cached_tokens", request_id, required=True)
    details_raw = meta.get("cached_tokens_details") or {}
    if type(details_raw) is not dict:
        raise malformed(request_id, f"cached_tokens_details is {details_raw!r}")
    details = {
        k: int(v) for k, v in details_raw.items()
        if isinstance(v, int) and not isinstance(v, bool)
    }
    return Completion(
        output_ids=output_ids,
        logprobs=logprobs,
        top_ids=top_ids,
        top_logprobs=top_lps,
        cached_tokens=int(cached or 0),
        cached_details=details,
        finish_reason=finish_type,
        prompt_tokens=_count(meta, "prompt_tokens", request_id, required=False),
        num_retractions=_count(meta, "num_retractions", request_id, required=False) or 0,
    )


# ---------------------------------------------------------------------------------------------
# Finish reason, length, counts
# ---------------------------------------------------------------------------------------------


def _finish_type(meta: dict[str, Any], request_id: str) -> str:
    """The finish reason's type; an abort (which SGLang answers with 200 when it carries no
    status) is an error naming the server's message."""
    finish = meta.get("finish_reason")
    finish_type = finish.get("type") if isinstance(finish, dict) else finish
    if not isinstance(finish_type, str):
        raise malformed(request_id, f"finish_reason is {finish!r}")
    if finish_type == "abort":
        message = finish.get("message") if isinstance(finish, dict) else None
        raise MalformedResponse(f"request {request_id}: the server aborted the request: "
                                f"{_one_line(message) if message else 'no message given'}")
    return finish_type


def _length_error(meta: dict[str, Any], request_id: str, n: int, max_new_tokens: int,
                  finish_type: str) -> MalformedResponse:
    if n < max_new_tokens and finish_type == "length":
        prompt = meta.get("prompt_tokens")
        return MalformedResponse(
            f"request {request_id}: the server capped max_new_tokens (its context length or KV "
            f"budget): {n} output tokens received for max_new_tokens {max_new_tokens} with "
            f"ignore_eos, prompt_tokens {prompt if prompt is not None else 'not reported'}")
    return malformed(request_id, f"{n} output tokens, expected exactly {max_new_tokens} "
                                 f"(ignore_eos; finish_reason {finish_type})")


def _count(meta: dict[str, Any], key: str, request_id: str, required: bool) -> int | None:
    value = meta.get(key)
    if value is None:
        if required:
            raise malformed(request_id, f"meta_info.{key} is missing")
        return None
    if type(value) is not int or value < 0:
        raise malformed(request_id, f"meta_info.{key} is {value!r}, not a count")
    return value


def _one_line(text: Any, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------------------------------
# Output ids and their logprobs
# ---------------------------------------------------------------------------------------------


def _token_ids(values: list[Any], request_id: str, vocab_size: int | None) -> np.ndarray:
    if set(map(type, values)) <= {int}:
        ids = _int64(values)
        limit = _INT32_LIMIT if vocab_size is None else vocab_size
        if ids is not None and (not ids.size or (ids.min() >= 0 and ids.max() < limit)):
            return ids.astype(np.int32)
    return np.array([token_id(t, request_id, f"output_ids[{i}]", vocab_size)
                     for i, t in enumerate(values)], dtype=np.int32)


def _number_and_id_columns(entries: Iterable[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The logprob and token-id columns of `[logprob, id, text]` entries when every logprob is
    a number and every id an int; None when anything is unusual (the slow path names it)."""
    try:  # an entry that is no list shows up in the column types below
        columns = list(zip(*entries))
    except TypeError:
        return None
    if len(columns) < 2:
        return None
    values, tokens = columns[:2]
    if not set(map(type, values)) <= _NUMBER_TYPES or set(map(type, tokens)) != {int}:
        return None
    return values, tokens


def _fast_token_logprobs(entries: list[Any], output_ids: np.ndarray) -> np.ndarray | None:
    """The common, well-formed case in a few C-speed passes; None when anything is unusual."""
    if not entries:
        return np.zeros(0, dtype=np.float64)
    columns = _number_and_id_columns(entries)
    if columns is None:
        return None
    values, tokens = columns
    ids = _int64(tokens)
    if ids is None or not np.array_equal(ids, output_ids):
        return None
    return np.array(values, dtype=np.float64)


def _checked_token_logprobs(
    entries: list[Any], output_ids: np.ndarray, request_id: str, vocab_size: int | None
) -> np.ndarray:
    logprobs = np.empty(len(entries), dtype=np.float64)
    for i, entry in enumerate(entries):
        if not isinstance(entry, list) or len(entry) < 2:
            raise malformed(request_id, f"output_token_logprobs[{i}] is {entry!r}")
        logprobs[i] = number(entry[0], request_id, f"output_token_logprobs[{i}][0]")
        tok = token_id(entry[1], request_id, f"output_token_logprobs[{i}][1]", vocab_size)
        if tok != output_ids[i]:
            raise malformed(request_id, f"output_token_logprobs[{i}] names token {tok}, output_ids has {output_ids[i]}")
    return logprobs


# ---------------------------------------------------------------------------------------------
# Top-k, nested lists
# ---------------------------------------------------------------------------------------------


def _nested_top(meta: dict[str, Any], request_id: str, n: int, k: int,
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
    columns = _number_and_id_columns(chain.from_iterable(rows))
    if columns is None:
        return None
    values, tokens = columns
    ids = _int64(tokens)
    if ids is None or not _ids_ok(ids.reshape(n, k), vocab_size):
        return None
    return ids.reshape(n, k).astype(np.int32), np.array(values, dtype=np.float64).reshape(n, k)


def _ids_ok(ids: np.ndarray, vocab_size: int | None) -> bool:
    """In the vocabulary (and int32) and distinct within each row."""
    limit = _INT32_LIMIT if vocab_size is None else vocab_size
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


def _flat_top(meta: dict[str, Any], request_id: str, n: int, k: int,
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
    if not _ids_ok(ids, vocab_size):
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
    item = np.dtype(_FLAT_DTYPES[dtype])
    if len(raw) % item.itemsize:
        raise malformed(request_id, f"{key} holds {len(raw)} bytes, not whole {dtype} values")
    return np.frombuffer(raw, dtype=item)


def _json_array(meta: dict[str, Any], key: str, request_id: str, *, numbers: bool) -> np.ndarray:
    values = meta.get(key)
    if type(values) is not list:
        raise malformed(request_id, f"{key} is missing or not a list")
    allowed = _NUMBER_TYPES if numbers else {int}
    if not set(map(type, values)) <= allowed:
        bad = next(v for v in values if type(v) not in allowed)
        raise malformed(request_id, f"{key} holds {bad!r}, not a {'number' if numbers else 'token id'}")
    if numbers:
        return np.array(values, dtype=np.float64)
    ids = _int64(values)
    if ids is None:
        raise malformed(request_id, f"{key} holds a token id outside the int64 range")
    return ids


def _int64(values: Sequence[int]) -> np.ndarray | None:
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
    raise AssertionError("unreachable: _ids_ok found a problem")


def parse_prompt_logprobs(text: str | bytes, request_id: str, input_ids: np.ndarray,
                          start: int) -> tuple[np.ndarray, tuple[MisreportedId, ...]]:
    """`meta_info.input_token_logprobs` of an answer asked with `logprob_start_len = start`:
    one `[logprob, token_id, text]` entry per input token from `start`. The first entry's
    logprob is not kept (SGLang sends null there: the token before it is not scored); the rest,
    the logprobs of input tokens start+1 .., are returned as float64, with every entry whose id
    is not the input's (SGLang 0.5.17-0.5.23 report the vocabulary's last id as 0: the server's
    bug, named as such by the replay, never a reason to refuse the answer)."""
    obj = decode(text, f"request {request_id}")
    meta = obj.get("meta_info") if isinstance(obj, dict) else None
    entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    want = len(input_ids) - start
    if not isinstance(entries, list):
        raise malformed(request_id, "no input_token_logprobs list (prompt logprobs were asked)")
    if len(entries) != want:
        raise malformed(request_id, f"{len(entries)} input_token_logprobs for {want} prompt "
                                    f"tokens from logprob_start_len {start}")
    values = np.empty(max(0, want - 1), dtype=np.float64)
    misreported = []
    for j, entry in enumerate(entries):
        where = f"input_token_logprobs[{j}]"
        if not isinstance(entry, list) or len(entry) < 2:
            raise malformed(request_id, f"{where} is not a [logprob, token_id, text] entry")
        reported = token_id(entry[1], request_id, f"{where}'s token id", None)
        if reported != int(input_ids[start + j]):
            misreported.append(MisreportedId(start + j, int(input_ids[start + j]), reported))
        if j > 0:
            values[j - 1] = number(entry[0], request_id, f"{where}'s logprob")
    return values, tuple(misreported)
