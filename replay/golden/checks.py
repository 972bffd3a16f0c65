"""Golden vetting: every check that decides whether stored bytes may become a Golden.

Pure functions over JSON and numpy arrays, no file I/O except reading an array's own zarr.json
as plain JSON: the root attributes' shape, the schema version, each array's metadata before zarr
instantiates anything from it (numeric data types, a regular grid, only the codecs the writer
uses: a golden naming a pickle codec is refused, never run), the checksums, and the structure
of the loaded arrays (offsets, shapes, counts, a topological tree). Problems are returned as
one-line strings so that `verify_golden` can list them all; `Unreadable` stops at once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from replay.golden.model import Golden, RecordedRequest
from replay.golden.layout import (
    ALLOWED_BYTES_TO_BYTES, ARRAY_DTYPES, INT32_MAX, INT32_MIN, READABLE_VERSIONS,
    REQUEST_COLUMNS, SCHEMA_PREFIX, TOP_ARRAYS, request_columns,
)


class Unreadable(Exception):
    """A problem that stops reading at once (the path or the root metadata is unusable)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Checksums
# ---------------------------------------------------------------------------------------------


def array_sha256(a: np.ndarray) -> str:
    """sha256 of "<data_type>;<shape, comma-separated>;" then the C-order little-endian bytes."""
    le = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    h = hashlib.sha256(f"{a.dtype.name};{','.join(str(n) for n in a.shape)};".encode("ascii"))
    h.update(le.tobytes())
    return h.hexdigest()


def attrs_sha256(attrs: dict[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of every root attribute but
    `attrs_sha256` itself."""
    rest = {key: v for key, v in attrs.items() if key != "attrs_sha256"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def safe_attrs_sha256(attrs: dict[str, Any]) -> str | None:
    try:
        return attrs_sha256(attrs)
    except (TypeError, ValueError):
        return None  # e.g. NaN in hand-edited attributes: cannot match


# ---------------------------------------------------------------------------------------------
# Root attributes
# ---------------------------------------------------------------------------------------------


def schema_version(attrs: dict[str, Any]) -> int:
    """The layout version the attributes name; Unreadable for anything this tool cannot read."""
    if "schema" not in attrs:
        raise Unreadable("is not a golden (no 'schema' attribute)")
    schema = attrs["schema"]
    m = re.fullmatch(re.escape(SCHEMA_PREFIX) + r"(\d+)", schema) if isinstance(schema, str) else None
    if m and int(m[1]) in READABLE_VERSIONS:
        return int(m[1])
    newest = f"{SCHEMA_PREFIX}{max(READABLE_VERSIONS)}"
    if m and int(m[1]) > max(READABLE_VERSIONS):
        raise Unreadable(
            f"golden schema {schema} is newer than this tool understands ({newest}): "
            "upgrade golden-replay"
        )
    raise Unreadable(f"unknown golden schema {schema!r} (this tool reads up to {newest})")


def attrs_problem(attrs: dict[str, Any], version: int) -> str | None:
    """The first thing wrong with the root attributes' shape, or None."""
    expect: dict[str, type | tuple[type, ...]] = {
        "scenario": dict, "sampling": dict, "meta": dict, "top_k": int, "request_columns": list,
        "request_ids": list, "finish_reasons": list, "cached_tokens_details": list,
        "no_top_requests": list, "counts": dict, "arrays": dict,
    }
    for key, typ in expect.items():
        if key not in attrs:
            return f"missing attribute {key!r}"
        if not isinstance(attrs[key], typ) or isinstance(attrs[key], bool):
            return f"attribute {key!r} must be a {typ.__name__}"  # type: ignore[union-attr]
    if attrs["top_k"] < 0:
        return "attribute 'top_k' must be >= 0"
    columns = list(request_columns(version))
    if attrs["request_columns"] != columns:
        return f"attribute 'request_columns' must be {columns}"
    if not all(isinstance(x, str) for x in attrs["request_ids"]):
        return "request_ids must be strings"
    if not all(x is None or isinstance(x, str) for x in attrs["finish_reasons"]):
        return "finish_reasons must be strings"
    if not all(isinstance(x, dict) for x in attrs["cached_tokens_details"]):
        return "cached_tokens_details must be objects"
    n = len(attrs["request_ids"])
    if len(attrs["finish_reasons"]) != n or len(attrs["cached_tokens_details"]) != n:
        return "request_ids, finish_reasons and cached_tokens_details differ in length"
    prompt = _prompt_attr_problem(attrs.get("prompt_logprobs"), n) \
        if "prompt_logprobs" in attrs else None
    if prompt:
        return prompt
    for name, entry in attrs["arrays"].items():
        if not (isinstance(entry, dict) and isinstance(entry.get("data_type"), str)
                and _is_shape(entry.get("shape")) and isinstance(entry.get("sha256"), str)):
            return f"entry for array {name!r} needs data_type, shape and sha256"
    return None


def _prompt_attr_problem(value: Any, n: int) -> str | None:
    """The `prompt_logprobs` attribute: {"starts": [n ints >= -1], "counts": [n ints >= 0]}, a
    count of 0 wherever the start is -1."""
    if not isinstance(value, dict) or set(value) != {"starts", "counts"}:
        return "attribute 'prompt_logprobs' must be {\"starts\": [...], \"counts\": [...]}"
    starts, counts = value["starts"], value["counts"]
    if not (isinstance(starts, list) and isinstance(counts, list)
            and len(starts) == n and len(counts) == n):
        return "attribute 'prompt_logprobs': starts and counts need one entry per request"
    if not all(type(s) is int and s >= -1 for s in starts) \
            or not all(type(c) is int and 0 <= c <= INT32_MAX for c in counts):
        return "attribute 'prompt_logprobs': starts must be ints >= -1, counts ints >= 0"
    if any(s < 0 < c for s, c in zip(starts, counts)):
        return "attribute 'prompt_logprobs': a request with start -1 has prompt logprobs"
    return None


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)


# ---------------------------------------------------------------------------------------------
# One array's zarr.json, before zarr sees it
# ---------------------------------------------------------------------------------------------


def vet_array_metadata(meta_path: Path, name: str, entry: dict[str, Any]) -> tuple[list[int], str]:
    """Check the array's zarr.json as plain JSON before zarr instantiates anything from it:
    only numeric data types, a regular chunk grid with default chunk keys and the codecs the
    writer uses are accepted. Returns the chunk shape and the compressor's name."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Unreadable(f"unreadable zarr.json ({first_line(exc)})") from None
    if not isinstance(meta, dict) or meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
        raise Unreadable("zarr.json is not a zarr v3 array")
    dtype = meta.get("data_type")
    if dtype not in ARRAY_DTYPES[name]:
        raise Unreadable(f"data type {dtype!r} refused (expected {' or '.join(ARRAY_DTYPES[name])})")
    if dtype != entry["data_type"] or meta.get("shape") != entry["shape"]:
        raise Unreadable("data type or shape differs from the golden's metadata")
    if meta.get("storage_transformers") not in (None, []):
        raise Unreadable("storage transformers refused")
    codecs = meta.get("codecs")
    codecs = codecs if isinstance(codecs, list) else []
    names = [c.get("name") if isinstance(c, dict) else None for c in codecs]
    if not names or names[0] != "bytes" or any(n not in ALLOWED_BYTES_TO_BYTES for n in names[1:]):
        raise Unreadable(f"codecs {names} refused (allowed: bytes, then zstd or blosc)")
    if meta.get("chunk_key_encoding") != {"name": "default", "configuration": {"separator": "/"}}:
        raise Unreadable("chunk key encoding refused (expected default with '/')")
    if len(names) != 2:
        raise Unreadable(f"codecs {names} refused (allowed: bytes, then zstd or blosc)")
    return _regular_chunk_shape(meta.get("chunk_grid"), len(entry["shape"])), names[1]


def _regular_chunk_shape(grid: Any, ndim: int) -> list[int]:
    """The chunk shape of a regular chunk grid of `ndim` dimensions; anything else is refused."""
    config = grid.get("configuration") if isinstance(grid, dict) else None
    shape = config.get("chunk_shape") if isinstance(config, dict) else None
    if (not isinstance(grid, dict) or grid.get("name") != "regular" or not isinstance(shape, list)
            or len(shape) != ndim or not all(isinstance(c, int) and c > 0 for c in shape)):
        raise Unreadable("chunk grid refused (expected a regular grid)")
    return shape


def check_blosc_chunk(data: bytes, nbytes: int) -> None:
    """A blosc chunk must be exactly what its 16-byte header announces: `nbytes` of data once
    decoded, compressed into exactly the file's length. c-blosc trusts its header, so a
    truncated or extended chunk is refused here, before it is decoded (zstd frames inside
    blosc carry no checksum; the array's sha256 covers the data)."""
    if len(data) < 16:
        raise Unreadable("unreadable chunk (shorter than a blosc header)")
    header_nbytes = int.from_bytes(data[4:8], "little")
    header_cbytes = int.from_bytes(data[12:16], "little")
    if header_nbytes != nbytes or header_cbytes != len(data):
        raise Unreadable(f"unreadable chunk (blosc header says {header_nbytes} bytes in "
                         f"{header_cbytes}, expected {nbytes} in {len(data)}: truncated or corrupt)")


def chunk_keys(shape: list[int], chunk_shape: list[int]) -> list[str]:
    """Paths, relative to the array, of every chunk of a regular grid with default keys."""
    counts = [-(-n // c) for n, c in zip(shape, chunk_shape)]
    if any(n == 0 for n in counts):
        return []
    return ["/".join(["c", *map(str, idx)]) for idx in itertools.product(*(range(n) for n in counts))]


# ---------------------------------------------------------------------------------------------
# Structure of the loaded arrays
# ---------------------------------------------------------------------------------------------


def check_offsets(offsets: np.ndarray, flat_len: int, count: int, what: str) -> list[str]:
    """Offsets of `count` runs in a flat array of `flat_len`: starts at 0, never decreases, ends
    at flat_len."""
    if offsets.ndim != 1 or offsets.shape[0] != count + 1:
        return [f"{what}: expected {count + 1} offsets, found shape {list(offsets.shape)}"]
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != flat_len:
        return [f"{what}: offsets inconsistent with the flat array of length {flat_len}"]
    return []


def check_tree(parents: list[int], groups: list[int], n_groups: int, ids: list[str]) -> list[str]:
    """Requests must be in topological order (parent before child) and name a real group."""
    problems = []
    for i, (p, g) in enumerate(zip(parents, groups)):
        if not -1 <= p < i:
            problems.append(f"request {i}: parent {p} is not an earlier request (not topological)")
        if not 0 <= g < n_groups:
            problems.append(f"request {i}: group {g} does not exist ({n_groups} prefixes)")
    if len(set(ids)) != len(ids):
        problems.append("request ids are not unique")
    return problems


def check_structure(attrs: dict[str, Any], small: dict[str, np.ndarray],
                    shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """Consistency of a stored golden's arrays with each other and with the attributes, from
    its small logical arrays (`small`: `requests`, `prefix_offsets`, `new_token_offsets`,
    `output_offsets`) and the shapes of the per-position ones (`shapes`: `prefix_tokens`,
    `new_tokens`, `output_ids`, `logprobs`, `top_ids`, `top_logprobs`, `prompt_logprobs`)."""
    n = len(attrs["request_ids"])
    k = attrs["top_k"]
    flat = {name: shapes[name] for name in ("prefix_tokens", "new_tokens", "output_ids", "logprobs")}
    problems = [f"{name}: must be 1-D" for name, shape in flat.items() if len(shape) != 1]
    table = small["requests"]
    if table.shape != (n, len(REQUEST_COLUMNS)):
        problems.append(f"requests: shape {list(table.shape)}, expected {[n, len(REQUEST_COLUMNS)]}")
    if problems:
        return problems
    size = {name: shape[0] for name, shape in flat.items()}
    n_groups = small["prefix_offsets"].shape[0] - 1
    problems += check_offsets(
        small["prefix_offsets"], size["prefix_tokens"], max(n_groups, 0), "prefix_offsets")
    problems += check_offsets(small["new_token_offsets"], size["new_tokens"], n, "new_token_offsets")
    problems += check_offsets(small["output_offsets"], size["output_ids"], n, "output_offsets")
    if flat["logprobs"] != flat["output_ids"]:
        problems.append("logprobs: length differs from output_ids")
    if problems:
        return problems
    problems += _check_top(attrs, small, shapes, n, k)
    problems += _check_prompt(attrs, shapes)
    problems += _check_counts(attrs, size, shapes, n_groups, n, k)
    col = {c: table[:, j].tolist() for j, c in enumerate(REQUEST_COLUMNS)}
    problems += check_tree(col["parent"], col["group"], n_groups, attrs["request_ids"])
    return problems


def _check_top(attrs: dict[str, Any], small: dict[str, np.ndarray],
               shapes: dict[str, tuple[int, ...]], n: int, k: int) -> list[str]:
    no_top = attrs["no_top_requests"]
    if not all(isinstance(i, int) and 0 <= i < n for i in no_top) or no_top != sorted(set(no_top)):
        return ["no_top_requests: must be sorted, unique request indices"]
    if k == 0:
        return [] if not no_top else ["no_top_requests: must be empty when top_k is 0"]
    lengths = np.diff(small["output_offsets"])
    rows = int(lengths.sum() - lengths[no_top].sum()) if n else 0
    want = (rows, k)
    return [
        f"{name}: shape {list(shapes[name])}, expected {list(want)}"
        for name in TOP_ARRAYS if shapes[name] != want
    ]


def _check_prompt(attrs: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> list[str]:
    if "prompt_logprobs" not in attrs:
        return []
    shape = shapes["prompt_logprobs"]
    want = sum(attrs["prompt_logprobs"]["counts"])
    if len(shape) != 1 or shape[0] != want:
        return [f"prompt_logprobs: shape {list(shape)}, expected [{want}] (the counts' sum)"]
    return []


def _check_counts(attrs: dict[str, Any], size: dict[str, int],
                  shapes: dict[str, tuple[int, ...]], n_groups: int, n: int, k: int) -> list[str]:
    """The `counts` attribute (what `golden show` prints) must describe the arrays."""
    actual = {
        "groups": n_groups, "requests": n, "prefix_tokens": size["prefix_tokens"],
        "new_tokens": size["new_tokens"], "output_tokens": size["output_ids"],
        "top_rows": shapes["top_ids"][0] if k > 0 else 0,
    }
    if attrs["counts"] == actual:
        return []
    return [f"counts attribute {attrs['counts']} does not match the arrays {actual}"]


# ---------------------------------------------------------------------------------------------
# An in-memory golden, before it is written
# ---------------------------------------------------------------------------------------------


def check_in_memory(golden: Golden, k: int) -> list[str]:
    """Shape and tree problems of an in-memory golden, so that a bad one is never written."""
    problems: list[str] = []
    reqs = golden.requests
    for i, r in enumerate(reqs):
        problems += request_problems(i, r, k)
    problems += check_tree(
        [r.parent for r in reqs], [r.group for r in reqs], len(golden.prefixes), [r.id for r in reqs]
    )
    return problems


def request_problems(i: int, r: RecordedRequest, k: int) -> list[str]:
    """Shape and field problems of request i alone (its place in the tree is `check_tree`'s)."""
    problems: list[str] = []
    for attr in ("output_ids", "logprobs", "new_tokens"):
        if np.ndim(getattr(r, attr)) != 1:
            problems.append(f"request {r.id}: {attr} must be 1-D")
    if np.shape(r.logprobs) != np.shape(r.output_ids):
        problems.append(f"request {r.id}: logprobs shape {np.shape(r.logprobs)} differs from "
                        f"output_ids shape {np.shape(r.output_ids)}")
    if (r.top_ids is None) != (r.top_logprobs is None):
        problems.append(f"request {r.id}: top_ids and top_logprobs must both be set or both None")
    elif r.top_ids is not None and k > 0:
        want = (len(r.output_ids), k)
        if np.shape(r.top_ids) != want or np.shape(r.top_logprobs) != want:
            problems.append(f"request {r.id}: top arrays must have shape {want}")
    problems += _check_request_fields(i, r)
    if (r.prompt_logprob_start >= 0) != (r.prompt_logprobs is not None):
        problems.append(f"request {r.id}: prompt_logprobs must be set exactly when "
                        "prompt_logprob_start >= 0")
    elif r.prompt_logprobs is not None and np.ndim(r.prompt_logprobs) != 1:
        problems.append(f"request {r.id}: prompt_logprobs must be 1-D")
    return problems


def _check_request_fields(i: int, r: RecordedRequest) -> list[str]:
    """The integer columns must be plain ints that fit int32; id a str."""
    problems = []
    if not isinstance(r.id, str):
        problems.append(f"request {i}: id must be a string")
    for col in (*REQUEST_COLUMNS, "num_retractions"):
        v = getattr(r, col)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            problems.append(f"request {r.id}: {col} must be an integer, got {v!r}")
        elif not INT32_MIN <= int(v) <= INT32_MAX:
            problems.append(f"request {r.id}: {col} {v} does not fit int32")
    return problems
