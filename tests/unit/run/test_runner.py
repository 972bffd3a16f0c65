"""The runner (replay/run/runner.py): the schedule's order, a parent always done before its
child is sent, at most `--concurrency` requests in flight, and each input built only when its
request is sent, so what a run holds does not grow with the tree."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from replay.golden.tree import TreeNode, request_id
from replay.run.runner import run_nodes
from replay.server.apis.base import Completion


def tree(groups: int = 2, branches: int = 2, turns: int = 2) -> list[TreeNode]:
    """Turn-major, then group, then branch (a scenario's order)."""
    nodes: list[TreeNode] = []
    index: dict[tuple[int, int, int], int] = {}
    for t in range(turns):
        for g in range(groups):
            for b in range(branches):
                index[(g, b, t)] = len(nodes)
                nodes.append(TreeNode(id=request_id(g, b, t), group=g, branch=b, turn=t,
                                      parent=index[(g, b, t - 1)] if t else -1,
                                      new_tokens=np.arange(2, dtype=np.int32), max_new_tokens=1))
    return nodes


class FakeConnection:
    """Answers after `delay` seconds (a per-id delay may override it), noting what was sent;
    like the real transport, it lets at most `in_flight` requests through at once."""

    def __init__(self, in_flight: int, delay: float = 0.0, delays: dict[str, float] | None = None,
                 fail: str | None = None) -> None:
        self.in_flight, self.delay, self.delays, self.fail = in_flight, delay, delays or {}, fail
        self.sent: list[str] = []
        self.done: list[str] = []
        self.now = self.most = 0
        self.slots: asyncio.Semaphore | None = None  # made in the run's own event loop

    async def complete(self, input_ids, request_id, **_):  # type: ignore[no-untyped-def]
        self.slots = self.slots or asyncio.Semaphore(self.in_flight)
        async with self.slots:
            self.sent.append(request_id)
            self.now += 1
            self.most = max(self.most, self.now)
            try:
                await asyncio.sleep(self.delays.get(request_id, self.delay))
                if request_id == self.fail:
                    raise RuntimeError(f"{request_id} failed")
            finally:
                self.now -= 1
        self.done.append(request_id)
        return Completion(output_ids=np.zeros(1, np.int32), logprobs=np.zeros(1), top_ids=None,
                          top_logprobs=None, cached_tokens=0)


def run(conn: FakeConnection, nodes: list[TreeNode], schedule: str, only=None, built=None):  # type: ignore[no-untyped-def]
    def inputs_for(i: int) -> np.ndarray:
        if built is not None:
            built(i)
        return np.zeros(3, np.int32)

    asyncio.run(run_nodes(conn, nodes, inputs_for, lambda i, c: None, schedule=schedule,  # type: ignore[arg-type]
                          top_k=0, vocab_size=None, only=only))


@pytest.mark.parametrize("schedule", ["lockstep", "interleave", "dag"])
def test_no_more_inputs_are_built_and_waiting_than_requests_may_be_in_flight(schedule):
    conn, built = FakeConnection(in_flight=3, delay=0.01), []
    nodes = tree(groups=4, branches=3)
    waiting = []

    def note(i: int) -> None:
        built.append(i)
        waiting.append(len(built) - len(conn.done))

    run(conn, nodes, schedule, built=note)
    assert conn.most == 3 and len(conn.done) == 24
    assert max(waiting) <= 3


@pytest.mark.parametrize("schedule", ["lockstep", "interleave", "dag"])
def test_requests_are_sent_in_the_order_their_inputs_are_built(schedule):
    conn, built = FakeConnection(in_flight=2, delay=0.01), []
    nodes = tree(groups=3, branches=3)
    run(conn, nodes, schedule, built=built.append)
    assert [nodes[i].id for i in built] == conn.sent


def test_lockstep_sends_each_turn_group_by_group_after_the_turn_before():
    conn = FakeConnection(in_flight=1)
    run(conn, tree(), "lockstep")
    assert conn.sent == ["g0/b0/t0", "g0/b1/t0", "g1/b0/t0", "g1/b1/t0",
                         "g0/b0/t1", "g0/b1/t1", "g1/b0/t1", "g1/b1/t1"]


def test_interleave_sends_each_turn_branch_by_branch_across_groups():
    conn = FakeConnection(in_flight=1)
    run(conn, tree(), "interleave")
    assert conn.sent[:4] == ["g0/b0/t0", "g1/b0/t0", "g0/b1/t0", "g1/b1/t0"]


def test_dag_sends_a_child_as_soon_as_its_parent_is_done_without_waiting_for_the_turn():
    # g0/b0/t0 answers at once; g1/b1/t0 takes long: the turn-1 child of g0/b0 goes first
    conn = FakeConnection(in_flight=2, delays={"g1/b1/t0": 0.3})
    run(conn, tree(), "dag")
    assert conn.sent.index("g0/b0/t1") < conn.done.index("g1/b1/t0")
    for node in tree():
        if node.turn:
            parent = f"g{node.group}/b{node.branch}/t{node.turn - 1}"
            assert conn.done.index(parent) < conn.sent.index(node.id)


@pytest.mark.parametrize("schedule", ["lockstep", "dag"])
def test_requests_outside_only_count_as_done(schedule):
    nodes = tree()
    conn = FakeConnection(in_flight=2)
    run(conn, nodes, schedule, only=[i for i, n in enumerate(nodes) if n.turn == 1])
    assert sorted(conn.sent) == sorted(n.id for n in nodes if n.turn == 1)


@pytest.mark.parametrize("schedule", ["lockstep", "dag"])
def test_the_first_failure_stops_the_run_and_propagates(schedule):
    conn = FakeConnection(in_flight=2, delay=0.01, fail="g0/b1/t0")
    with pytest.raises(RuntimeError, match="g0/b1/t0 failed"):
        run(conn, tree(groups=3), schedule)
    assert conn.now == 0  # every request in flight was cancelled and waited for
    assert not any(sent.endswith("/t1") for sent in conn.sent if sent.startswith("g0/b1"))
