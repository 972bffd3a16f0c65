"""Split one golden into n deterministic shards so CI can replay it on n runners at once.

A shard keeps whole units of the conversation tree, never single requests: a later turn is only
meaningful after its parent ran on the same server, and the cache hits the replay checks come
from those earlier turns. The unit is a whole group (all branches sharing a prefix, so the
shared-prefix hits between branches stay realistic) whenever there are at least n groups, and a
whole conversation tree (a turn-0 request and every request descending from it, found through
`parent`, whatever the branch numbers say) otherwise. So no request is in two shards and every
request's ancestors are in its own shard. Units are dealt round-robin in tree order, so shard
sizes differ by at most one unit and the split depends only on the golden and n.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from replay.utils.errors import UsageError
from replay.golden.model import Golden, subset_golden

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based, like Playwright's and Jest's --shard i/n
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """'i/n' with 1 <= i <= n; anything else is a UsageError."""
    match = _SPEC.match(text)
    if match:
        index, count = int(match.group(1)), int(match.group(2))
        if count >= 1 and 1 <= index <= count:
            return ShardSpec(index, count)
    raise UsageError(f"invalid --shard {text!r}: use i/n with 1 <= i <= n, e.g. 2/4")


def shard_units(golden: Golden, count: int) -> tuple[str, list[list[int]]]:
    """The unit kind and the units (request indices, in golden order), in tree order."""
    reqs = golden.requests
    roots = [i if r.parent < 0 else -1 for i, r in enumerate(reqs)]
    for i, r in enumerate(reqs):  # topological order: a parent's root is known first
        if r.parent >= 0:
            roots[i] = roots[r.parent]
    groups = sorted({reqs[root].group for root in roots})
    if len(groups) >= count:  # a tree belongs to its root's group
        kind = "group"
        keys = [(reqs[root].group,) for root in roots]
    else:
        kind = "conversation"
        keys = [(reqs[root].group, reqs[root].branch, root) for root in roots]
    units: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(keys):
        units.setdefault(key, []).append(i)
    return kind, [units[k] for k in sorted(units)]


def shard_golden(golden: Golden, spec: str | ShardSpec) -> Golden:
    """The requests of shard i of n, parents remapped; prefixes and request ids unchanged.

    Refuses (UsageError) a split with more shards than conversations: an empty shard would pass
    while checking nothing.
    """
    shard = parse_shard(spec) if isinstance(spec, str) else spec
    kind, units = shard_units(golden, shard.count)
    if len(units) < shard.count:
        raise UsageError(f"--shard {shard}: the golden has only {len(units)} conversation(s), "
                         f"so at most {len(units)} shards")
    mine = [i for u, unit in enumerate(units) if u % shard.count == shard.index - 1 for i in unit]
    return subset_golden(golden, mine, shard={"index": shard.index, "count": shard.count,
                                              "unit": kind, "requests": len(mine),
                                              "of_requests": len(golden.requests)})
