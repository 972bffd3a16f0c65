"""HiCache's three direct-IO copy ops as ATen slice-copies, for a CPU.

Ported from sgl-kernel's CUDA definitions (`csrc/kvcacheio/transfer.cu`: `transfer_page_direct`,
`transfer_kv_direct`, `transfer_kv_page_first_direct_impl<IsLf2Pf>`), which are themselves
device-agnostic: they walk the index tensors on the host and issue `Tensor.copy_` on slices (newer
transfer.cu adds a `cudaMemcpyBatchAsync` fast path on CUDA and keeps this per-page form as its
`fallback_to_page_copy`; the copies are the same). In
SGLang 0.5.23 the ops are bound only on CUDA/HIP (from sgl-kernel) and XPU (sgl-kernel-xpu), so a
CPU host pool that uses `--hicache-io-backend direct` has no name to call. Same signatures, same
checks, same order of copies; only torch.

Layouts (SGLang's `MHATokenToKVPoolHost`): device K/V are one tensor per layer, indexed by token
(`[tokens, heads, dim]`); a `layer_first` host buffer is the same per layer; a
`page_first_direct` host buffer is `[pages, layers, page_size, heads, dim]` (K and V separately).
"""

from __future__ import annotations

import torch


def transfer_page_direct(src: torch.Tensor, dst: torch.Tensor, src_index: int, dst_index: int,
                         count: int) -> None:
    """Copy rows [src_index, src_index + count) of `src` to the same number of rows of `dst`."""
    dst.narrow(0, dst_index, count).copy_(src.narrow(0, src_index, count), non_blocking=True)


def _check(src_indices: torch.Tensor, dst_indices: torch.Tensor, page_size: int) -> None:
    if src_indices.numel() != dst_indices.numel():
        raise ValueError("Source and destination indices must have the same length")
    if page_size <= 0:
        raise ValueError("Page size must be positive")
    if src_indices.numel() % page_size != 0:
        raise ValueError("Source indices size must be divisible by page size")


def transfer_kv_direct(src_layers: list[torch.Tensor], dst_layers: list[torch.Tensor],
                       src_indices: torch.Tensor, dst_indices: torch.Tensor,
                       page_size: int) -> None:
    """Token-indexed copy, layer by layer: each run of indices contiguous on both sides is one
    slice copy (as the CUDA op merges them)."""
    if len(src_layers) != len(dst_layers):
        raise ValueError("Source and destination layers must have the same number of layers")
    _check(src_indices, dst_indices, page_size)
    src = src_indices.cpu().tolist()
    dst = dst_indices.cpu().tolist()
    start = 0
    for i in range(len(src)):
        if i < len(src) - 1 and src[i + 1] - src[i] == 1 and dst[i + 1] - dst[i] == 1:
            continue
        end = i + 1
        for src_layer, dst_layer in zip(src_layers, dst_layers):
            transfer_page_direct(src_layer, dst_layer, src[start], dst[start], end - start)
        start = end


def transfer_kv_per_layer_direct_pf_lf(src_ptrs: list[torch.Tensor], dst_ptrs: list[torch.Tensor],
                                       src_indices: torch.Tensor, dst_indices: torch.Tensor,
                                       layer_id: int, page_size: int) -> None:
    """Host `page_first_direct` -> device layer `layer_id` (load back, one layer at a time).
    `src_ptrs` is [host K] (MLA) or [host K, host V]; `dst_ptrs` the device layers to fill
    (K layers then V layers)."""
    _check(src_indices, dst_indices, page_size)
    is_mla = len(src_ptrs) == 1
    num_layers = len(dst_ptrs) if is_mla else len(dst_ptrs) // 2
    src = src_indices.cpu().tolist()
    dst = dst_indices.cpu().tolist()
    for i in range(len(src) // page_size):
        page = src[i * page_size] // page_size
        token = dst[i * page_size]
        for j in range(num_layers):
            transfer_page_direct(src_ptrs[0].select(0, page).select(0, layer_id + j), dst_ptrs[j],
                                 0, token, page_size)
            if not is_mla:
                transfer_page_direct(src_ptrs[1].select(0, page).select(0, layer_id + j),
                                     dst_ptrs[j + num_layers], 0, token, page_size)


def transfer_kv_all_layer_direct_lf_pf(src_ptrs: list[torch.Tensor], dst_ptrs: list[torch.Tensor],
                                       src_indices: torch.Tensor, dst_indices: torch.Tensor,
                                       page_size: int) -> None:
    """Device layers -> host `page_first_direct` (write-through / backup, all layers).
    `src_ptrs` are the device K layers then V layers (MLA: one buffer per layer); `dst_ptrs` is
    [host K] (MLA) or [host K, host V]."""
    _check(src_indices, dst_indices, page_size)
    is_mla = len(dst_ptrs) == 1
    num_layers = len(src_ptrs) if is_mla else len(src_ptrs) // 2
    src = src_indices.cpu().tolist()
    dst = dst_indices.cpu().tolist()
    for i in range(len(src) // page_size):
        token = src[i * page_size]
        page = dst[i * page_size] // page_size
        for j in range(num_layers):
            transfer_page_direct(src_ptrs[j], dst_ptrs[0].select(0, page).select(0, j),
                                 token, 0, page_size)
            if not is_mla:
                transfer_page_direct(src_ptrs[j + num_layers],
                                     dst_ptrs[1].select(0, page).select(0, j), token, 0, page_size)


OPS = {
    "transfer_kv_direct": transfer_kv_direct,
    "transfer_kv_per_layer_direct_pf_lf": transfer_kv_per_layer_direct_pf_lf,
    "transfer_kv_all_layer_direct_lf_pf": transfer_kv_all_layer_direct_lf_pf,
}
