"""Golden storage: write and read goldens as zarr v3 directories, exactly, atomically, checked.

A golden is what every later replay is judged against, so storage is strict in both directions.
This module is the public face and the only one that touches zarr; the concepts live in their
own modules:

- exact encoding, Golden <-> arrays + attributes: `replay.golden.codec` (float32 only where it
  widens back to the same bits; widening on integer bit patterns, see `replay.utils.bits`);
- atomic publication (hidden sibling, fsync, rename): `replay.golden.atomic_dir`;
- checking (schema, attributes, each array's metadata vetted before zarr instantiates anything
  from it, sha256 per array and over the metadata, structure): `replay.golden.checks`;
- what a golden holds: `replay.golden.layout`.

The layout is documented in docs/golden-format.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec
from zarr.storage import LocalStore

from replay.golden.atomic_dir import refuse_existing, write_atomically
from replay.utils.bits import narrow_if_exact, widen_float32
from replay.utils.errors import GoldenFormatError
from replay.golden.model import Golden, RecordedRequest
from replay.golden.checks import (
    Unreadable, array_sha256, attrs_problem, attrs_sha256, check_structure, chunk_keys,
    first_line, safe_attrs_sha256, schema_version, vet_array_metadata,
)
from replay.golden.chunks import ArraySpec, ChunkedArray
from replay.golden.codec import encode
from replay.golden.layout import (BLOSC_CONFIG, CHUNKED_VERSION, PROMPT_ARRAY, SCHEMA, TOP_ARRAYS,
                                  expected_arrays)
from replay.golden.pack import unpack_table
from replay.golden.stored import StoredRequests
from replay.golden.lfs import LfsPointers, refuse_lfs_pointers
from replay.golden.limits import (chunk_count_problem, chunk_size_problem,
                                  declared_size_problems, read_stable, symlink_problem)

__all__ = [
    "SCHEMA", "array_sha256", "attrs_sha256", "content_checksum", "golden_summary", "narrow_if_exact",
    "open_golden", "read_golden", "verify_golden", "widen_float32", "write_golden",
]

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
    refuse_existing(target, force, "zarr.json")  # before the encoding work
    arrays, attrs = encode(golden)
    try:
        write_atomically(target, lambda tmp: _write_store(tmp, arrays, attrs), force=force,
                         marker="zarr.json")
    except OSError as exc:
        if exc.errno is not None:  # e.g. a full disk: name the golden, not a temp directory
            raise OSError(exc.errno, exc.strerror or str(exc), str(given)) from None
        raise
    return given


def read_golden(path: str | Path, *, verify: bool = True) -> Golden:
    """Read the golden at `path` whole, every request in memory (writable arrays of its own);
    any problem raises GoldenFormatError naming it. A replay uses `open_golden` instead, which
    holds no more than a few chunks.

    With verify=False the sha256 checks are skipped (structure is still checked): only for
    callers that have just verified the same directory.
    """
    return _read(Path(path), verify=verify, whole=True)


def open_golden(path: str | Path, *, verify: bool = True) -> Golden:
    """The golden at `path`, checked whole (every checksum and its structure, streamed chunk by
    chunk), whose requests are read from disk when asked for (`replay.golden.stored`): memory
    does not grow with the golden. Any problem raises GoldenFormatError naming it, then or
    when a request is read (a golden replaced or altered meanwhile)."""
    return _read(Path(path), verify=verify, whole=False)


def _read(where: Path, *, verify: bool, whole: bool) -> Golden:
    """Check the golden at `where`, then make it (every request read now when `whole`), all in
    one `read_stable` attempt: a golden replaced meanwhile (`golden update`) is read again."""
    def attempt() -> tuple[Golden | None, list[str]]:
        opened, stored, problems = _open_and_check(where, verify=verify)
        if problems or stored is None:
            return None, problems
        try:
            golden = _golden(opened, stored, where)
            if whole:
                golden = replace(golden, prefixes=[np.array(p) for p in golden.prefixes],
                                 requests=[_owned(r) for r in stored.iterate()])
        except Unreadable as exc:
            return None, [str(exc)]
        return golden, []

    try:
        golden, problems = read_stable(attempt, where, lambda r: bool(r[1]))
    except Unreadable as exc:
        raise GoldenFormatError(f"{where}: {exc}") from None
    if problems or golden is None:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise GoldenFormatError(f"{where}: {problems[0]}{more}")
    return golden


def _golden(opened: _Opened, stored: StoredRequests, where: Path) -> Golden:
    """The checked golden, its requests read from disk when asked for."""
    attrs = opened.attrs
    stored.where = where
    offsets = stored.table.prefix_offsets
    tokens = stored.arrays["prefix_tokens"].whole()
    prefixes = [tokens[offsets[g]:offsets[g + 1]] for g in range(len(offsets) - 1)]
    return Golden(scenario=attrs["scenario"], prefixes=prefixes, requests=stored,
                  sampling=attrs["sampling"], meta=attrs["meta"],
                  checksum=attrs.get("attrs_sha256"))


def _owned(r: RecordedRequest) -> RecordedRequest:
    """The request with arrays of its own (not views of a shared, read-only chunk)."""
    def own(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.array(a)

    return replace(r, new_tokens=np.array(r.new_tokens), output_ids=np.array(r.output_ids),
                   logprobs=np.array(r.logprobs), top_ids=own(r.top_ids),
                   top_logprobs=own(r.top_logprobs), prompt_logprobs=own(r.prompt_logprobs))


def content_checksum(golden: Golden) -> str:
    """The golden's content checksum: the stored one it was read with, else the `attrs_sha256`
    it would be written with (a golden recorded in memory)."""
    return golden.checksum or encode(golden)[1]["attrs_sha256"]


def verify_golden(path: str | Path) -> list[str]:
    """Every problem found in the golden at `path`, [] when it is sound. Never raises for a bad
    golden: a missing path, garbage metadata or an undecodable chunk are all reported. A golden
    whose data was never fetched (Git LFS pointers) raises LfsPointers: nothing to list."""
    try:
        return read_stable(lambda: _open_and_check(Path(path), verify=True), Path(path),
                           lambda r: bool(r[2]))[2]
    except Unreadable as exc:
        return [str(exc)]
    except LfsPointers:  # nothing to list: the data was never fetched
        raise
    except Exception as exc:  # noqa: BLE001 - the contract is to report, not to raise
        return [f"unexpected error while verifying: {type(exc).__name__}: {exc}"]


def golden_summary(path: str | Path) -> dict[str, Any]:
    """Metadata and counts for `golden show`, from the root metadata only (no array is read).

    The metadata checksum is verified; array checksums are not (use verify_golden).
    """
    where = Path(path)
    try:
        opened = _open(where, verify=True)
    except Unreadable as exc:
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
# Writing the zarr store
# ---------------------------------------------------------------------------------------------


def _write_store(directory: Path, arrays: dict[str, np.ndarray], attrs: dict[str, Any]) -> None:
    with zarr.config.set({"json_indent": None}):  # compact metadata: 2-3 kB less per golden
        group = zarr.create_group(store=LocalStore(directory), zarr_format=3, attributes=attrs)
        for name, data in arrays.items():
            _write_array(group, name, data)


def _write_array(group: zarr.Group, name: str, data: np.ndarray) -> None:
    """One array, one chunk (one file), little-endian bytes, then blosc: bit shuffle, zstd."""
    arr = group.create_array(
        name,
        shape=data.shape,
        dtype=data.dtype,
        chunks=tuple(max(1, n) for n in data.shape),
        filters=None,
        compressors=[BloscCodec(typesize=data.dtype.itemsize, **BLOSC_CONFIG)],
        serializer=BytesCodec(endian="little"),
        fill_value=0,
        config={"write_empty_chunks": True},  # an all-zero chunk must still be a file
    )
    if data.size:
        arr[...] = data


# ---------------------------------------------------------------------------------------------
# Reading and checking
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Opened:
    path: Path
    group: zarr.Group
    attrs: dict[str, Any]
    version: int  # the layout (schema version)


def _open_and_check(where: Path, *, verify: bool
                    ) -> tuple[_Opened, StoredRequests | None, list[str]]:
    """Open, vet every stored array's metadata, stream every chunk once (each checksum, when
    verifying), then check the structure from the small arrays and the shapes (each step only
    when the one before went cleanly)."""
    opened = _open(where, verify=verify)
    arrays, problems = _vet_arrays(opened)
    if not problems and verify:
        problems = _verify_arrays(opened, arrays)
    if problems:
        return opened, None, problems
    return (opened, *_stored_requests(opened, arrays))


def _open(path: Path, *, verify: bool) -> _Opened:
    """Open the root group and validate its attributes; raises Unreadable."""
    if not os.path.lexists(path):
        raise Unreadable("does not exist")
    if not path.is_dir():
        raise Unreadable("is not a directory (a golden is a NAME.zarr directory)")
    if not (path / "zarr.json").is_file():
        raise Unreadable("is not a zarr v3 group (no zarr.json)")
    link = symlink_problem(path)
    if link:
        raise Unreadable(link)
    refuse_lfs_pointers(path)  # a checkout without `git lfs pull`: said so, not "corrupt"
    try:
        store = LocalStore(path, read_only=True)
        group = zarr.open_group(store=store, mode="r", zarr_format=3, use_consolidated=False)
        attrs = dict(group.attrs.asdict())
    except Exception as exc:  # noqa: BLE001 - any failure here means "not a readable group"
        raise Unreadable(f"is not a zarr v3 group ({type(exc).__name__}: {first_line(exc)})") from None
    version = schema_version(attrs)
    if verify and attrs.get("attrs_sha256") != safe_attrs_sha256(attrs):
        raise Unreadable("metadata checksum mismatch (root zarr.json attributes edited or corrupted)")
    problem = attrs_problem(attrs, version) or next(iter(declared_size_problems(attrs)), None)
    if problem:
        raise Unreadable(f"malformed metadata: {problem}")
    return _Opened(path=path, group=group, attrs=attrs, version=version)


# Decoded chunks a replay holds per array: a request's own rows may span two chunks, and the
# output ids also serve the inputs of the next turn (its parents' rows: two more).
KEEP = {"output_ids": 4}


def _vet_arrays(opened: _Opened) -> tuple[dict[str, ChunkedArray], list[str]]:
    """Every expected array, its metadata vetted, ready to be read chunk by chunk. Problems
    are collected per array so that verify_golden can report them all."""
    arrays: dict[str, ChunkedArray] = {}
    expected = expected_arrays(opened.attrs, opened.version)
    problems = [f"array {name}: listed in the metadata but not part of this golden's layout"
                for name in opened.attrs["arrays"] if name not in expected]
    for name in expected:
        try:
            arrays[name] = ChunkedArray(_vet_array(opened, name), keep=KEEP.get(name, 2))
        except Unreadable as exc:
            problems.append(f"array {name}: {exc}")
    return arrays, problems


def _vet_array(opened: _Opened, name: str) -> ArraySpec:
    entry = opened.attrs["arrays"].get(name)
    if entry is None:
        raise Unreadable("not listed in the metadata")
    meta_path = opened.path / name / "zarr.json"
    if not meta_path.is_file():
        raise Unreadable("missing (no zarr.json)")
    chunk_shape, compressor = vet_array_metadata(meta_path, name, entry)
    too_many = chunk_count_problem(entry["shape"], chunk_shape)
    if too_many:
        raise Unreadable(too_many)
    chunks = [opened.path / name / key for key in chunk_keys(entry["shape"], chunk_shape)]
    if not all(c.is_file() for c in chunks):
        # zarr would silently return fill values for a missing chunk
        raise Unreadable("chunk missing (truncated golden?)")
    if compressor != "blosc":  # zstd frames declare their size; blosc headers are checked below
        oversized = chunk_size_problem(chunks, chunk_shape, entry["data_type"])
        if oversized:
            raise Unreadable(oversized)
    if compressor == "blosc" and chunks and opened.version < CHUNKED_VERSION and (
            len(chunks) != 1 or list(chunk_shape) != list(entry["shape"])):
        raise Unreadable("a blosc array must be one chunk")
    if list(chunk_shape[1:]) != [max(1, n) for n in entry["shape"][1:]]:
        raise Unreadable("a chunk must hold whole rows")
    return ArraySpec(name=name, dtype=np.dtype(entry["data_type"]).newbyteorder("<"),
                     shape=tuple(entry["shape"]), chunk_rows=chunk_shape[0],
                     compressor=compressor, files=tuple(chunks))


def _verify_arrays(opened: _Opened, arrays: dict[str, ChunkedArray]) -> list[str]:
    """Decode every chunk once, checking each array's sha256 (and taking each chunk's digest,
    which later reads are held to); problems per array."""
    problems = []
    for name, array in arrays.items():
        try:
            for _ in array.scan():
                pass
        except Unreadable as exc:
            problems.append(f"array {name}: {exc}")
            continue
        if array.sha256 != opened.attrs["arrays"][name]["sha256"]:
            problems.append(f"array {name}: checksum mismatch (corrupt data)")
    return problems


def _stored_requests(opened: _Opened, arrays: dict[str, ChunkedArray]
                     ) -> tuple[StoredRequests | None, list[str]]:
    """The checked requests of the golden, read from disk as they are asked for."""
    attrs, version = opened.attrs, opened.version
    small = {}
    for name in ("requests", "prefix_offsets", "new_token_offsets", "output_offsets"):
        try:
            if name in arrays:
                small[name] = arrays[name].whole()
        except Unreadable as exc:
            return None, [f"array {name}: {exc}"]
    shapes = {name: a.spec.shape for name, a in arrays.items()}
    table, problems = unpack_table(version, attrs, small, shapes)
    if table is None or problems:
        return None, problems
    logical = dict(shapes)
    if version >= 2 and attrs["top_k"] > 0:
        for name in TOP_ARRAYS:
            rest = shapes[f"{name}_rest"]
            logical[name] = (rest[0], attrs["top_k"])
    logical.setdefault(PROMPT_ARRAY, (0,))
    small = {"requests": table.requests, "prefix_offsets": table.prefix_offsets,
             "new_token_offsets": table.new_token_offsets, "output_offsets": table.output_offsets}
    problems = check_structure(attrs, small, logical)
    if problems:
        return None, problems
    return StoredRequests(attrs, table, arrays), []
