"""Record a scenario straight into a golden on disk, one finished request at a time.

`record` (replay.run.recorder) returns the whole golden in memory, which a determinism check
needs (it compares whole recordings). One recording (`check_determinism` 1, the default) needs
no such thing: each answer is checked, journalled, turned into the request the golden stores
and handed to a `GoldenWriter` (replay.golden.stream), which writes it out chunk by chunk and
gives back the output ids later turns are built from. What stays in memory is a few numbers per
request, so the memory of `golden record` does not grow with the answers (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from replay.golden.tree import input_ids
from replay.golden.model import RecordedRequest
from replay.golden.scenario import Plan
from replay.run.journal import Journal
from replay.run.recorder import (CACHED, Progress, RecordOptions, ServerFacts, prepare_recording,
                                 record_pass, recorded_request, recording_meta)
from replay.server.apis.base import SAMPLING, Completion
from replay.server.connection import Connection


class RequestSink(Protocol):
    """Where recorded requests go as they complete (a `GoldenWriter`), which gives back the
    output ids of one it was given (what a later turn's input is built from)."""

    def add(self, index: int, request: RecordedRequest) -> None: ...

    def output_of(self, index: int) -> np.ndarray: ...


@dataclass
class Recorded:
    """What a recording gives its caller besides the golden on disk: counts, the distinct cache
    hits the reference reported, its `meta`, and what the golden's root attributes need."""

    requests: int = 0
    output_tokens: int = 0
    hits: set[int] = field(default_factory=set)
    meta: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    misreported: int = 0

    def count(self, request: RecordedRequest, misreported: bool) -> None:
        self.requests += 1
        self.output_tokens += len(request.output_ids)
        self.hits.add(int(request.cached_tokens))
        self.misreported += int(misreported)


async def record_streamed(conn: Connection, plan: Plan, options: RecordOptions,
                          sink: RequestSink, progress: Progress | None = None, *,
                          facts: ServerFacts | None = None, journal: Journal | None = None,
                          already: dict[int, Completion] | None = None) -> Recorded:
    """Record the plan once, each request handed to `sink` as it completes (those in
    `already`, resumed from a journal, first); the golden's metadata and counts."""
    if options.check_determinism != 1:
        raise ValueError("a streamed recording records once (check_determinism 1)")
    facts = await prepare_recording(conn, plan, options, facts)
    if options.reference == CACHED and not already:  # a cached reference starts from empty
        await conn.flush_cache()
    recorded = Recorded(scenario=plan.spec.to_dict(), sampling=dict(SAMPLING))

    def input_len(j: int) -> int:  # j is i itself or an ancestor, which the sink has
        return len(input_ids(plan.requests, plan.prefixes, sink.output_of, j))

    def keep(i: int, completion: Completion) -> None:
        request = recorded_request(plan, i, completion, input_len)
        recorded.count(request, bool(completion.misreported_ids))
        sink.add(i, request)

    await record_pass(conn, plan, keep, schedule=options.schedule, vocab=facts.vocab,
                      progress=progress, journal=journal, already=already,
                      output_of=sink.output_of)
    recorded.meta = recording_meta(conn, facts, options, recorded.misreported)
    return recorded
