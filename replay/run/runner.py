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
from dataclasses import dataclass

import numpy as np

from replay.server.apis.base import NO_EXTRAS, Completion, RequestExtras
from replay.server.connection import Connection
from replay.utils.errors import UsageError
from replay.golden.tree import TreeColumns, TreeNode

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
    columns: TreeColumns | None = None,
) -> None:
    """Run every node (or the indices in `only`: the others are already complete); the first
    error cancels the rest and propagates. `extras_for(i)`, when given, is what node i asks
    beyond output logprobs (prompt logprobs, a cache key). As many workers as the client lets
    requests be in flight send them in the schedule's order, each building its request's input
    only when it sends it: what is held does not grow with the tree. `columns`, when given, are
    the nodes' tree fields (`Golden.columns`: a stored golden's, read from no node)."""
    check_schedule(schedule)
    todo = np.arange(len(nodes), dtype=np.int64) if only is None else np.fromiter(only, np.int64)
    shape = _Shape.of(columns if columns is not None else TreeColumns.of(nodes), todo)

    async def one(i: int) -> None:
        node = nodes[i]
        extras = extras_for(i) if extras_for is not None else NO_EXTRAS
        completion = await conn.complete(inputs_for(i), node.id, max_new_tokens=node.max_new_tokens,
                                         top_k=top_k, vocab_size=vocab_size, extras=extras)
        on_done(i, completion)

    workers = conn.in_flight
    if schedule == "dag":
        await _run_dag(shape, one, workers)
        return
    for turn in np.unique(shape.turn).tolist():
        at = shape.turn == turn
        first, second = ((shape.branch, shape.group) if schedule == "interleave"
                         else (shape.group, shape.branch))
        batch = shape.index[at][np.lexsort((second[at], first[at]))].tolist()
        await _drain(batch, len(batch), one, workers, lambda i: ())


@dataclass(frozen=True)
class _Shape:
    """The tree fields the order needs, of the nodes to run (`index`), one array each: what is
    held for the whole run is 40 bytes a node, whatever the tree."""

    index: np.ndarray
    turn: np.ndarray
    group: np.ndarray
    branch: np.ndarray
    parent: np.ndarray

    @classmethod
    def of(cls, columns: TreeColumns, todo: np.ndarray) -> "_Shape":
        return cls(todo, columns.turn[todo], columns.group[todo], columns.branch[todo],
                   columns.parent[todo])


async def _run_dag(shape: _Shape, one: Callable[[int], Awaitable[None]], workers: int) -> None:
    """Each node as soon as its parent is done: roots first (by group, branch), then each
    node's children join the queue when it completes."""
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    order = np.lexsort((shape.branch, shape.group, shape.turn))
    parent_runs = np.isin(shape.parent, shape.index)  # else complete already (e.g. resumed)
    for k in order.tolist():
        i = int(shape.index[k])
        if parent_runs[k]:
            children.setdefault(int(shape.parent[k]), []).append(i)
        else:
            roots.append(i)
    await _drain(roots, len(shape.index), one, workers, lambda i: children.pop(i, ()))


async def _drain(first: list[int], total: int, one: Callable[[int], Awaitable[None]],
                 workers: int, then: Callable[[int], Iterable[int]]) -> None:
    """Run `one` on `total` nodes on at most `workers` workers, in queue order: `first`, then
    what `then(i)` names once node i is done. The first failure cancels the other workers
    (each waited for) and propagates."""
    if total == 0:
        return
    queue: asyncio.Queue[int | None] = asyncio.Queue()
    for i in first:
        queue.put_nowait(i)
    count = max(1, min(workers, total))
    left = total

    async def worker() -> None:
        nonlocal left
        while (i := await queue.get()) is not None:
            await one(i)
            for child in then(i):
                queue.put_nowait(child)
            left -= 1
            if left == 0:  # every node is done: let every worker go
                for _ in range(count):
                    queue.put_nowait(None)

    await _gather_all(worker() for _ in range(count))


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
