"""Record a scenario's reference outputs from a server into an in-memory Golden."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from replay.client import ServerClient
from replay.diff import IDENTICAL, Policy, diff_outputs
from replay.fingerprint import model_identity, source_meta, vocab_size
from replay.golden import Golden, RecordedRequest
from replay.journal import Journal
from replay.protocol import SAMPLING, Completion
from replay.runner import Job, run_jobs
from replay.scenario import Plan, check_vocab

Progress = Callable[[str], None]  # called with the request id as each completes


@dataclass(frozen=True)
class RecordOptions:
    schedule: str = "lockstep"
    check_determinism: int = 1  # record this many times; all must agree bit for bit
    journal: Path | None = None  # where to journal completed requests (crash-safe resume)
    resume: bool = False  # continue from the journal of an interrupted run


class NonDeterministicReference(Exception):
    """Repeated recordings of the reference differ: the golden would be worthless."""


def jobs_of(plan: Plan) -> list[Job]:
    return [
        Job(index=i, id=r.id, group=r.group, branch=r.branch, turn=r.turn, parent=r.parent,
            max_new_tokens=r.max_new_tokens)
        for i, r in enumerate(plan.requests)
    ]


async def record_once(client: ServerClient, plan: Plan, *, schedule: str, vocab: int | None,
                      progress: Progress | None = None, journal: Journal | None = None,
                      already: dict[int, Completion] | None = None) -> list[Completion]:
    """One recording of the plan; requests in `already` (from a journal) are not sent again."""
    done: dict[int, Completion] = dict(already or {})
    inputs: dict[int, np.ndarray] = {}

    def inputs_for(i: int) -> np.ndarray:
        if i not in inputs:
            req = plan.requests[i]
            if req.parent < 0:
                head = plan.prefixes[req.group]
            else:
                head = np.concatenate([inputs_for(req.parent), done[req.parent].output_ids])
            inputs[i] = np.concatenate([head, req.new_tokens]).astype(np.int32)
        return inputs[i]

    def on_done(job: Job, completion: Completion) -> None:
        done[job.index] = completion
        if journal:
            journal.add(job.index, job.id, completion)
        if progress:
            progress(job.id)

    remaining = [j for j in jobs_of(plan) if j.index not in done]
    if progress:
        for _ in range(len(plan.requests) - len(remaining)):
            progress("resumed")
    await run_jobs(client, remaining, inputs_for, on_done, schedule=schedule,
                   top_k=plan.spec.top_k, vocab_size=vocab)
    return [done[i] for i in range(len(plan.requests))]


async def record(client: ServerClient, plan: Plan, options: RecordOptions,
                 progress: Progress | None = None) -> Golden:
    """Record; the journal (if any) is left in place for the caller to remove once the golden
    is safely written."""
    server_info = await client.server_info()
    model_info = await client.model_info()
    vocab = vocab_size(model_info, server_info)
    check_vocab(plan.spec, vocab)
    journal, already = None, {}
    if options.journal is not None:
        header = {"scenario": plan.spec.to_dict(), "model": model_identity(model_info, server_info).label}
        journal, already = Journal.start(options.journal, header, options.resume)
    runs: list[list[Completion]] = []
    try:
        for attempt in range(max(1, options.check_determinism)):
            if attempt > 0:
                await client.flush_cache()
            runs.append(await record_once(
                client, plan, schedule=options.schedule, vocab=vocab, progress=progress,
                journal=journal if attempt == 0 else None, already=already if attempt == 0 else None,
            ))
    finally:
        if journal:
            journal.close()
    differences = determinism_differences(plan, runs)
    if differences:
        raise NonDeterministicReference(
            f"{len(differences)} request(s) differ across {len(runs)} recordings; first: "
            + "; ".join(differences[:5])
        )
    return Golden(
        scenario=plan.spec.to_dict(),
        prefixes=plan.prefixes,
        requests=[_recorded(plan, i, c) for i, c in enumerate(runs[0])],
        sampling=dict(SAMPLING),
        meta=source_meta(client.url, server_info, model_info, api=client.api.name),
    )


def determinism_differences(plan: Plan, runs: list[list[Completion]]) -> list[str]:
    exact = Policy("exact")
    found: list[str] = []
    for r, run in enumerate(runs[1:], start=1):
        for i, (a, b) in enumerate(zip(runs[0], run)):
            d = diff_outputs(a, b, exact)
            if d.status != IDENTICAL and d.first is not None:
                found.append(f"{plan.requests[i].id} (run {r}, {d.status} at position "
                             f"{d.first.position})")
    return found


def _recorded(plan: Plan, i: int, c: Completion) -> RecordedRequest:
    req = plan.requests[i]
    return RecordedRequest(
        id=req.id, group=req.group, branch=req.branch, turn=req.turn, parent=req.parent,
        new_tokens=req.new_tokens, max_new_tokens=req.max_new_tokens,
        output_ids=c.output_ids, logprobs=c.logprobs, top_ids=c.top_ids,
        top_logprobs=c.top_logprobs, cached_tokens=c.cached_tokens,
        cached_details=c.cached_details, finish_reason=c.finish_reason,
    )
