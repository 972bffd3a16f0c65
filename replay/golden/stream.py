"""Write a golden as its requests complete, so that recording memory does not grow with it.

`golden record` hands each finished request to a `GoldenWriter`, in any order; the writer puts
them in the golden's order and holds only those that arrive early. A golden of at most
`whole_rows` output positions is held whole and written at the end by `write_golden`: layout 2,
one chunk per array, byte for byte what every earlier golden (the committed ones) is. A larger
one is written in layout 3 as it goes: layout 2's arrays chunked along their first axis,
`chunk_rows` rows a chunk, floats kept as float64 (narrowing to float32 needs every value
first), so at most one chunk per array is held (and a reader holds a few: `golden.chunks`). The request table, the root attributes and the
checksums (read back chunk by chunk) come last. The directory is filled in a hidden sibling and
published atomically (`replay.golden.atomic_dir`): a reader sees a whole golden or none, and an
interrupted recording resumes from its journal (`replay.run.journal`), which holds every
finished request.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec
from zarr.storage import LocalStore

from replay.golden.atomic_dir import publish, refuse_existing, staging_sibling
from replay.golden.checks import check_tree, request_problems
from replay.golden.codec import (RequestColumns, array_entry, as_float64, concat_int32,
                                 root_attrs)
from replay.golden.layout import BLOSC_CONFIG, CHUNKED_VERSION, REQUEST_COLUMNS_V2
from replay.golden.model import Golden, RecordedRequest, interned_reason
from replay.golden.store import write_golden
from replay.utils.bits import same_bits
from replay.utils.errors import GoldenFormatError

WHOLE_ROWS = 1 << 18  # the largest golden written whole (layout 2): 1,024 requests of 256 tokens
CHUNK_ROWS = 1 << 16  # layout 3's rows a chunk: 2 MiB of float64 top-k rows of width 4
TABLE_WIDTH = len(REQUEST_COLUMNS_V2)


class _Column:
    """One stored array written chunk by chunk: rows are buffered until a whole chunk is full,
    so only the last (partial) chunk is ever written short."""

    def __init__(self, group: zarr.Group, name: str, dtype: str, width: int | None,
                 chunk_rows: int) -> None:
        shape: tuple[int, ...] = (0,) if width is None else (0, width)
        self.dtype = np.dtype(dtype)
        self.width = width
        self.chunk_rows = chunk_rows
        self.array = group.create_array(
            name, shape=shape, dtype=self.dtype,
            chunks=(chunk_rows,) if width is None else (chunk_rows, max(1, width)),
            filters=None, serializer=BytesCodec(endian="little"),
            compressors=[BloscCodec(typesize=self.dtype.itemsize, **BLOSC_CONFIG)],
            fill_value=0, config={"write_empty_chunks": True})
        self.parts: list[np.ndarray] = []
        self.held = 0  # rows buffered, not yet written
        self.rows_given = 0  # rows given in all
        self.read_back: tuple[int, int, np.ndarray] | None = None  # (chunk, first row, rows)

    def extend(self, rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        self.parts.append(np.ascontiguousarray(rows, dtype=self.dtype))
        self.held += len(rows)
        self.rows_given += len(rows)
        while self.held >= self.chunk_rows:
            self._flush(self.chunk_rows)

    def _flush(self, n: int) -> None:
        data = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
        head, rest = data[:n], data[n:]
        if self.width == 0:  # nothing to store: only the shape grows
            self.array.resize((self.array.shape[0] + n, 0))
        else:
            self.array.append(head)
        self.parts = [rest] if len(rest) else []
        self.held -= n

    def rows(self, a: int, b: int) -> np.ndarray:
        """Rows [a, b) of what was given so far: from the buffer, or read back from the chunks
        already written (the last one read is kept: a turn's parents are read in order)."""
        written = self.rows_given - self.held
        if b <= a:
            return np.zeros((0, *self.array.shape[1:]), dtype=self.dtype)
        if a >= written:
            buffered = np.concatenate(self.parts) if len(self.parts) > 1 else self.parts[0]
            if len(self.parts) > 1:
                self.parts = [buffered]
            return buffered[a - written:b - written]
        if b > written:
            return np.concatenate([self.rows(a, written), self.rows(written, b)])
        c = a // self.chunk_rows
        if self.read_back is None or self.read_back[0] != c or (b - 1) // self.chunk_rows != c:
            first = c * self.chunk_rows
            last = min(written, ((b - 1) // self.chunk_rows + 1) * self.chunk_rows)
            self.read_back = (c, first, np.asarray(self.array[first:last]))
        _, first, held = self.read_back
        return held[a - first:b - first]

    def close(self) -> dict[str, Any]:
        """Write what is left; the array's entry in the root attributes (its sha256 read back
        one chunk at a time, as `checks.array_sha256` defines it)."""
        if self.held:
            self._flush(self.held)
        shape = list(self.array.shape)
        h = hashlib.sha256(f"{self.dtype.name};{','.join(map(str, shape))};".encode("ascii"))
        if self.width != 0:
            for a in range(0, shape[0], self.chunk_rows):
                chunk = np.asarray(self.array[a:a + self.chunk_rows])
                h.update(np.ascontiguousarray(chunk, self.dtype.newbyteorder("<")).tobytes())
        return array_entry(self.dtype.name, shape, h.hexdigest())


@dataclass
class _Tables:
    """What the writer keeps of every request: a few numbers and strings, never its arrays
    (the numbers in flat machine arrays: a few dozen bytes a request)."""

    rows: array = field(default_factory=lambda: array("i"))  # the layout-2 table, row after row
    parents: array = field(default_factory=lambda: array("i"))
    groups: array = field(default_factory=lambda: array("i"))
    output_starts: array = field(default_factory=lambda: array("q"))  # each request's first row
    columns: RequestColumns = field(default_factory=lambda: RequestColumns([], [], [], []))
    prompt_starts: list[int] = field(default_factory=list)
    prompt_counts: list[int] = field(default_factory=list)
    top1_exceptions: list[list[Any]] = field(default_factory=list)
    top_rows: int = 0
    new_tokens: int = 0


class GoldenWriter:
    """Write the golden `target` from requests handed over one at a time (`add`), then
    `finish`; as a context manager, an exception discards what was written (never the target)."""

    def __init__(self, target: Path, prefixes: list[np.ndarray], top_k: int, *,
                 force: bool = False, chunk_rows: int = CHUNK_ROWS,
                 whole_rows: int = WHOLE_ROWS) -> None:
        if chunk_rows < 1 or whole_rows < 0:
            raise ValueError("chunk_rows must be >= 1 and whole_rows >= 0")
        self.given = Path(target)
        self.target = Path(os.path.abspath(target))
        refuse_existing(self.target, force, "zarr.json")
        self.force, self.chunk_rows, self.whole_limit = force, chunk_rows, whole_rows
        self.prefixes, self.top_k = prefixes, top_k
        self.pending: dict[int, RecordedRequest] = {}  # arrived before an earlier index
        self.next = 0  # the index the golden's order needs next
        self.whole: list[RecordedRequest] | None = []  # small golden: held, written by write_golden
        self.whole_held = 0
        self.tmp: Path | None = None
        self.group: zarr.Group | None = None
        self.columns: dict[str, _Column] = {}
        self.tables = _Tables()

    def __enter__(self) -> "GoldenWriter":
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is not None:
            self.abort()

    @property
    def held_rows(self) -> int:
        """Output positions held in memory now (early arrivals, a small golden, buffered rows)."""
        early = sum(len(r.output_ids) for r in self.pending.values())
        buffered = max((c.held for c in self.columns.values()), default=0)
        return early + self.whole_held + buffered

    @property
    def streaming(self) -> bool:
        return self.whole is None

    def add(self, index: int, request: RecordedRequest) -> None:
        if index < self.next or index in self.pending:
            raise GoldenFormatError(f"cannot write golden: request {request.id} given twice")
        problems = request_problems(index, request, self.top_k)
        if problems:
            raise GoldenFormatError(f"cannot write golden: {problems[0]}")
        self.pending[index] = request
        while self.next in self.pending:
            self._take(self.pending.pop(self.next))
            self.next += 1

    def output_of(self, index: int) -> np.ndarray:
        """The output ids of request `index`, given earlier: a later turn's input is built from
        them, read back from what the writer holds or has written (so a recording need not
        hold them itself)."""
        if index in self.pending:
            return self.pending[index].output_ids
        if index >= self.next:
            raise KeyError(index)
        if self.whole is not None:
            return self.whole[index].output_ids
        start = self.tables.output_starts[index]
        end = (self.tables.output_starts[index + 1] if index + 1 < len(self.tables.output_starts)
               else self.columns["output_ids"].rows_given)
        with zarr.config.set({"json_indent": None}):
            return self.columns["output_ids"].rows(start, end)

    def _take(self, request: RecordedRequest) -> None:
        if self.whole is None:
            self._stream(request)
            return
        self.whole.append(request)
        self.whole_held += len(request.output_ids)
        if self.whole_held > self.whole_limit:  # too large to hold: layout 3 from now on
            held, self.whole, self.whole_held = self.whole, None, 0
            self._open()
            for r in held:
                self._stream(r)

    def _open(self) -> None:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = staging_sibling(self.target)
        with zarr.config.set({"json_indent": None}):
            self.group = zarr.create_group(store=LocalStore(self.tmp), zarr_format=3)
        self._column("prefix_tokens", "int32").extend(
            concat_int32(list(self.prefixes), "prefix"))
        for name, dtype in (("new_tokens", "int32"), ("output_ids", "int32"),
                            ("logprobs", "float64")):
            self._column(name, dtype)
        if self.top_k > 0:
            self._column("top_ids_rest", "int32", self.top_k - 1)
            self._column("top_logprobs_rest", "float64", self.top_k - 1)

    def _column(self, name: str, dtype: str, width: int | None = None) -> _Column:
        assert self.group is not None
        with zarr.config.set({"json_indent": None}):
            self.columns[name] = _Column(self.group, name, dtype, width, self.chunk_rows)
        return self.columns[name]

    def _stream(self, r: RecordedRequest) -> None:
        t, i = self.tables, len(self.tables.parents)
        ids = concat_int32([r.output_ids], "output_ids")
        lps = as_float64(r.logprobs, "logprobs")
        new = concat_int32([r.new_tokens], "new_tokens")
        t.output_starts.append(self.columns["output_ids"].rows_given)
        t.rows.extend([int(r.group), int(r.branch), int(r.turn), int(r.parent),
                       int(r.max_new_tokens), int(r.cached_tokens), int(r.num_retractions),
                       len(new), len(ids)])
        t.parents.append(int(r.parent))
        t.groups.append(int(r.group))
        t.columns.ids.append(r.id)
        t.columns.finish_reasons.append(interned_reason(r.finish_reason))
        t.columns.cached_details.append(r.cached_details)
        t.new_tokens += len(new)
        with zarr.config.set({"json_indent": None}):
            self.columns["new_tokens"].extend(new)
            self.columns["output_ids"].extend(ids)
            self.columns["logprobs"].extend(lps)
            if self.top_k > 0:
                self._stream_top(i, r, ids, lps)
            self._stream_prompt(r)

    def _stream_top(self, i: int, r: RecordedRequest, ids: np.ndarray, lps: np.ndarray) -> None:
        t = self.tables
        if r.top_ids is None or r.top_logprobs is None:
            t.columns.no_top.append(i)
            return
        top_ids = concat_int32([r.top_ids], "top_ids").reshape(-1, self.top_k)
        top_lps = as_float64(r.top_logprobs, "top_logprobs").reshape(-1, self.top_k)
        same = (top_ids[:, 0] == ids) & same_bits(top_lps[:, 0], lps)
        for j in np.flatnonzero(~same):
            bits = int(top_lps[j:j + 1, 0].view(np.uint64)[0])
            t.top1_exceptions.append([t.top_rows + int(j), int(top_ids[j, 0]),
                                      format(bits, "016x")])
        t.top_rows += len(top_ids)
        self.columns["top_ids_rest"].extend(top_ids[:, 1:])
        self.columns["top_logprobs_rest"].extend(top_lps[:, 1:])

    def _stream_prompt(self, r: RecordedRequest) -> None:
        t = self.tables
        t.prompt_starts.append(int(r.prompt_logprob_start))
        t.prompt_counts.append(0 if r.prompt_logprobs is None else len(r.prompt_logprobs))
        if r.prompt_logprobs is not None:
            if "prompt_logprobs" not in self.columns:
                self._column("prompt_logprobs", "float64")
            self.columns["prompt_logprobs"].extend(as_float64(r.prompt_logprobs,
                                                              "prompt_logprobs"))

    def finish(self, count: int, scenario: dict[str, Any], sampling: dict[str, Any],
               meta: dict[str, Any]) -> Path:
        """Publish the golden of `count` requests (all must have been added)."""
        if self.next != count or self.pending:
            missing = self.next if self.next < count else min(self.pending)
            raise GoldenFormatError(f"cannot write golden: request {missing} was never recorded")
        if self.whole is not None:
            return write_golden(Golden(scenario=scenario, prefixes=self.prefixes,
                                       requests=self.whole, sampling=sampling, meta=meta),
                                self.given, force=self.force)
        try:
            self._finish_chunked(scenario, sampling, meta)
        except OSError as exc:
            if exc.errno is not None:  # e.g. a full disk: name the golden, not a temp directory
                raise OSError(exc.errno, exc.strerror or str(exc), str(self.given)) from None
            raise
        return self.given

    def _finish_chunked(self, scenario: dict[str, Any], sampling: dict[str, Any],
                        meta: dict[str, Any]) -> None:
        t = self.tables
        problems = check_tree(t.parents, t.groups, len(self.prefixes), t.columns.ids)
        if problems:
            raise GoldenFormatError(f"cannot write golden: {problems[0]}")
        assert self.group is not None and self.tmp is not None
        with zarr.config.set({"json_indent": None}):
            self._column("requests", "int32", TABLE_WIDTH).extend(
                np.frombuffer(t.rows, dtype=np.int32).reshape(-1, TABLE_WIDTH))
            entries = {name: c.close() for name, c in self.columns.items()}
            counts = {"groups": len(self.prefixes), "requests": len(t.parents),
                      "prefix_tokens": int(sum(len(p) for p in self.prefixes)),
                      "new_tokens": t.new_tokens,
                      "output_tokens": self.columns["output_ids"].rows_given,
                      "top_rows": t.top_rows}
            extra: dict[str, Any] = {"prefix_lengths": [len(p) for p in self.prefixes]}
            if self.top_k > 0:
                extra["top1_exceptions"] = t.top1_exceptions
            prompt = ({"starts": t.prompt_starts, "counts": t.prompt_counts}
                      if "prompt_logprobs" in self.columns else None)
            attrs = root_attrs(scenario, sampling, meta, self.top_k, t.columns, counts,
                               {n: entries[n] for n in sorted(entries)}, extra, prompt,
                               version=CHUNKED_VERSION)
            self.group.update_attributes(attrs)
        publish(self.tmp, self.target, force=self.force, marker="zarr.json")
        self.tmp = None

    def abort(self) -> None:
        """Remove what was written (the hidden sibling); the target is never touched."""
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
