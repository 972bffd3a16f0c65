"""The paged device KV pool and its page allocator.

One tensor `[attn_layers, 2 (K/V), pages, page_size, kv_heads, head_dim]` on the model's device.
A request's page table maps its positions to pages; the radix cache shares whole pages between
requests. Capacity is fixed (`max_total_tokens`), which is what forces evictions to host.
"""

from __future__ import annotations

from collections import deque

import torch


class OutOfPages(RuntimeError):
    pass


class PageAllocator:
    """Free-list over a fixed number of pages; first freed, first reused."""

    def __init__(self, num_pages: int) -> None:
        self.num_pages = num_pages
        self._free: deque[int] = deque(range(num_pages))

    @property
    def available(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfPages(f"need {n} pages, {len(self._free)} free")
        return [self._free.popleft() for _ in range(n)]

    def free(self, pages: list[int]) -> None:
        self._free.extend(pages)

    def reset(self) -> None:
        self._free = deque(range(self.num_pages))


class KVPool:
    def __init__(self, num_pages: int, page_size: int, layers: int, kv_heads: int, head_dim: int,
                 device: str | torch.device, dtype: torch.dtype = torch.float32) -> None:
        self.page_size = page_size
        self.layers = layers
        self.kv = torch.zeros(layers, 2, num_pages, page_size, kv_heads, head_dim,
                              dtype=dtype, device=device)
        self.allocator = PageAllocator(num_pages)

    @property
    def page_shape(self) -> tuple[int, ...]:
        """One page over all layers: [layers, 2, page_size, kv_heads, head_dim]."""
        layers, two, _, *rest = self.kv.shape
        return (layers, two, *rest)

    def gather(self, pages: list[int], length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """K and V of positions [0, length) per layer, each [length, kv_heads, head_dim]."""
        n = -(-length // self.page_size)
        index = torch.tensor(pages[:n], dtype=torch.long, device=self.kv.device)
        flat = self.kv[:, :, index].flatten(2, 3)[:, :, :length]
        return [(flat[layer, 0], flat[layer, 1]) for layer in range(self.layers)]

    def write(self, pages: list[int], start: int,
              new_kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Store K and V of positions [start, start + T) (per layer [T, kv_heads, head_dim])."""
        if not new_kv:
            return
        t = new_kv[0][0].shape[0]
        positions = torch.arange(start, start + t, device=self.kv.device)
        table = torch.tensor(pages, dtype=torch.long, device=self.kv.device)
        page_ids, offsets = table[positions // self.page_size], positions % self.page_size
        stacked = torch.stack([torch.stack(kv) for kv in new_kv])  # [layers, 2, T, heads, dim]
        if stacked.dtype != self.kv.dtype:
            raise TypeError(f"model KV is {stacked.dtype}, pool is {self.kv.dtype}")
        self.kv[:, :, page_ids, offsets] = stacked

    def read_pages(self, pages: list[int]) -> torch.Tensor:
        """Whole pages as [n, layers, 2, page_size, kv_heads, head_dim] (a copy)."""
        index = torch.tensor(pages, dtype=torch.long, device=self.kv.device)
        return self.kv[:, :, index].permute(2, 0, 1, 3, 4, 5).contiguous()

    def write_pages(self, pages: list[int], data: torch.Tensor) -> None:
        """Inverse of read_pages."""
        index = torch.tensor(pages, dtype=torch.long, device=self.kv.device)
        self.kv[:, :, index] = data.to(self.kv.device).permute(1, 2, 0, 3, 4, 5)
