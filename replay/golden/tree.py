"""The conversation tree: one node type for every stage, and the one rule for a node's input.

Scenario plans, the runner's schedule, recorded goldens, shards and reports all speak of the
same nodes (`g{group}/b{branch}/t{turn}`), stored in topological order (a parent always comes
before its children, `parent` is an index into the same list, -1 for turn 0). A node's input is
never stored: a turn-0 node's input is its group's shared prefix followed by its new tokens; a
later turn's input is its parent's input, the parent's output, then its own new tokens
(`input_ids`). Record and replay both use this function, so the rule exists once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

_ID = re.compile(r"^g(\d+)/b(\d+)/t(\d+)$")
Node = TypeVar("Node", bound="TreeNode")


@dataclass
class TreeNode:
    """One request of a conversation tree (without any answer)."""

    id: str  # "g{group}/b{branch}/t{turn}"
    group: int
    branch: int
    turn: int
    parent: int  # index of the parent node in the same list, -1 for turn 0
    new_tokens: np.ndarray  # int32: appended after the prefix (turn 0) or parent's input+output
    max_new_tokens: int


def request_id(group: int, branch: int, turn: int) -> str:
    return f"g{group}/b{branch}/t{turn}"


def parse_request_id(text: str) -> tuple[int, int, int] | None:
    """(group, branch, turn) of an id written by `request_id`, None for anything else."""
    m = _ID.match(text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def input_ids(nodes: Sequence[TreeNode], prefixes: Sequence[np.ndarray],
              output_of: Callable[[int], np.ndarray], i: int) -> np.ndarray:
    """The exact input tokens of node i: prefix, then along the chain of ancestors each one's new
    tokens and output, then node i's own new tokens. `output_of(j)` is node j's output ids (the
    recorded ones at replay, the live ones while recording)."""
    chain = [(i, nodes[i])]  # each node read once (a stored golden reads it from disk)
    while chain[-1][1].parent >= 0:
        parent = chain[-1][1].parent
        chain.append((parent, nodes[parent]))
    chain.reverse()
    parts: list[np.ndarray] = [np.asarray(prefixes[chain[0][1].group])]
    for j, node in chain[:-1]:
        parts.append(node.new_tokens)
        parts.append(output_of(j))
    parts.append(chain[-1][1].new_tokens)
    return np.concatenate(parts).astype(np.int32)


@dataclass(frozen=True)
class TreeColumns:
    """Every node's tree fields, one int64 array each (40 bytes a node): what a pass over the
    whole tree reads (its shape, its input lengths, who is whose parent), so that such a pass
    over a stored golden reads no node's tokens (`StoredRequests.columns` has them from the
    golden's table)."""

    group: np.ndarray
    branch: np.ndarray
    turn: np.ndarray
    parent: np.ndarray
    new_lengths: np.ndarray  # len(node.new_tokens)

    @classmethod
    def of(cls, nodes: Sequence[TreeNode]) -> "TreeColumns":
        cols = np.empty((5, len(nodes)), dtype=np.int64)
        for k, node in enumerate(nodes):
            cols[:, k] = node.group, node.branch, node.turn, node.parent, len(node.new_tokens)
        return cls(*cols)

    def __len__(self) -> int:
        return len(self.parent)


def input_lengths(columns: TreeColumns, prefixes: Sequence[np.ndarray],
                  output_lengths: np.ndarray) -> np.ndarray:
    """The length of every node's input (`input_ids`' rule, counted instead of built), in one
    pass over the tree (topological: a parent's length is known first)."""
    lengths = np.zeros(len(columns), dtype=np.int64)
    outputs = output_lengths.tolist()
    for i, (group, parent, new) in enumerate(zip(columns.group.tolist(), columns.parent.tolist(),
                                                 columns.new_lengths.tolist())):
        before = lengths[parent] + outputs[parent] if parent >= 0 else len(prefixes[group])
        lengths[i] = before + new
    return lengths


def prompt_logprob_start(nodes: Sequence[TreeNode], prefixes: Sequence[np.ndarray],
                         input_len_of: Callable[[int], int], i: int) -> int:
    """Where node i's prompt logprobs start (`logprob_start_len`): at its parent's input's end,
    so the parent's output and node i's new tokens are scored while the parent's prompt can
    still come from the cache; for turn 0 at its group's prefix end. Never past the last prompt
    token. A cache only ever holds a prefix of the parent's input plus output (the output's last
    token never had its KV computed), so a start at the parent's output end would leave nothing
    cached to be wrongly reused: this start puts cached positions under the asked span."""
    node = nodes[i]
    start = input_len_of(node.parent) if node.parent >= 0 else len(prefixes[node.group])
    return max(0, min(start, input_len_of(i) - 1))


def cache_key(node: TreeNode, salted_groups: int) -> str | None:
    """The cache key (SGLang's `extra_key`) a node of one of the first `salted_groups` groups
    sends: its own id, so that no other request may share any of its cache; None otherwise."""
    return f"salt-{node.id}" if node.group < salted_groups else None


def with_ancestors(nodes: Sequence[TreeNode], keep: Iterable[int]) -> list[int]:
    """The indices in `keep` and all their ancestors, sorted (so still topological)."""
    return closed_under_parents(lambda i: nodes[i].parent, keep)


def closed_under_parents(parent_of: Callable[[int], int], keep: Iterable[int]) -> list[int]:
    """`with_ancestors` given only each index's parent (`parent_of(i)`, -1 for a root)."""
    closed: set[int] = set()
    for i in keep:
        while i >= 0 and i not in closed:
            closed.add(i)
            i = parent_of(i)
    return sorted(closed)


def subset(nodes: Sequence[Node], keep: Iterable[int]) -> list[Node]:
    """The nodes at `keep` plus their ancestors (a turn's input needs its parent's output), in
    their original order, with `parent` remapped into the new list. Ids are unchanged, so a
    subset's reports name the same requests as the whole tree's."""
    kept = with_ancestors(nodes, keep)
    new_index = {old: new for new, old in enumerate(kept)}
    return [replace(nodes[old], parent=new_index[nodes[old].parent] if nodes[old].parent >= 0
                    else -1) for old in kept]
