"""The in-memory golden: a recorded conversation tree with exact outputs.

A golden stores the tree (`replay.golden.tree`), not copies of inputs: each request's input is rebuilt
by the tree's one input rule. `golden_store` writes and reads this to and from zarr.

Logprobs are held as float64 arrays carrying exactly the values the server sent (float64 values
of float32s for SGLang); comparisons are done on bit patterns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from replay.golden.tree import TreeColumns, TreeNode, input_ids, subset


def interned_reason(reason: Any) -> Any:
    """One string object per distinct finish reason (a golden's JSON, or each answer, gives one
    per request), the same value; anything else as it is (the checks name it)."""
    return sys.intern(reason) if isinstance(reason, str) else reason


@dataclass
class RecordedRequest(TreeNode):
    """One node of the tree (`parent` indexes Golden.requests) and what the reference answered."""

    output_ids: np.ndarray  # int32 [n]
    logprobs: np.ndarray  # float64 [n], exact values received
    top_ids: np.ndarray | None = None  # int32 [n, k]; -1 where the server sent fewer than k
    top_logprobs: np.ndarray | None = None  # float64 [n, k]; NaN where top_ids is -1
    cached_tokens: int = 0
    cached_details: dict[str, int] = field(default_factory=dict)
    finish_reason: str = "length"
    num_retractions: int = 0  # times the server retracted it (SGLang; 0 where not reported)
    # Prompt logprobs (scenarios with `prompt_logprobs = 1`): asked from `logprob_start_len =
    # prompt_logprob_start` (-1: not asked); `prompt_logprobs[j]` scores input token
    # `prompt_logprob_start + 1 + j` (the entry for the start token itself carries none)
    prompt_logprob_start: int = -1
    prompt_logprobs: np.ndarray | None = None  # float64 [len(input) - start - 1]


@runtime_checkable
class SupportsNodes(Protocol):
    """Requests read from disk as they are asked for (`replay.golden.stored.StoredRequests`):
    the tree, the outputs and the prompt-logprob starts can be had without reading the rest of
    any answer, a subset without reading anything, and a pass over every request a window of
    them at a time, each window read at once; the tree's fields as arrays (`columns`) come
    from the table, with no read at all."""

    @property
    def nodes(self) -> Sequence[TreeNode]: ...

    @property
    def columns(self) -> TreeColumns: ...

    @property
    def prompt_starts(self) -> list[int]: ...

    def output_of(self, i: int) -> np.ndarray: ...

    def output_lengths(self) -> np.ndarray: ...

    def select(self, keep: Sequence[int]) -> Sequence[RecordedRequest]: ...

    def windows(self, positions: int) -> Iterator[list[RecordedRequest]]: ...


@dataclass
class Golden:
    """A whole recording: scenario, shared prefixes, requests in topological order, metadata.
    `requests` is a list in memory, or a `SupportsNodes` sequence when read from disk by
    `open_golden` (each request read when asked for, so a large golden is never held)."""

    scenario: dict[str, Any]  # ScenarioSpec as a dict
    prefixes: list[np.ndarray]  # int32, one per group
    requests: Sequence[RecordedRequest]
    sampling: dict[str, Any]  # sampling_params shared by all requests (without max_new_tokens)
    meta: dict[str, Any] = field(default_factory=dict)  # server/model info, tool, platform, api
    # The content checksum of the stored golden this one was read from (its `attrs_sha256`,
    # which covers every array's sha256 and all metadata); kept by subsets (a shard names the
    # whole golden it came from), never written (the store computes its own). None in memory.
    checksum: str | None = field(default=None, compare=False)
    # whether `requests` is read from disk (`SupportsNodes`): asked once, not on every access
    stored: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.stored = isinstance(self.requests, SupportsNodes)

    @property
    def nodes(self) -> Sequence[TreeNode]:
        """The tree without the answers (cheap to walk, whatever holds the requests)."""
        return self.requests.nodes if self.stored else self.requests  # type: ignore[attr-defined]

    @property
    def columns(self) -> TreeColumns:
        """Every node's tree fields as arrays (a pass over the tree without its tokens)."""
        return self.requests.columns if self.stored else TreeColumns.of(self.requests)  # type: ignore[attr-defined]

    @property
    def prompt_starts(self) -> list[int]:
        """Each request's `prompt_logprob_start` (-1: no prompt logprobs)."""
        if self.stored:
            return self.requests.prompt_starts  # type: ignore[attr-defined]
        return [r.prompt_logprob_start for r in self.requests]

    @property
    def has_prompt_logprobs(self) -> bool:
        return any(start >= 0 for start in self.prompt_starts)

    @property
    def top_k(self) -> int:
        for r in self.requests:
            if r.top_ids is not None:
                return int(r.top_ids.shape[1])
        return 0

    def index(self, request_id: str) -> int:
        for i, r in enumerate(self.nodes):
            if r.id == request_id:
                return i
        raise KeyError(request_id)

    def output_of(self, i: int) -> np.ndarray:
        """Request i's recorded output ids."""
        if self.stored:
            return self.requests.output_of(i)  # type: ignore[attr-defined]
        return self.requests[i].output_ids

    def output_lengths(self) -> np.ndarray:
        """Every request's output length (int64), read from no answer when stored."""
        if self.stored:
            return self.requests.output_lengths()  # type: ignore[attr-defined]
        return np.array([len(r.output_ids) for r in self.requests], dtype=np.int64)

    def input_ids(self, i: int) -> np.ndarray:
        """The exact input tokens of request i, rebuilt from the tree."""
        return input_ids(self.nodes, self.prefixes, self.output_of, i)


def subset_golden(golden: Golden, keep: Iterable[int], **meta: Any) -> Golden:
    """The golden holding only the requests at `keep` and their ancestors (parents remapped,
    prefixes, ids and answers unchanged: every kept input is rebuilt exactly as before). `meta`
    entries are added to the golden's metadata (e.g. where the subset came from). A golden
    read from disk stays on disk: its subset reads nothing."""
    kept = (golden.requests.select(list(keep)) if isinstance(golden.requests, SupportsNodes)
            else subset(golden.requests, keep))
    return replace(golden, requests=kept, meta={**golden.meta, **meta})
