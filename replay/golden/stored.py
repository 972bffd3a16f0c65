"""A stored golden's requests, each read from disk when it is asked for.

`replay.golden.store.open_golden` checks a golden whole (every checksum, its structure) by
streaming its chunks, then hands out a `Golden` whose `requests` is a `StoredRequests`: a
sequence that builds request i from the chunks that hold it (`replay.golden.chunks`, a few
decoded chunks held per array), so a replay of 100k requests holds about as much as one of 1k.
Request i is the very `RecordedRequest` the whole-golden reader gives (rank 0 of its top-k rows
rebuilt from its chosen tokens and the `top1_exceptions`, float32 values widened on their bit
patterns), with read-only arrays of their own (never views that would pin a chunk). `nodes`
walks the tree without reading any answer, `select` keeps a subset (a shard, a minimized
golden) without reading, and `windows` gives a pass over every request (the meaning check's) a
window at a time, each array read once per window instead of once per request.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from replay.golden.checks import Unreadable
from replay.golden.chunks import ChunkedArray
from replay.golden.model import RecordedRequest, interned_reason
from replay.golden.pack import Table
from replay.golden.tree import TreeColumns, TreeNode, closed_under_parents
from replay.utils.bits import widen_float32
from replay.utils.shared import SharedValues
from replay.utils.errors import GoldenFormatError


def named(where: Path | str, exc: Unreadable) -> GoldenFormatError:
    """A chunk that cannot be read (or changed since it was checked), as the error naming the
    golden (a plain `except` at each public read: a context manager per read was about 2% of
    a replay's CPU under the profiler)."""
    return GoldenFormatError(f"{where}: {exc}")


class StoredRequests(Sequence[RecordedRequest]):
    """The requests of a checked stored golden, in golden order (`index`: which stored
    requests, `parents`: their parents in this sequence; a `select` of another)."""

    def __init__(self, attrs: dict[str, Any], table: Table, arrays: dict[str, ChunkedArray],
                 index: np.ndarray | None = None, parents: np.ndarray | None = None) -> None:
        self.where: Path | str = "the golden"  # named in a read's error (open_golden sets it)
        self.attrs = attrs
        self.table = table
        self.arrays = arrays
        self.k = int(attrs["top_k"])
        n = len(attrs["request_ids"])
        self.index = np.arange(n, dtype=np.int64) if index is None else index
        self.parents = table.requests[:, 3].astype(np.int64) if parents is None else parents
        lengths = np.diff(table.output_offsets)
        top_lengths = lengths.copy()
        top_lengths[attrs["no_top_requests"]] = 0
        self.top_offsets = np.concatenate([[0], np.cumsum(top_lengths)]).astype(np.int64)
        self.no_top = set(attrs["no_top_requests"])
        attrs["finish_reasons"] = [interned_reason(r) for r in attrs["finish_reasons"]]
        shared = SharedValues()
        attrs["cached_tokens_details"] = [shared(d) if isinstance(d, dict) else d
                                          for d in attrs["cached_tokens_details"]]
        prompt = attrs.get("prompt_logprobs")
        self.prompt_starts_all = prompt["starts"] if prompt is not None else None
        self.prompt_offsets = (np.concatenate([[0], np.cumsum(prompt["counts"], dtype=np.int64)])
                               if prompt is not None else None)
        self._nodes = _Nodes(self)  # one view, made once (a replay asks a few times a request)
        self._columns: TreeColumns | None = None

    def __len__(self) -> int:
        return len(self.index)

    @overload
    def __getitem__(self, i: int) -> RecordedRequest: ...

    @overload
    def __getitem__(self, i: slice) -> list[RecordedRequest]: ...

    def __getitem__(self, i: int | slice) -> RecordedRequest | list[RecordedRequest]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self._request(i)

    def __iter__(self) -> Iterator[RecordedRequest]:
        for i in range(len(self)):
            yield self._request(i)

    def iterate(self) -> Iterator[RecordedRequest]:
        """Every request, a chunk that cannot be read raising `Unreadable` (for a reader that
        retries: `store.read_golden`)."""
        for i in range(len(self)):
            yield self._read(i, int(self.index[i]))

    def windows(self, positions: int) -> Iterator[list[RecordedRequest]]:
        """Every request in golden order, about `positions` output positions at a time, each
        window's arrays read once for all its requests (a pass over the whole golden, as the
        meaning check makes, then costs a few reads per window, not per request). A window's
        requests are views of its arrays: for a pass that drops each window before the next."""
        ends = np.cumsum(self.output_lengths())
        i = 0
        while i < len(self):
            start = int(ends[i - 1]) if i else 0
            j = min(max(int(np.searchsorted(ends, start + positions)) + 1, i + 1), len(self))
            try:
                window = self._window(i, j)
            except Unreadable as exc:
                raise named(self.where, exc) from None
            yield window
            i = j

    @property
    def nodes(self) -> Sequence[TreeNode]:
        """The tree alone: request i's node, read without its answer."""
        return self._nodes

    @property
    def columns(self) -> TreeColumns:
        """The tree's fields from the table (nothing read), made once."""
        if self._columns is None:
            group, branch, turn = self.table.requests[self.index, :3].T.astype(np.int64)
            new = np.diff(self.table.new_token_offsets)[self.index].astype(np.int64)
            self._columns = TreeColumns(group, branch, turn, self.parents.astype(np.int64), new)
        return self._columns

    @property
    def prompt_starts(self) -> list[int]:
        """Where each request's prompt logprobs start (-1: none asked)."""
        if self.prompt_starts_all is None:
            return [-1] * len(self)
        return [int(self.prompt_starts_all[s]) for s in self.index]

    def select(self, keep: Sequence[int]) -> "StoredRequests":
        """The requests at `keep` and their ancestors, parents remapped (`tree.subset`'s rule),
        nothing read."""
        kept = closed_under_parents(lambda i: int(self.parents[i]), keep)
        new = {old: j for j, old in enumerate(kept)}
        parents = np.array([new[int(self.parents[old])] if self.parents[old] >= 0 else -1
                            for old in kept], dtype=np.int64)
        selected = StoredRequests(self.attrs, self.table, self.arrays,
                                  index=self.index[kept] if kept else np.zeros(0, np.int64),
                                  parents=parents)
        selected.where = self.where
        return selected

    def output_of(self, i: int) -> np.ndarray:
        """Request i's output ids alone (what a later turn's input needs)."""
        try:
            return self._output(int(self.index[i]))
        except Unreadable as exc:
            raise named(self.where, exc) from None

    def output_lengths(self) -> np.ndarray:
        """Every request's output length, from the table (nothing read)."""
        return np.diff(self.table.output_offsets)[self.index]

    def node(self, i: int) -> TreeNode:
        """Request i's node (its tree fields and new tokens), without its answer."""
        try:
            return self._node(i, int(self.index[i]))
        except Unreadable as exc:
            raise named(self.where, exc) from None

    def _request(self, i: int) -> RecordedRequest:
        try:
            return self._read(i, int(self.index[i]))
        except Unreadable as exc:
            raise named(self.where, exc) from None

    # The readers below raise `Unreadable`; the public methods above name the golden.

    def _output(self, s: int) -> np.ndarray:
        off = self.table.output_offsets
        return self.arrays["output_ids"].rows(int(off[s]), int(off[s + 1]))

    def _node(self, i: int, s: int, new_tokens: np.ndarray | None = None) -> TreeNode:
        group, branch, turn, _, max_new, _ = self.table.requests[s].tolist()
        if new_tokens is None:
            off = self.table.new_token_offsets
            new_tokens = self.arrays["new_tokens"].rows(int(off[s]), int(off[s + 1]))
        return TreeNode(id=self.attrs["request_ids"][s], group=group, branch=branch, turn=turn,
                        parent=int(self.parents[i]), new_tokens=new_tokens, max_new_tokens=max_new)

    def _read(self, i: int, s: int) -> RecordedRequest:
        a, b = int(self.table.output_offsets[s]), int(self.table.output_offsets[s + 1])
        ids = self._output(s)
        lps = _float64(self.arrays["logprobs"].rows(a, b))
        top: dict[str, np.ndarray | None] = {"top_ids": None, "top_logprobs": None}
        if self.k > 0 and s not in self.no_top:
            top = self._top(int(self.top_offsets[s]), ids, lps)
        prompt = None
        if self._prompt_start(s) >= 0 and self.prompt_offsets is not None:
            p, q = int(self.prompt_offsets[s]), int(self.prompt_offsets[s + 1])
            prompt = _float64(self.arrays["prompt_logprobs"].rows(p, q))
        return self._assemble(self._node(i, s), s, ids, lps, top, prompt)

    def _window(self, i: int, j: int) -> list[RecordedRequest]:
        """Requests i..j-1, each array read once for all of them (their own arrays are views of
        the window's); request by request where they are not stored side by side (a select)."""
        stored = self.index[i:j]
        if j - i < 2 or not bool((np.diff(stored) == 1).all()):
            return [self._read(x, int(self.index[x])) for x in range(i, j)]
        s0, s1 = int(stored[0]), int(stored[-1]) + 1
        out_off, new_off = self.table.output_offsets, self.table.new_token_offsets
        a0 = int(out_off[s0])
        ids = self.arrays["output_ids"].rows(a0, int(out_off[s1]))
        lps = _float64(self.arrays["logprobs"].rows(a0, int(out_off[s1])))
        new = self.arrays["new_tokens"].rows(int(new_off[s0]), int(new_off[s1]))
        t0 = int(self.top_offsets[s0])
        tops: dict[str, np.ndarray | None] = {}  # the window's top rows, of the requests with top-k
        if self.k > 0:
            with_top = np.diff(self.top_offsets[s0:s1 + 1]) > 0
            chosen = np.repeat(with_top, np.diff(out_off[s0:s1 + 1]))
            tops = self._top(t0, ids[chosen], lps[chosen])
        p0 = int(self.prompt_offsets[s0]) if self.prompt_offsets is not None else 0
        prompts = (_float64(self.arrays["prompt_logprobs"].rows(p0, int(self.prompt_offsets[s1])))
                   if self.prompt_offsets is not None else None)
        window = []
        for x in range(i, j):
            s = s0 + x - i
            a, b = int(out_off[s]) - a0, int(out_off[s + 1]) - a0
            top: dict[str, np.ndarray | None] = {"top_ids": None, "top_logprobs": None}
            if tops and s not in self.no_top:
                t, u = int(self.top_offsets[s]) - t0, int(self.top_offsets[s + 1]) - t0
                top = {name: rows[t:u] for name, rows in tops.items()}  # type: ignore[index]
            prompt = None
            if self._prompt_start(s) >= 0 and prompts is not None:
                p, q = int(self.prompt_offsets[s]) - p0, int(self.prompt_offsets[s + 1]) - p0
                prompt = prompts[p:q]
            n0, n1 = int(new_off[s]) - int(new_off[s0]), int(new_off[s + 1]) - int(new_off[s0])
            window.append(self._assemble(self._node(x, s, new[n0:n1]), s, ids[a:b], lps[a:b], top,
                                         prompt))
        return window

    def _prompt_start(self, s: int) -> int:
        return -1 if self.prompt_starts_all is None else int(self.prompt_starts_all[s])

    def _assemble(self, node: TreeNode, s: int, ids: np.ndarray, lps: np.ndarray,
                  top: dict[str, np.ndarray | None], prompt: np.ndarray | None) -> RecordedRequest:
        extra: dict[str, Any] = {}
        if prompt is not None:
            extra = {"prompt_logprob_start": self._prompt_start(s), "prompt_logprobs": prompt}
        return RecordedRequest(
            id=node.id, group=node.group, branch=node.branch, turn=node.turn,
            parent=node.parent, new_tokens=node.new_tokens, max_new_tokens=node.max_new_tokens,
            output_ids=ids, logprobs=lps,
            cached_tokens=int(self.table.requests[s, 5]),
            cached_details=self.attrs["cached_tokens_details"][s],
            finish_reason=self.attrs["finish_reasons"][s],
            num_retractions=int(self.table.num_retractions[s]),
            **top, **extra)

    def _top(self, t: int, ids: np.ndarray, lps: np.ndarray) -> dict[str, np.ndarray | None]:
        n = len(ids)
        top1 = self.table.top1
        if top1 is None:  # layout 1: stored whole
            return {"top_ids": self.arrays["top_ids"].rows(t, t + n),
                    "top_logprobs": _float64(self.arrays["top_logprobs"].rows(t, t + n))}
        top_ids = np.empty((n, self.k), dtype=np.int32)
        top_lps = np.empty((n, self.k), dtype=np.float64)
        top_ids[:, 0], top_lps[:, 0] = ids, lps
        top_ids[:, 1:] = self.arrays["top_ids_rest"].rows(t, t + n)
        top_lps[:, 1:] = _float64(self.arrays["top_logprobs_rest"].rows(t, t + n))
        lo, hi = int(top1.rows.searchsorted(t)), int(top1.rows.searchsorted(t + n))
        if hi > lo:  # the rows whose top-1 is not the sampled token (few, or none)
            rows = top1.rows[lo:hi] - t
            top_ids[rows, 0], top_lps[rows, 0] = top1.ids[lo:hi], top1.values[lo:hi]
        top_ids.flags.writeable = top_lps.flags.writeable = False
        return {"top_ids": top_ids, "top_logprobs": top_lps}


class _Nodes(Sequence[TreeNode]):
    """A `StoredRequests`' tree: node i read without its answer."""

    def __init__(self, requests: StoredRequests) -> None:
        self.requests = requests

    def __len__(self) -> int:
        return len(self.requests)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if isinstance(i, slice):
            return [self.requests.node(j) for j in range(*i.indices(len(self)))]
        n = len(self.requests.index)
        if not -n <= i < n:
            raise IndexError(i)
        return self.requests.node(i % n)

    def __iter__(self) -> Iterator[TreeNode]:
        for i in range(len(self.requests.index)):
            yield self.requests.node(i)


def _float64(values: np.ndarray) -> np.ndarray:
    """Stored logprobs as float64 with the very bits: float32 widened on its bit patterns."""
    if values.dtype == np.float32:
        wide = widen_float32(values)
        wide.flags.writeable = False
        return wide
    return values
