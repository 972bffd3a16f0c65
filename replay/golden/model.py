"""The in-memory golden: a recorded conversation tree with exact outputs.

A golden stores the tree (`replay.golden.tree`), not copies of inputs: each request's input is rebuilt
by the tree's one input rule. `golden_store` writes and reads this to and from zarr.

Logprobs are held as float64 arrays carrying exactly the values the server sent (float64 values
of float32s for SGLang); comparisons are done on bit patterns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from replay.golden.tree import TreeNode, input_ids, subset


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


@dataclass
class Golden:
    """A whole recording: scenario, shared prefixes, requests in topological order, metadata."""

    scenario: dict[str, Any]  # ScenarioSpec as a dict
    prefixes: list[np.ndarray]  # int32, one per group
    requests: list[RecordedRequest]
    sampling: dict[str, Any]  # sampling_params shared by all requests (without max_new_tokens)
    meta: dict[str, Any] = field(default_factory=dict)  # server/model info, tool, platform, api
    # The content checksum of the stored golden this one was read from (its `attrs_sha256`,
    # which covers every array's sha256 and all metadata); kept by subsets (a shard names the
    # whole golden it came from), never written (the store computes its own). None in memory.
    checksum: str | None = field(default=None, compare=False)

    @property
    def top_k(self) -> int:
        for r in self.requests:
            if r.top_ids is not None:
                return int(r.top_ids.shape[1])
        return 0

    def index(self, request_id: str) -> int:
        for i, r in enumerate(self.requests):
            if r.id == request_id:
                return i
        raise KeyError(request_id)

    def input_ids(self, i: int) -> np.ndarray:
        """The exact input tokens of request i, rebuilt from the tree."""
        return input_ids(self.requests, self.prefixes, lambda j: self.requests[j].output_ids, i)


def subset_golden(golden: Golden, keep: Iterable[int], **meta: Any) -> Golden:
    """The golden holding only the requests at `keep` and their ancestors (parents remapped,
    prefixes, ids and answers unchanged: every kept input is rebuilt exactly as before). `meta`
    entries are added to the golden's metadata (e.g. where the subset came from)."""
    return replace(golden, requests=subset(golden.requests, keep), meta={**golden.meta, **meta})
