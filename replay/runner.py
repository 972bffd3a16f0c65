"""Send a conversation tree to a server in a chosen order, one completion at a time.

A request is sent only after its parent completed, so the server's cache can hold the parent.
The schedule decides the rest:
- `lockstep`: all requests of a turn (group-major: g0b0, g0b1, ...), then the next turn;
- `interleave`: like lockstep, but each turn is submitted across groups (g0b0, g1b0, g2b0, g0b1, ...);
- `dag`: each conversation advances as soon as its own parent is done (no turn barrier).
Concurrency is bounded by the client. Results are handed to `on_done` as they arrive, so the
caller decides what to keep (replay streams them into the diff and keeps nothing else).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from replay.client import ServerClient
from replay.errors import UsageError
from replay.protocol import Completion

SCHEDULES = ("lockstep", "interleave", "dag")


@dataclass(frozen=True)
class Job:
    index: int
    id: str
    group: int
    branch: int
    turn: int
    parent: int  # index of the parent job, -1 for turn 0
    max_new_tokens: int


InputsFor = Callable[[int], np.ndarray]  # job index -> exact input ids (may read parent results)
OnDone = Callable[[Job, Completion], None]


def check_schedule(name: str) -> str:
    if name not in SCHEDULES:
        raise UsageError(f"unknown schedule {name!r} (choose from {', '.join(SCHEDULES)})")
    return name


async def run_jobs(
    client: ServerClient,
    jobs: Sequence[Job],
    inputs_for: InputsFor,
    on_done: OnDone,
    *,
    schedule: str,
    top_k: int,
    vocab_size: int | None,
) -> None:
    """Run every job; the first error cancels the rest and propagates."""
    check_schedule(schedule)

    async def one(job: Job) -> None:
        path, body = client.api.request(inputs_for(job.index), job.max_new_tokens, top_k)
        raw = await client.generate(body, job.id, path)
        completion = client.api.parse(
            raw, job.id, max_new_tokens=job.max_new_tokens, top_k=top_k, vocab_size=vocab_size
        )
        on_done(job, completion)

    if schedule == "dag":
        await _run_dag(jobs, one)
        return
    for turn in sorted({j.turn for j in jobs}):
        batch = [j for j in jobs if j.turn == turn]
        if schedule == "interleave":
            batch.sort(key=lambda j: (j.branch, j.group))
        else:
            batch.sort(key=lambda j: (j.group, j.branch))
        await _gather_all(one(j) for j in batch)


async def _run_dag(jobs: Sequence[Job], one: Callable[[Job], Awaitable[None]]) -> None:
    done: dict[int, asyncio.Event] = {j.index: asyncio.Event() for j in jobs}

    async def after_parent(job: Job) -> None:
        if job.parent in done:  # a parent outside `jobs` (e.g. resumed) is already complete
            await done[job.parent].wait()
        await one(job)
        done[job.index].set()

    ordered = sorted(jobs, key=lambda j: (j.turn, j.group, j.branch))
    await _gather_all(after_parent(j) for j in ordered)


async def _gather_all(coros) -> None:  # type: ignore[no-untyped-def]
    """Like gather, but on the first failure cancel the siblings and wait for them to finish."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
