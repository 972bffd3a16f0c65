"""Golden storage: write and read goldens as zarr v3 directories, exactly, atomically, checked.

A golden is what every later replay is judged against, so this module is strict in both
directions:

- exact: logprobs are stored as float32 only when every value of an array widens back to the
  very same float64 bit pattern, else as float64; the widening is done on integer bit patterns so
  that a reader's floating-point environment (flush-to-zero, denormals-are-zero) cannot change a
  bit. Nothing ever goes through a decimal rendering.
- atomic: a golden is written into a hidden sibling directory, fsynced, then renamed into place;
  a crash never leaves a partial golden at the target path. (Overwriting takes two renames: a
  hard kill between them leaves nothing at the target and the old golden in a hidden
  `.NAME.old-*` sibling; an exception there moves the old one back.)
- checked: every array carries a sha256 over (data type, shape, little-endian bytes) and the
  metadata carries its own sha256; zstd frames carry a content checksum too. Opening a golden only
  parses JSON and decodes zstd: array metadata is vetted before zarr sees it, so a golden whose
  metadata names any other codec (a pickle codec, say) is refused, never run.

The layout is documented in docs/golden-format.md.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.storage import LocalStore

from replay.errors import GoldenFormatError, UsageError
from replay.golden import Golden, RecordedRequest
from replay.golden_limits import (chunk_count_problem, chunk_size_problem,
                                  declared_size_problems, read_stable, symlink_problem)
from replay.redact import redact_secrets

SCHEMA = "golden-replay/golden/1"
SCHEMA_PREFIX = "golden-replay/golden/"
SCHEMA_VERSION = 1

ZSTD_LEVEL = 9  # float32 mantissas barely compress; 19 gained nothing on a preset golden

# Columns of the `requests` table, in order.
REQUEST_COLUMNS = ("group", "branch", "turn", "parent", "max_new_tokens", "cached_tokens")

_INT32 = ("int32",)
_INT64 = ("int64",)
_FLOAT = ("float32", "float64")

# Every array a golden may hold and the data types each may have.
ARRAY_DTYPES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "prefix_tokens": _INT32,
    "prefix_offsets": _INT64,
    "requests": _INT32,
    "new_tokens": _INT32,
    "new_token_offsets": _INT64,
    "output_ids": _INT32,
    "output_offsets": _INT64,
    "logprobs": _FLOAT,
    "top_ids": _INT32,
    "top_logprobs": _FLOAT,
})
TOP_ARRAYS = ("top_ids", "top_logprobs")

# Codecs a golden's arrays may use. Anything else is refused before zarr instantiates it.
_ALLOWED_BYTES_TO_BYTES = ("zstd",)

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def write_golden(golden: Golden, path: str | Path, *, force: bool = False) -> Path:
    """Write `golden` as a zarr v3 directory at `path`, atomically.

    Raises UsageError if `path` exists and `force` is false (checked before any work, and again
    just before the rename), and GoldenFormatError if the golden cannot be stored exactly.
    """
    given = Path(path)
    target = Path(os.path.abspath(given))  # so that `.` or `x/` still name a real sibling
    _refuse_existing(target, force)
    arrays = encode_arrays(golden)
    attrs = encode_attrs(golden, arrays)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(target, "tmp")
    try:
        _write_store(tmp, arrays, attrs)
        _fsync_tree(tmp)
        _move_into_place(tmp, target, force)
    except BaseException as exc:
        # Also on KeyboardInterrupt: never leave our own temp directory behind.
        _remove(tmp)
        if isinstance(exc, OSError) and exc.errno is not None:  # e.g. a full disk: name the golden
            raise OSError(exc.errno, exc.strerror or str(exc), str(given)) from None
        raise
    return given


def read_golden(path: str | Path, *, verify: bool = True) -> Golden:
    """Read the golden at `path`; any problem raises GoldenFormatError naming it.

    With verify=False the sha256 checks are skipped (structure is still checked): only for
    callers that have just verified the same directory.
    """
    where = Path(path)
    try:
        opened, arrays, problems = read_stable(lambda: _open_and_check(where, verify=verify),
                                               where, lambda r: bool(r[2]))
    except _Unreadable as exc:
        raise GoldenFormatError(f"{where}: {exc}") from None
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise GoldenFormatError(f"{where}: {problems[0]}{more}")
    return _assemble(opened.attrs, arrays)


def verify_golden(path: str | Path) -> list[str]:
    """Every problem found in the golden at `path`, [] when it is sound. Never raises for a bad
    golden: a missing path, garbage metadata or an undecodable chunk are all reported."""
    try:
        return read_stable(lambda: _open_and_check(Path(path), verify=True), Path(path),
                           lambda r: bool(r[2]))[2]
    except _Unreadable as exc:
        return [str(exc)]
    except Exception as exc:  # noqa: BLE001 - the contract is to report, not to raise
        return [f"unexpected error while verifying: {type(exc).__name__}: {exc}"]


def _open_and_check(where: Path, *, verify: bool) -> tuple[Any, dict[str, np.ndarray], list[str]]:
    """Open, load every array, then check the structure (only when the arrays loaded cleanly)."""
    opened = _open(where, verify=verify)
    arrays, problems = _load_arrays(opened, verify=verify)
    if not problems:
        problems = check_structure(opened.attrs, arrays)
    return opened, arrays, problems


def golden_summary(path: str | Path) -> dict[str, Any]:
    """Metadata and counts for `golden show`, from the root metadata only (no array is read).

    The metadata checksum is verified; array checksums are not (use verify_golden).
    """
    where = Path(path)
    try:
        opened = _open(where, verify=True)
    except _Unreadable as exc:
        raise GoldenFormatError(f"{where}: {exc}") from None
    attrs = opened.attrs
    files = [p for p in where.rglob("*") if p.is_file()]
    return {
        "path": str(where),
        "schema": attrs["schema"],
        "scenario": attrs["scenario"],
        "sampling": attrs["sampling"],
        "meta": attrs["meta"],
        "top_k": attrs["top_k"],
        "counts": attrs["counts"],
        "dtypes": {name: entry["data_type"] for name, entry in attrs["arrays"].items()},
        "files": len(files),
        "bytes": sum(p.stat().st_size for p in files),
    }


# ---------------------------------------------------------------------------------------------
# Exact floats
# ---------------------------------------------------------------------------------------------


def widen_float32(values: np.ndarray) -> np.ndarray:
    """float32 -> float64 on bit patterns, exactly as IEEE 754 widening (NaN payloads shifted
    up, signalling NaNs kept signalling), independent of the FPU's flush-to-zero or
    denormals-are-zero modes, which would silently zero float32 subnormals."""
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    sign = (bits >> np.uint64(31)) << np.uint64(63)
    exp = (bits >> np.uint64(23)) & np.uint64(0xFF)
    mant = bits & np.uint64(0x7FFFFF)
    out_exp = exp + np.uint64(1023 - 127)
    out_mant = mant << np.uint64(29)
    out_exp = np.where(exp == 0xFF, np.uint64(0x7FF), out_exp)
    out_exp = np.where((exp == 0) & (mant == 0), np.uint64(0), out_exp)
    # Subnormal float32 (mant * 2**-149) becomes a normal float64: normalise on the leading bit.
    sub = (exp == 0) & (mant != 0)
    lead = (np.frexp(np.where(sub, mant, 1).astype(np.float64))[1] - 1).astype(np.uint64)
    sub_exp = lead + np.uint64(1023 - 149)
    sub_mant = (mant << (np.uint64(52) - lead)) & np.uint64((1 << 52) - 1)
    out_exp = np.where(sub, sub_exp, out_exp)
    out_mant = np.where(sub, sub_mant, out_mant)
    result = sign | (out_exp << np.uint64(52)) | out_mant
    return result.astype("<u8").view("<f8").astype(np.float64).reshape(np.shape(values))


def narrow_if_exact(values: np.ndarray) -> np.ndarray:
    """float32 when every float64 value is the widening of a float32 (bit for bit), else the
    float64 values unchanged. The hardware cast only proposes a candidate; the bit comparison
    through `widen_float32` decides, so a bad cast can cost space, never exactness."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        candidate = values.astype(np.float32)
    same = np.array_equal(widen_float32(candidate).view(np.uint64), values.view(np.uint64))
    return candidate if same else values


def _as_float64(values: Any, what: str) -> np.ndarray:
    """The exact float64 values of a float32 or float64 array; anything else is refused."""
    arr = np.asarray(values)
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
        raise GoldenFormatError(f"cannot write golden: {what} has dtype {arr.dtype}, expected float64")
    if arr.dtype.itemsize == 4:
        return widen_float32(arr)
    return np.ascontiguousarray(arr, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Encoding: Golden -> arrays + attributes
# ---------------------------------------------------------------------------------------------


def encode_arrays(golden: Golden) -> dict[str, np.ndarray]:
    """The golden's tree as flat arrays (see docs/golden-format.md). Validates the golden."""
    reqs = golden.requests
    k = golden.top_k
    problems = _check_in_memory(golden, k)
    if problems:
        raise GoldenFormatError(f"cannot write golden: {problems[0]}")
    arrays = {
        "prefix_tokens": _concat_int32([p for p in golden.prefixes], "prefix"),
        "prefix_offsets": _offsets(len(p) for p in golden.prefixes),
        "requests": _request_table(reqs),
        "new_tokens": _concat_int32([r.new_tokens for r in reqs], "new_tokens"),
        "new_token_offsets": _offsets(len(r.new_tokens) for r in reqs),
        "output_ids": _concat_int32([r.output_ids for r in reqs], "output_ids"),
        "output_offsets": _offsets(len(r.output_ids) for r in reqs),
        "logprobs": narrow_if_exact(_concat_f64([r.logprobs for r in reqs], "logprobs")),
    }
    if k > 0:
        with_top = [r for r in reqs if r.top_ids is not None]
        top_ids = _concat_int32([r.top_ids for r in with_top], "top_ids").reshape(-1, k)
        top_lp = _concat_f64([r.top_logprobs for r in with_top], "top_logprobs").reshape(-1, k)
        arrays["top_ids"] = top_ids
        arrays["top_logprobs"] = narrow_if_exact(top_lp)
    return arrays


def encode_attrs(golden: Golden, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Root attributes: metadata, per-request JSON columns, array checksums, own checksum."""
    reqs = golden.requests
    k = golden.top_k
    attrs: dict[str, Any] = {
        "schema": SCHEMA,
        "scenario": _strict_json(golden.scenario, "scenario"),
        "sampling": _strict_json(golden.sampling, "sampling"),
        "meta": redact_secrets(_strict_json(_nonfinite_as_strings(golden.meta), "meta")),
        "top_k": k,
        "request_columns": list(REQUEST_COLUMNS),
        "request_ids": [r.id for r in reqs],
        "finish_reasons": _strict_json([r.finish_reason for r in reqs], "finish_reason"),
        "cached_tokens_details": _strict_json([r.cached_details for r in reqs], "cached_details"),
        "no_top_requests": [i for i, r in enumerate(reqs) if k > 0 and r.top_ids is None],
        "counts": {
            "groups": len(golden.prefixes),
            "requests": len(reqs),
            "prefix_tokens": int(arrays["prefix_tokens"].size),
            "new_tokens": int(arrays["new_tokens"].size),
            "output_tokens": int(arrays["output_ids"].size),
            "top_rows": int(arrays["top_ids"].shape[0]) if k > 0 else 0,
        },
        "arrays": {
            name: {"data_type": a.dtype.name, "shape": list(a.shape), "sha256": array_sha256(a)}
            for name, a in arrays.items()
        },
    }
    attrs["attrs_sha256"] = attrs_sha256(attrs)
    return attrs


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


def _check_in_memory(golden: Golden, k: int) -> list[str]:
    """Shape and tree problems of an in-memory golden, so that a bad one is never written."""
    problems: list[str] = []
    reqs = golden.requests
    for i, r in enumerate(reqs):
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
    problems += check_tree(
        [r.parent for r in reqs], [r.group for r in reqs], len(golden.prefixes), [r.id for r in reqs]
    )
    return problems


def _check_request_fields(i: int, r: RecordedRequest) -> list[str]:
    """The integer columns must be plain ints that fit int32; id a str."""
    problems = []
    if not isinstance(r.id, str):
        problems.append(f"request {i}: id must be a string")
    for col in REQUEST_COLUMNS:
        v = getattr(r, col)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            problems.append(f"request {r.id}: {col} must be an integer, got {v!r}")
        elif not _INT32_MIN <= int(v) <= _INT32_MAX:
            problems.append(f"request {r.id}: {col} {v} does not fit int32")
    return problems


def _request_table(reqs: list[RecordedRequest]) -> np.ndarray:
    rows = [[int(getattr(r, c)) for c in REQUEST_COLUMNS] for r in reqs]
    return np.array(rows, dtype=np.int32).reshape(len(reqs), len(REQUEST_COLUMNS))


def _concat_int32(parts: list[Any], what: str) -> np.ndarray:
    """Concatenate integer arrays into int32, refusing non-integer dtypes and overflow."""
    arrs = [np.asarray(p) for p in parts]
    for a in arrs:
        if a.dtype.kind not in "iu":
            raise GoldenFormatError(f"cannot write golden: {what} has dtype {a.dtype}, expected int32")
        if a.size and (a.min() < _INT32_MIN or a.max() > _INT32_MAX):
            raise GoldenFormatError(f"cannot write golden: {what} has values outside int32")
    if not arrs:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate([a.astype(np.int32).reshape(-1) for a in arrs])


def _concat_f64(parts: list[Any], what: str) -> np.ndarray:
    arrs = [_as_float64(p, what).reshape(-1) for p in parts]
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


# ---------------------------------------------------------------------------------------------
# Writing files, atomically
# ---------------------------------------------------------------------------------------------


def _sibling(target: Path, kind: str) -> Path:
    """A hidden sibling of target, unique to this process and call: `.NAME.tmp-<pid>-<hex>`."""
    return target.with_name(f".{target.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")


def _refuse_existing(target: Path, force: bool) -> None:
    """Without force, any existing path is refused; with force, only a zarr directory may be
    replaced (so that a slip like `-o ~` can never delete a home directory)."""
    if not os.path.lexists(target):
        return
    if not force:
        raise UsageError(f"{target} exists; pass --force to overwrite")
    if target.is_symlink() or not target.is_dir() or not (target / "zarr.json").is_file():
        raise UsageError(f"{target} exists and is not a zarr directory; refusing to replace it")


def _write_store(directory: Path, arrays: dict[str, np.ndarray], attrs: dict[str, Any]) -> None:
    group = zarr.create_group(store=LocalStore(directory), zarr_format=3, attributes=attrs)
    for name, data in arrays.items():
        _write_array(group, name, data)


def _write_array(group: zarr.Group, name: str, data: np.ndarray) -> None:
    """One array, one chunk (one file), little-endian bytes, zstd with a frame checksum."""
    arr = group.create_array(
        name,
        shape=data.shape,
        dtype=data.dtype,
        chunks=tuple(max(1, n) for n in data.shape),
        filters=None,
        compressors=[ZstdCodec(level=ZSTD_LEVEL, checksum=True)],
        serializer=BytesCodec(endian="little"),
        fill_value=0,
        config={"write_empty_chunks": True},  # an all-zero chunk must still be a file
    )
    if data.size:
        arr[...] = data


def _fsync_tree(root: Path) -> None:
    """fsync every file and directory under root, so the rename publishes durable data."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync(Path(dirpath) / name)
        _fsync(Path(dirpath))


def _fsync(path: Path) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if path.is_dir():
            return  # some platforms cannot open directories; their renames are still atomic
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not path.is_dir():
            raise  # some filesystems refuse fsync on a directory (EINVAL): nothing to do
    finally:
        os.close(fd)


def _rename(src: Path, dst: Path) -> None:
    """os.rename, isolated so tests can interrupt the swap between its two renames."""
    os.rename(src, dst)


def _move_into_place(tmp: Path, target: Path, force: bool) -> None:
    """Publish tmp at target. With an existing target: move it aside, move tmp in, then delete
    it; if the second rename fails the old golden is moved back."""
    if not os.path.lexists(target):
        try:
            _rename(tmp, target)
        except OSError:
            if os.path.lexists(target):  # appeared since the first check
                raise UsageError(f"{target} exists; pass --force to overwrite") from None
            raise
        _fsync(target.parent)
        return
    _refuse_existing(target, force)
    old = _sibling(target, "old")
    _rename(target, old)
    try:
        _rename(tmp, target)
    except BaseException:
        _rename(old, target)
        raise
    _fsync(target.parent)
    _remove(old)


def _remove(path: Path) -> None:
    """Best-effort removal of something this process created."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Reading and checking
# ---------------------------------------------------------------------------------------------


class _Unreadable(Exception):
    """A problem that stops reading at once (the path or the root metadata is unusable)."""


@dataclass(frozen=True)
class _Opened:
    path: Path
    group: zarr.Group
    attrs: dict[str, Any]


def _open(path: Path, *, verify: bool) -> _Opened:
    """Open the root group and validate its attributes; raises _Unreadable."""
    if not os.path.lexists(path):
        raise _Unreadable("does not exist")
    if not path.is_dir():
        raise _Unreadable("is not a directory (a golden is a NAME.zarr directory)")
    if not (path / "zarr.json").is_file():
        raise _Unreadable("is not a zarr v3 group (no zarr.json)")
    link = symlink_problem(path)
    if link:
        raise _Unreadable(link)
    try:
        store = LocalStore(path, read_only=True)
        group = zarr.open_group(store=store, mode="r", zarr_format=3, use_consolidated=False)
        attrs = dict(group.attrs.asdict())
    except Exception as exc:  # noqa: BLE001 - any failure here means "not a readable group"
        raise _Unreadable(f"is not a zarr v3 group ({type(exc).__name__}: {_first_line(exc)})") from None
    _check_schema(attrs)
    if verify and attrs.get("attrs_sha256") != _safe_attrs_sha256(attrs):
        raise _Unreadable("metadata checksum mismatch (root zarr.json attributes edited or corrupted)")
    problem = _attrs_problem(attrs) or next(iter(declared_size_problems(attrs)), None)
    if problem:
        raise _Unreadable(f"malformed metadata: {problem}")
    return _Opened(path=path, group=group, attrs=attrs)


def _check_schema(attrs: dict[str, Any]) -> None:
    if "schema" not in attrs:
        raise _Unreadable("is not a golden (no 'schema' attribute)")
    schema = attrs["schema"]
    if schema == SCHEMA:
        return
    m = re.fullmatch(re.escape(SCHEMA_PREFIX) + r"(\d+)", schema) if isinstance(schema, str) else None
    if m and int(m[1]) > SCHEMA_VERSION:
        raise _Unreadable(
            f"golden schema {schema} is newer than this tool understands ({SCHEMA}): "
            "upgrade golden-replay"
        )
    raise _Unreadable(f"unknown golden schema {schema!r} (this tool reads {SCHEMA})")


def _safe_attrs_sha256(attrs: dict[str, Any]) -> str | None:
    try:
        return attrs_sha256(attrs)
    except (TypeError, ValueError):
        return None  # e.g. NaN in hand-edited attributes: cannot match


def _attrs_problem(attrs: dict[str, Any]) -> str | None:
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
    if attrs["request_columns"] != list(REQUEST_COLUMNS):
        return f"attribute 'request_columns' must be {list(REQUEST_COLUMNS)}"
    if not all(isinstance(x, str) for x in attrs["request_ids"]):
        return "request_ids must be strings"
    if not all(x is None or isinstance(x, str) for x in attrs["finish_reasons"]):
        return "finish_reasons must be strings"
    if not all(isinstance(x, dict) for x in attrs["cached_tokens_details"]):
        return "cached_tokens_details must be objects"
    n = len(attrs["request_ids"])
    if len(attrs["finish_reasons"]) != n or len(attrs["cached_tokens_details"]) != n:
        return "request_ids, finish_reasons and cached_tokens_details differ in length"
    for name, entry in attrs["arrays"].items():
        if not (isinstance(entry, dict) and isinstance(entry.get("data_type"), str)
                and _is_shape(entry.get("shape")) and isinstance(entry.get("sha256"), str)):
            return f"entry for array {name!r} needs data_type, shape and sha256"
    return None


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)


def _expected_arrays(attrs: dict[str, Any]) -> list[str]:
    names = [n for n in ARRAY_DTYPES if n not in TOP_ARRAYS]
    return names + list(TOP_ARRAYS) if attrs["top_k"] > 0 else names


def _load_arrays(opened: _Opened, *, verify: bool) -> tuple[dict[str, np.ndarray], list[str]]:
    """Every expected array, each vetted, decoded and (if verify) checksummed. Problems are
    collected per array so that verify_golden can report them all."""
    arrays: dict[str, np.ndarray] = {}
    expected = _expected_arrays(opened.attrs)
    problems = [f"array {name}: listed in the metadata but not part of this golden's layout"
                for name in opened.attrs["arrays"] if name not in expected]
    for name in expected:
        try:
            arrays[name] = _load_array(opened, name, verify=verify)
        except _Unreadable as exc:
            problems.append(f"array {name}: {exc}")
    return arrays, problems


def _load_array(opened: _Opened, name: str, *, verify: bool) -> np.ndarray:
    entry = opened.attrs["arrays"].get(name)
    if entry is None:
        raise _Unreadable("not listed in the metadata")
    meta_path = opened.path / name / "zarr.json"
    if not meta_path.is_file():
        raise _Unreadable("missing (no zarr.json)")
    chunk_shape = _vet_array_metadata(meta_path, name, entry)
    too_many = chunk_count_problem(entry["shape"], chunk_shape)
    if too_many:
        raise _Unreadable(too_many)
    chunks = [opened.path / name / key for key in _chunk_keys(entry["shape"], chunk_shape)]
    if not all(chunk.is_file() for chunk in chunks):
        # zarr would silently return fill values for a missing chunk
        raise _Unreadable("chunk missing (truncated golden?)")
    oversized = chunk_size_problem(chunks, chunk_shape, entry["data_type"])
    if oversized:
        raise _Unreadable(oversized)
    try:
        arr = opened.group[name]
        data = np.asarray(arr[...])
    except Exception as exc:  # noqa: BLE001 - codecs raise many types on corrupt chunks
        raise _Unreadable(f"unreadable chunk ({type(exc).__name__}: {_first_line(exc)})") from None
    if verify and array_sha256(data) != entry["sha256"]:
        raise _Unreadable("checksum mismatch (corrupt data)")
    return data


def _vet_array_metadata(meta_path: Path, name: str, entry: dict[str, Any]) -> list[int]:
    """Check the array's zarr.json as plain JSON before zarr instantiates anything from it:
    only numeric data types, a regular chunk grid with default chunk keys and the codecs this
    module writes are accepted. Returns the chunk shape."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Unreadable(f"unreadable zarr.json ({_first_line(exc)})") from None
    if not isinstance(meta, dict) or meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
        raise _Unreadable("zarr.json is not a zarr v3 array")
    dtype = meta.get("data_type")
    if dtype not in ARRAY_DTYPES[name]:
        raise _Unreadable(f"data type {dtype!r} refused (expected {' or '.join(ARRAY_DTYPES[name])})")
    if dtype != entry["data_type"] or meta.get("shape") != entry["shape"]:
        raise _Unreadable("data type or shape differs from the golden's metadata")
    if meta.get("storage_transformers") not in (None, []):
        raise _Unreadable("storage transformers refused")
    codecs = meta.get("codecs")
    codecs = codecs if isinstance(codecs, list) else []
    names = [c.get("name") if isinstance(c, dict) else None for c in codecs]
    if not names or names[0] != "bytes" or any(n not in _ALLOWED_BYTES_TO_BYTES for n in names[1:]):
        raise _Unreadable(f"codecs {names} refused (allowed: bytes, then zstd)")
    if meta.get("chunk_key_encoding") != {"name": "default", "configuration": {"separator": "/"}}:
        raise _Unreadable("chunk key encoding refused (expected default with '/')")
    return _regular_chunk_shape(meta.get("chunk_grid"), len(entry["shape"]))


def _regular_chunk_shape(grid: Any, ndim: int) -> list[int]:
    """The chunk shape of a regular chunk grid of `ndim` dimensions; anything else is refused."""
    config = grid.get("configuration") if isinstance(grid, dict) else None
    shape = config.get("chunk_shape") if isinstance(config, dict) else None
    if (not isinstance(grid, dict) or grid.get("name") != "regular" or not isinstance(shape, list)
            or len(shape) != ndim or not all(isinstance(c, int) and c > 0 for c in shape)):
        raise _Unreadable("chunk grid refused (expected a regular grid)")
    return shape


def _chunk_keys(shape: list[int], chunk_shape: list[int]) -> list[str]:
    """Paths, relative to the array, of every chunk of a regular grid with default keys."""
    counts = [-(-n // c) for n, c in zip(shape, chunk_shape)]
    if any(n == 0 for n in counts):
        return []
    return ["/".join(["c", *map(str, idx)]) for idx in itertools.product(*(range(n) for n in counts))]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


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


def check_structure(attrs: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[str]:
    """Consistency of the loaded arrays with each other and with the attributes."""
    n = len(attrs["request_ids"])
    k = attrs["top_k"]
    flat = {name: arrays[name] for name in ("prefix_tokens", "new_tokens", "output_ids", "logprobs")}
    problems = [f"{name}: must be 1-D" for name, a in flat.items() if a.ndim != 1]
    table = arrays["requests"]
    if table.shape != (n, len(REQUEST_COLUMNS)):
        problems.append(f"requests: shape {list(table.shape)}, expected {[n, len(REQUEST_COLUMNS)]}")
    if problems:
        return problems
    n_groups = arrays["prefix_offsets"].shape[0] - 1
    problems += check_offsets(
        arrays["prefix_offsets"], flat["prefix_tokens"].size, max(n_groups, 0), "prefix_offsets")
    problems += check_offsets(arrays["new_token_offsets"], flat["new_tokens"].size, n, "new_token_offsets")
    problems += check_offsets(arrays["output_offsets"], flat["output_ids"].size, n, "output_offsets")
    if flat["logprobs"].shape != flat["output_ids"].shape:
        problems.append("logprobs: length differs from output_ids")
    if problems:
        return problems
    problems += _check_top(attrs, arrays, n, k)
    problems += _check_counts(attrs, arrays, n_groups, n, k)
    col = {c: table[:, j].tolist() for j, c in enumerate(REQUEST_COLUMNS)}
    problems += check_tree(col["parent"], col["group"], n_groups, attrs["request_ids"])
    return problems


def _check_top(attrs: dict[str, Any], arrays: dict[str, np.ndarray], n: int, k: int) -> list[str]:
    no_top = attrs["no_top_requests"]
    if not all(isinstance(i, int) and 0 <= i < n for i in no_top) or no_top != sorted(set(no_top)):
        return ["no_top_requests: must be sorted, unique request indices"]
    if k == 0:
        return [] if not no_top else ["no_top_requests: must be empty when top_k is 0"]
    lengths = np.diff(arrays["output_offsets"])
    rows = int(lengths.sum() - lengths[no_top].sum()) if n else 0
    want = (rows, k)
    return [
        f"{name}: shape {list(arrays[name].shape)}, expected {list(want)}"
        for name in TOP_ARRAYS if arrays[name].shape != want
    ]


def _check_counts(attrs: dict[str, Any], arrays: dict[str, np.ndarray], n_groups: int, n: int,
                  k: int) -> list[str]:
    """The `counts` attribute (what `golden show` prints) must describe the arrays."""
    actual = {
        "groups": n_groups, "requests": n, "prefix_tokens": int(arrays["prefix_tokens"].size),
        "new_tokens": int(arrays["new_tokens"].size), "output_tokens": int(arrays["output_ids"].size),
        "top_rows": int(arrays["top_ids"].shape[0]) if k > 0 else 0,
    }
    if attrs["counts"] == actual:
        return []
    return [f"counts attribute {attrs['counts']} does not match the arrays {actual}"]


def _assemble(attrs: dict[str, Any], arrays: dict[str, np.ndarray]) -> Golden:
    """Rebuild the in-memory Golden from checked arrays (float32 widened bit-exactly)."""
    pre_off = arrays["prefix_offsets"]
    prefixes = [arrays["prefix_tokens"][pre_off[g]:pre_off[g + 1]] for g in range(len(pre_off) - 1)]
    logprobs = _as_stored_f64(arrays["logprobs"])
    k = attrs["top_k"]
    top_ids = arrays["top_ids"] if k > 0 else None
    top_lp = _as_stored_f64(arrays["top_logprobs"]) if k > 0 else None
    no_top = set(attrs["no_top_requests"])
    new_off, out_off = arrays["new_token_offsets"], arrays["output_offsets"]
    requests: list[RecordedRequest] = []
    row = 0
    for i, rid in enumerate(attrs["request_ids"]):
        vals = dict(zip(REQUEST_COLUMNS, (int(v) for v in arrays["requests"][i])))
        a, b = int(out_off[i]), int(out_off[i + 1])
        tops: dict[str, np.ndarray | None] = {"top_ids": None, "top_logprobs": None}
        if top_ids is not None and top_lp is not None and i not in no_top:
            tops = {"top_ids": top_ids[row:row + b - a], "top_logprobs": top_lp[row:row + b - a]}
            row += b - a
        requests.append(RecordedRequest(
            id=rid,
            new_tokens=arrays["new_tokens"][new_off[i]:new_off[i + 1]],
            output_ids=arrays["output_ids"][a:b],
            logprobs=logprobs[a:b],
            cached_details=attrs["cached_tokens_details"][i],
            finish_reason=attrs["finish_reasons"][i],
            **vals,
            **tops,
        ))
    return Golden(
        scenario=attrs["scenario"], prefixes=prefixes, requests=requests,
        sampling=attrs["sampling"], meta=attrs["meta"],
    )


def _as_stored_f64(a: np.ndarray) -> np.ndarray:
    return widen_float32(a) if a.dtype == np.float32 else a.astype(np.float64)
