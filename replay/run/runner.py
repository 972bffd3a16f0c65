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
from collections.abc import Awaitable, Callable, Iterable, Sequence

import numpy as np

from replay.server.apis.base import NO_EXTRAS, Completion, RequestExtras
from replay.server.connection import Connection
from replay.utils.errors import UsageError
from replay.golden.tree import TreeNode

SCHEDULES = ("lockstep", "interleave", "dag")

InputsFor = Callable[[int], np.ndarray]  # node index -> exact input ids (may read parent results)
OnDone = Callable[[int, Completion], None]  # (node index, its completion)


def check_schedule(name: str) -> str:
    if name not in SCHEDULES:
        raise UsageError(f"unknown schedule {name!r} (choose from {', '.join(SCHEDULES)})")
    return name


async def run_nodes(
    conn: Connection,
    nodes: Sequence[TreeNode],
    inputs_for: InputsFor,
    on_done: OnDone,
    *,
    schedule: str,
    top_k: int,
    vocab_size: int | None,
    only: Iterable[int] | None = None,
    extras_for: Callable[[int], RequestExtras] | None = None,
) -> None:
    """Run every node (or the indices in `only`: the others are already complete); the first
    error cancels the rest and propagates. `extras_for(i)`, when given, is what node i asks
    beyond output logprobs (prompt logprobs, a cache key)."""
    check_schedule(schedule)
    todo = list(range(len(nodes))) if only is None else list(only)

    async def one(i: int) -> None:
        node = nodes[i]
        extras = extras_for(i) if extras_for is not None else NO_EXTRAS
        completion = await conn.complete(inputs_for(i), node.id, max_new_tokens=node.max_new_tokens,
                                         top_k=top_k, vocab_size=vocab_size, extras=extras)
        on_done(i, completion)

    if schedule == "dag":
        await _run_dag(nodes, todo, one)
        return
    for turn in sorted({nodes[i].turn for i in todo}):
        batch = [i for i in todo if nodes[i].turn == turn]
        if schedule == "interleave":
            batch.sort(key=lambda i: (nodes[i].branch, nodes[i].group))
        else:
            batch.sort(key=lambda i: (nodes[i].group, nodes[i].branch))
        await _gather_all(one(i) for i in batch)


async def _run_dag(nodes: Sequence[TreeNode], todo: list[int],
                   one: Callable[[int], Awaitable[None]]) -> None:
    done: dict[int, asyncio.Event] = {i: asyncio.Event() for i in todo}

    async def after_parent(i: int) -> None:
        parent = nodes[i].parent
        if parent in done:  # a parent outside `todo` (e.g. resumed) is already complete
            await done[parent].wait()
        await one(i)
        done[i].set()

    ordered = sorted(todo, key=lambda i: (nodes[i].turn, nodes[i].group, nodes[i].branch))
    await _gather_all(after_parent(i) for i in ordered)


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
