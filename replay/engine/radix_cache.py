"""The prefix cache: a radix tree over whole pages, with SSM checkpoints and three tiers.

Each node is one page of token ids below its parent (so a path from the root spells a prefix, a
page at a time). A node's KV page may sit on the device, in the host pool, in storage, or in
several; a node in no tier is deleted. Invariants, which keep eviction simple:
- the device-resident nodes form a subtree from the root (the device evicts leaves first);
- `lock` counts the running requests using a node or a descendant (locks walk up to the root),
  so locked nodes never leave the device and the unlocked ones can all be evicted, LRU first.

Hybrid models: a request can only resume where its SSM state is known, so a node at a track
boundary (`end % mamba_track_interval == 0`) carries the state after its last token, and a hit
ends at the deepest matched node that has one. A checkpoint travels with its page.
"""

from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass, field

import numpy as np
import torch

from replay.engine.faults import Faults
from replay.engine.host_tier import (
    HostPool,
    backup_on_evict,
    backup_on_hit,
    backup_on_insert,
)
from replay.engine.kv_pool import KVPool
from replay.engine.model import SSMState
from replay.engine.storage_tier import FileStorage


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


def _page_key(tokens: list[int], i: int, page_size: int, namespace: str | None) -> tuple:
    """Page i's key below its parent; the first page's key carries the namespace, so requests of
    different extra keys never share a node (nor a storage file: the chain hash includes it)."""
    key = tuple(tokens[i * page_size:(i + 1) * page_size])
    return (namespace, *key) if i == 0 and namespace is not None else key


def _chain_hash(parent: str, key: tuple[int, ...]) -> str:
    return hashlib.sha256(f"{parent}:{','.join(map(str, key))}".encode()).hexdigest()[:32]


class RadixCache:
    def __init__(self, pool: KVPool, *, track_interval: int, hybrid: bool,
                 host: HostPool | None = None, storage: FileStorage | None = None,
                 write_policy: str = "write_through", faults: Faults = Faults()) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.track_interval = track_interval
        self.hybrid = hybrid
        self.host = host
        self.storage = storage
        self.write_policy = write_policy
        self.faults = faults
        self.stats = CacheStats()
        # a shared storage directory keeps what other engines wrote until a flush asks
        self.reset(clear_storage=storage is None or not storage.shared)

    def reset(self, clear_storage: bool = True) -> None:
        """Forget everything, device pool included (only valid while no request holds pages)."""
        self.root = Node(key=(), parent=None, end=0, hash="")
        self._device: set[Node] = set()
        self._on_host: set[Node] = set()
        self._clock = 0
        self.pool.allocator.reset()
        if self.host is not None:
            self.host.reset()
        if self.storage is not None and clear_storage:
            self.storage.clear()

    # -- lookup --------------------------------------------------------------------------------

    def match(self, tokens: list[int], limit: int | None = None,
              namespace: str | None = None) -> Match:
        """The longest usable cached prefix of `tokens` short of its last token (and at most
        `limit` tokens long) among pages inserted with the same `namespace` (SGLang's
        extra_key), locked."""
        p = self.page_size
        longest = len(tokens) - 1 if limit is None else min(limit, len(tokens) - 1)
        node, path = self.root, []
        for i in range(max(longest, 0) // p):
            child = node.children.get(_page_key(tokens, i, p, namespace))
            if child is None:
                break
            path.append(child)
            node = child
        path += self._found_in_storage(node, tokens, len(path), max(longest, 0) // p, namespace)
        if self.hybrid and not self.faults.takes_largest_group_hit():
            while path and not self._has_checkpoint(path[-1]):
                path.pop()
        match = Match(path, p)
        if match.last is not None:
            self.lock(match.last)
        return match

    def _found_in_storage(self, node: Node, tokens: list[int], start: int, stop: int,
                          namespace: str | None = None) -> list[Node]:
        """Pages past the tree's match that the storage tier holds under their chain hash (stored
        by this engine and forgotten, or by another engine sharing the directory): adopted into
        the tree as storage-only nodes, as SGLang's L3 prefetch does."""
        if self.storage is None:
            return []
        p, found = self.page_size, []
        for i in range(start, stop):
            key = _page_key(tokens, i, p, namespace)
            digest = _chain_hash(node.hash, key)
            if not self.storage.has(digest):
                break
            child = Node(key, node, node.end + p, digest, stored=True)
            node.children[key] = child
            found.append(child)
            node = child
        return found

    def can_fit(self, match: Match, extra_pages: int) -> bool:
        """Whether loading the match and allocating `extra_pages` more can succeed now."""
        need = match.pages_to_load + extra_pages
        return need <= self.pool.allocator.available + self.evictable_pages()

    def load(self, match: Match, hold_last_host_page: bool = False
             ) -> tuple[CachedTokens, list[SSMState] | None, PendingPage | None]:
        """Bring a match's pages to the device; the split by tier, the SSM state at its end, and
        (only with `hold_last_host_page`, the host-load-race fault) the last host page's copy,
        still in flight: the caller lands it, or not, before the forward reads it."""
        p = self.page_size
        on_device = [n for n in match.nodes if n.page is not None]
        from_host = [n for n in match.nodes if n.page is None and n.host_slot is not None]
        from_storage = [n for n in match.nodes if n.page is None and n.host_slot is None]
        cached = CachedTokens(len(on_device) * p, len(from_host) * p, len(from_storage) * p)
        self.stats.device_hits += len(on_device)
        self.stats.host_hits += len(from_host)
        self.stats.storage_hits += len(from_storage)
        pages = self.alloc(len(from_host) + len(from_storage))
        pending = None
        if from_host:
            data = torch.from_numpy(self.host.load([n.host_slot for n in from_host]))
            if hold_last_host_page:
                pending = PendingPage(pages[len(from_host) - 1], data[-1:])
                data = data[:-1]
            self.pool.write_pages(pages[:len(data)], data)
        for node, page in zip(from_storage, pages[len(from_host):]):
            stored = self.faults.storage_loaded(self.storage.load(node.hash))
            self.pool.write_pages([page], torch.from_numpy(stored)[None])
        for node, page in zip(from_host + from_storage, pages):
            node.page = page
            self._device.add(node)
        for node in match.nodes:
            if node.ssm is None:  # loaded, or revived on the device without its checkpoint
                node.ssm = self._lower_tier_checkpoint(node)
            node.hits += 1
            self._touch(node)
        self._backup([n for n in match.nodes if backup_on_hit(self.write_policy, n.hits)])
        last = match.last
        state = None
        if self.hybrid and last is not None and last.ssm is not None:
            state = [s.clone() for s in last.ssm]  # no checkpoint: largest-group-hit fault only
        return cached, state, pending

    # -- insert --------------------------------------------------------------------------------

    def insert(self, tokens: list[int], pages: list[int], n_pages: int,
               checkpoints: dict[int, list[SSMState]],
               namespace: str | None = None) -> tuple[Node, set[int]]:
        """Add the first `n_pages` full pages of a request; returns the deepest node and the
        request pages the tree took over. Where the tree already has a page on the device the
        request keeps its own copy (it may still be in flight) and frees it when it finishes."""
        p = self.page_size
        node, adopted, fresh = self.root, set(), []
        for i in range(n_pages):
            key = _page_key(tokens, i, p, namespace)
            child = node.children.get(key)
            if child is None:
                child = Node(key, node, node.end + p, _chain_hash(node.hash, key))
                node.children[key] = child
            if child.page is None:
                child.page = pages[i]
                adopted.add(pages[i])
                fresh.append(child)
                self._device.add(child)
            if child.ssm is None and child.end in checkpoints:
                child.ssm = self._checkpoint(checkpoints[child.end])
            self._touch(child)
            node = child
        if backup_on_insert(self.write_policy):
            self._backup(fresh)
        return node, adopted

    def _checkpoint(self, states: list[SSMState]) -> list[SSMState]:
        return [SSMState(conv=self.faults.checkpoint_conv(s.conv.clone()), h=s.h.clone())
                for s in states]

    # -- locks ---------------------------------------------------------------------------------

    def lock(self, node: Node | None) -> None:
        while node is not None:
            node.lock += 1
            node = node.parent

    def unlock(self, node: Node | None) -> None:
        while node is not None:
            node.lock -= 1
            node = node.parent

    # -- device pages and eviction -------------------------------------------------------------

    def evictable_pages(self) -> int:
        return sum(1 for node in self._device if node.lock == 0)

    def alloc(self, n: int) -> list[int]:
        """n free device pages, evicting unlocked least-recently-used leaves if needed."""
        short = n - self.pool.allocator.available
        if short > 0:
            self._evict_device(short)
        return self.pool.allocator.alloc(n)

    def _evict_device(self, n: int) -> None:
        leaving: set[Node] = set()

        def is_leaf(node: Node) -> bool:
            return node.lock == 0 and all(c.page is None or c in leaving
                                          for c in node.children.values())

        heap = [(node.last_used, id(node), node) for node in self._device if is_leaf(node)]
        heapq.heapify(heap)
        victims: list[Node] = []
        while len(victims) < n and heap:
            node = heapq.heappop(heap)[2]
            victims.append(node)
            leaving.add(node)
            parent = node.parent
            if parent is not self.root and parent.page is not None and is_leaf(parent):
                heapq.heappush(heap, (parent.last_used, id(parent), parent))
        if backup_on_evict(self.write_policy):
            self._backup(victims, evicting=True)
        for node in victims:
            self.pool.allocator.free([node.page])
            node.page, node.ssm = None, None
            self._device.discard(node)
            if node.host_slot is None and not node.stored and node.parent is not None:
                self._delete(node)
        self.stats.device_evictions += len(victims)

    def _delete(self, node: Node) -> None:
        """Drop a node and its subtree (none of it is on the device) from every tier."""
        for child in list(node.children.values()):
            self._delete(child)
        if node.host_slot is not None:
            self.host.free([node.host_slot])
            self._on_host.discard(node)
        if node.stored:
            self.storage.delete(node.hash)
        del node.parent.children[node.key]
        node.parent = None

    # -- host and storage tiers ----------------------------------------------------------------

    def _backup(self, nodes: list[Node], evicting: bool = False) -> None:
        """Copy device pages (and checkpoints) to host; as many as the host can take."""
        nodes = [n for n in nodes if n.host_slot is None and n.page is not None]
        if self.host is None or not nodes:
            return
        slots = self._host_alloc(len(nodes))
        nodes = nodes[:len(slots)]
        data = self.pool.read_pages([n.page for n in nodes])
        if evicting:
            data = self.faults.written_back(data)
        self.host.save(slots, data)
        for node, slot in zip(nodes, slots):
            node.host_slot = slot
            self._on_host.add(node)
            if node.ssm is not None:
                self.host.save_ssm(slot, node.ssm)
        self.stats.host_backups += len(nodes)
        if self.storage is not None and self.storage.shared:  # write through to a shared L3
            for node, slot in zip(nodes, slots):
                if not node.stored:
                    self.storage.save(node.hash, self.host.read([slot])[0], self.host.ssm(slot))
                    node.stored = True
                    self.stats.storage_writes += 1

    def _host_alloc(self, n: int) -> list[int]:
        short = n - self.host.available
        if short > 0:
            self._evict_host(short)
        return self.host.alloc(min(n, self.host.available))

    def _evict_host(self, n: int) -> None:
        """Free host slots, LRU leaves first; with storage on, their pages move there."""
        def is_leaf(node: Node) -> bool:
            return node.lock == 0 and all(c.host_slot is None for c in node.children.values())

        heap = [(node.last_used, id(node), node) for node in self._on_host if is_leaf(node)]
        heapq.heapify(heap)
        for _ in range(n):
            if not heap:
                return
            node = heapq.heappop(heap)[2]
            slot = node.host_slot
            if self.storage is not None and not node.stored:
                self.storage.save(node.hash, self.host.read([slot])[0], self.host.ssm(slot))
                node.stored = True
                self.stats.storage_writes += 1
            self.host.free([slot])
            node.host_slot = None
            self._on_host.discard(node)
            self.stats.host_evictions += 1
            parent = node.parent
            if node.page is None and not node.stored:
                self._delete(node)
            if parent is not self.root and parent.host_slot is not None and is_leaf(parent):
                heapq.heappush(heap, (parent.last_used, id(parent), parent))

    def _has_checkpoint(self, node: Node) -> bool:
        return (node.ssm is not None
                or (node.host_slot is not None and self.host.ssm(node.host_slot) is not None)
                or (node.stored and self.storage.has_ssm(node.hash)))

    def _lower_tier_arrays(self, node: Node) -> list[tuple[np.ndarray, np.ndarray]] | None:
        if node.host_slot is not None and self.host.ssm(node.host_slot) is not None:
            return self.host.ssm(node.host_slot)
        if node.stored and self.storage.has_ssm(node.hash):
            return self.storage.load_ssm(node.hash)
        return None

    def _lower_tier_checkpoint(self, node: Node) -> list[SSMState] | None:
        arrays = self._lower_tier_arrays(node)
        if arrays is None:
            return None
        device = self.pool.kv.device
        return [SSMState(conv=torch.from_numpy(np.array(c)).to(device),
                         h=torch.from_numpy(np.array(h)).to(device)) for c, h in arrays]

    def _touch(self, node: Node) -> None:
        self._clock += 1
        node.last_used = self._clock
