"""The records of the prefix cache (replay/engine/radix_cache.py): a node (one page below its
parent), a match, a page still in flight from host memory, the hit counts by tier, and how a
page is keyed (its token ids, the first page's with the request's namespace) and named in
storage (a chain hash of every token from the root).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from replay.engine.kv_pool import KVPool
from replay.engine.model import SSMState


@dataclass
class CachedTokens:
    """Prompt tokens reused from the prefix cache, by the tier their pages came from."""

    device: int = 0
    host: int = 0
    storage: int = 0

    @property
    def total(self) -> int:
        return self.device + self.host + self.storage


@dataclass(eq=False)
class Node:
    key: tuple[int, ...]  # this page's token ids
    parent: Node | None
    end: int  # tokens from the root through this page
    hash: str  # chain hash of those tokens: the storage key
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)
    page: int | None = None  # device page
    ssm: list[SSMState] | None = None  # device checkpoint: state after `end` tokens
    host_slot: int | None = None
    stored: bool = False
    lock: int = 0
    hits: int = 0
    last_used: int = 0


@dataclass
class Match:
    """A locked cached prefix, before its pages were brought to the device."""

    nodes: list[Node]
    page_size: int

    @property
    def length(self) -> int:
        return len(self.nodes) * self.page_size

    @property
    def last(self) -> Node | None:
        return self.nodes[-1] if self.nodes else None

    @property
    def pages_to_load(self) -> int:
        return sum(node.page is None for node in self.nodes)


@dataclass
class CacheStats:
    device_hits: int = 0  # pages, over all matches
    host_hits: int = 0
    storage_hits: int = 0
    device_evictions: int = 0
    host_backups: int = 0
    host_evictions: int = 0
    storage_writes: int = 0


@dataclass(frozen=True)
class PendingPage:
    """A host-to-device page copy still in flight: `data` lands in device `page` on `land`."""

    page: int
    data: torch.Tensor  # [1, layers, 2, page_size, heads, dim]

    def land(self, pool: KVPool) -> None:
        pool.write_pages([self.page], self.data)


def page_key(tokens: list[int], i: int, page_size: int, namespace: str | None) -> tuple:
    """Page i's key below its parent; the first page's key carries the namespace, so requests of
    different extra keys never share a node (nor a storage file: the chain hash includes it)."""
    key = tuple(tokens[i * page_size:(i + 1) * page_size])
    return (namespace, *key) if i == 0 and namespace is not None else key


def chain_hash(parent: str, key: tuple[int, ...]) -> str:
    return hashlib.sha256(f"{parent}:{','.join(map(str, key))}".encode()).hexdigest()[:32]
