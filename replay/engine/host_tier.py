"""The host tier: a pool of KV pages (and SSM checkpoints) in host memory, plus write policies.

Two buffer layouts, as in SGLang's HostKVCache, with their own copy code:
- `layer_first`: `[layers, 2, slots, page, heads, dim]`; a page's layers are far apart, so a
  backup or load copies layer by layer;
- `page_first` (and `page_first_direct`): `[slots, layers, 2, page, heads, dim]`; a page is one
  contiguous block, copied in one piece.
A round trip through either must return the device bytes exactly. SSM checkpoints live beside
the pages, keyed by slot, as float32 numpy arrays.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from replay.engine.faults import Faults

# Hits a node needs before write_through_selective backs it up (SGLang's threshold is also 2).
SELECTIVE_HITS = 2


def backup_on_insert(policy: str) -> bool:
    """write_through copies every new page to host as soon as the radix tree takes it."""
    return policy == "write_through"


def backup_on_hit(policy: str, hits: int) -> bool:
    """write_through_selective copies a page once a second request has reused it."""
    return policy == "write_through_selective" and hits >= SELECTIVE_HITS


def backup_on_evict(policy: str) -> bool:
    """write_back copies a page only when the device evicts it (if host has no copy yet)."""
    return policy == "write_back"


SSMArrays = list[tuple[np.ndarray, np.ndarray]]  # per SSM layer: (conv, h)


class HostPool:
    """Slot allocator and SSM store shared by both layouts; subclasses arrange the KV bytes."""

    def __init__(self, capacity: int, page_shape: tuple[int, ...], faults: Faults) -> None:
        self.capacity = capacity
        self.page_shape = page_shape  # [layers, 2, page, heads, dim]
        self.faults = faults
        self._free: deque[int] = deque(range(capacity))
        self._ssm: dict[int, SSMArrays] = {}

    @property
    def available(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        assert n <= len(self._free), "host pool overcommitted"
        return [self._free.popleft() for _ in range(n)]

    def free(self, slots: list[int]) -> None:
        for slot in slots:
            self._ssm.pop(slot, None)
        self._free.extend(slots)

    def reset(self) -> None:
        self._free = deque(range(self.capacity))
        self._ssm.clear()

    def save_ssm(self, slot: int, states: list) -> None:
        self._ssm[slot] = [(self.faults.ssm_to_host(s.conv.cpu().numpy().copy()),
                            self.faults.ssm_to_host(s.h.cpu().numpy().copy())) for s in states]

    def ssm(self, slot: int) -> SSMArrays | None:
        return self._ssm.get(slot)

    def save(self, slots: list[int], pages: torch.Tensor) -> None:
        """Store device pages [n, layers, 2, page, heads, dim] into the given slots."""
        raise NotImplementedError

    def read(self, slots: list[int]) -> np.ndarray:
        """The bytes in the given slots as [n, layers, 2, page, heads, dim]."""
        raise NotImplementedError

    def load(self, slots: list[int]) -> np.ndarray:
        """Pages on their way back to the device (the path the load faults break)."""
        return self.read([self.faults.host_slot_to_load(s, self.capacity) for s in slots])


class LayerFirstHostPool(HostPool):

    def __init__(self, capacity: int, page_shape: tuple[int, ...], faults: Faults) -> None:
        super().__init__(capacity, page_shape, faults)
        layers, two, *rest = page_shape
        self.buffer = np.zeros((layers, two, capacity, *rest), dtype=np.float32)

    def save(self, slots: list[int], pages: torch.Tensor) -> None:
        data = pages.cpu().numpy()
        for layer in range(self.buffer.shape[0]):
            self.buffer[layer][:, slots] = data[:, layer].swapaxes(0, 1)

    def read(self, slots: list[int]) -> np.ndarray:
        out = np.empty((len(slots), *self.page_shape), dtype=np.float32)
        for layer in range(self.buffer.shape[0]):
            out[:, layer] = self.buffer[layer][:, slots].swapaxes(0, 1)
        return out


class PageFirstHostPool(HostPool):

    def __init__(self, capacity: int, page_shape: tuple[int, ...], faults: Faults) -> None:
        super().__init__(capacity, page_shape, faults)
        self.buffer = np.zeros((capacity, *page_shape), dtype=np.float32)

    def save(self, slots: list[int], pages: torch.Tensor) -> None:
        self.buffer[slots] = pages.cpu().numpy()

    def read(self, slots: list[int]) -> np.ndarray:
        return self.buffer[slots]

    def load(self, slots: list[int]) -> np.ndarray:
        return self.faults.page_first_loaded(super().load(slots))


def make_host_pool(layout: str, capacity: int, page_shape: tuple[int, ...],
                   faults: Faults) -> HostPool:
    if layout == "layer_first":
        return LayerFirstHostPool(capacity, page_shape, faults)
    return PageFirstHostPool(capacity, page_shape, faults)  # page_first, page_first_direct
