"""The three direct-IO copy ops (replay/sglang_cpu/direct_io.py) against a straightforward
reference: one token row at a time, by its index, in the layouts SGLang's MHA host pool uses
(device: one [tokens, heads, dim] tensor per layer; host page_first_direct:
[pages, layers, page_size, heads, dim])."""

from __future__ import annotations

import pytest
import torch

from replay.sglang_cpu.direct_io import (
    transfer_kv_all_layer_direct_lf_pf,
    transfer_kv_direct,
    transfer_kv_per_layer_direct_pf_lf,
)

PAGE, LAYERS, HEADS, DIM = 4, 3, 2, 8
DEVICE_PAGES, HOST_PAGES = 6, 5


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def device_layers(seed: int) -> list[torch.Tensor]:
    return [torch.randn(DEVICE_PAGES * PAGE, HEADS, DIM, generator=gen(seed + i))
            for i in range(LAYERS)]


def host_buffer(seed: int) -> torch.Tensor:
    return torch.randn(HOST_PAGES, LAYERS, PAGE, HEADS, DIM, generator=gen(seed))


def page_indices(pages: list[int]) -> torch.Tensor:
    """Token indices of whole pages, as SGLang's paged allocator hands them out."""
    return torch.tensor([p * PAGE + o for p in pages for o in range(PAGE)], dtype=torch.int64)


def test_transfer_kv_direct_copies_every_indexed_row_of_every_layer():
    src, dst = device_layers(0), device_layers(10)
    expected = [d.clone() for d in dst]
    src_idx = torch.tensor([0, 1, 2, 3, 9, 10, 11, 12, 20, 21, 5, 6], dtype=torch.int64)
    dst_idx = torch.tensor([4, 5, 6, 7, 0, 1, 2, 3, 16, 17, 22, 23], dtype=torch.int64)
    for s_layer, e_layer in zip(src, expected):
        for s, d in zip(src_idx.tolist(), dst_idx.tolist()):
            e_layer[d] = s_layer[s]
    transfer_kv_direct(src, dst, src_idx, dst_idx, page_size=PAGE)
    for d, e in zip(dst, expected):
        assert torch.equal(d, e)


def test_transfer_kv_direct_leaves_unindexed_rows_alone():
    src, dst = device_layers(0), device_layers(10)
    before = [d.clone() for d in dst]
    transfer_kv_direct(src, dst, page_indices([1]), page_indices([3]), page_size=PAGE)
    untouched = [i for i in range(DEVICE_PAGES * PAGE) if i // PAGE != 3]
    for d, b in zip(dst, before):
        assert torch.equal(d[untouched], b[untouched])


def test_per_layer_pf_lf_loads_one_layer_of_host_pages_into_device_rows():
    host_k, host_v = host_buffer(1), host_buffer(2)
    dev_k, dev_v = device_layers(3)[0], device_layers(4)[0]
    exp_k, exp_v = dev_k.clone(), dev_v.clone()
    layer = 2
    src_idx, dst_idx = page_indices([4, 0, 2]), page_indices([1, 5, 3])
    for s, d in zip(src_idx.tolist(), dst_idx.tolist()):
        exp_k[d] = host_k[s // PAGE, layer, s % PAGE]
        exp_v[d] = host_v[s // PAGE, layer, s % PAGE]
    transfer_kv_per_layer_direct_pf_lf([host_k, host_v], [dev_k, dev_v], src_idx, dst_idx,
                                       layer_id=layer, page_size=PAGE)
    assert torch.equal(dev_k, exp_k) and torch.equal(dev_v, exp_v)


def test_all_layer_lf_pf_backs_up_every_layer_into_host_pages():
    dev_k, dev_v = device_layers(5), device_layers(6)
    host_k, host_v = host_buffer(7), host_buffer(8)
    exp_k, exp_v = host_k.clone(), host_v.clone()
    src_idx, dst_idx = page_indices([2, 5]), page_indices([3, 0])
    for layer in range(LAYERS):
        for s, d in zip(src_idx.tolist(), dst_idx.tolist()):
            exp_k[d // PAGE, layer, d % PAGE] = dev_k[layer][s]
            exp_v[d // PAGE, layer, d % PAGE] = dev_v[layer][s]
    transfer_kv_all_layer_direct_lf_pf([*dev_k, *dev_v], [host_k, host_v], src_idx, dst_idx,
                                       page_size=PAGE)
    assert torch.equal(host_k, exp_k) and torch.equal(host_v, exp_v)


def test_backup_then_load_back_is_the_identity_in_bf16():
    dev_k = [t.to(torch.bfloat16) for t in device_layers(9)]
    dev_v = [t.to(torch.bfloat16) for t in device_layers(19)]
    host_k = torch.zeros(HOST_PAGES, LAYERS, PAGE, HEADS, DIM, dtype=torch.bfloat16)
    host_v = torch.zeros_like(host_k)
    rows, host = page_indices([1, 4]), page_indices([2, 0])
    transfer_kv_all_layer_direct_lf_pf([*dev_k, *dev_v], [host_k, host_v], rows, host,
                                       page_size=PAGE)
    back_k = [torch.zeros_like(t) for t in dev_k]
    back_v = [torch.zeros_like(t) for t in dev_v]
    for layer in range(LAYERS):
        transfer_kv_per_layer_direct_pf_lf([host_k, host_v], [back_k[layer], back_v[layer]],
                                           host, rows, layer_id=layer, page_size=PAGE)
    for a, b in zip([*dev_k, *dev_v], [*back_k, *back_v]):
        assert torch.equal(a[rows].view(torch.int16), b[rows].view(torch.int16))


def test_the_mla_form_moves_one_buffer_per_layer():
    dev = device_layers(11)
    host = host_buffer(12)
    exp = host.clone()
    src_idx, dst_idx = page_indices([0]), page_indices([4])
    for layer in range(LAYERS):
        for s, d in zip(src_idx.tolist(), dst_idx.tolist()):
            exp[d // PAGE, layer, d % PAGE] = dev[layer][s]
    transfer_kv_all_layer_direct_lf_pf(dev, [host], src_idx, dst_idx, page_size=PAGE)
    assert torch.equal(host, exp)


@pytest.mark.parametrize("src_n, dst_n, page, message", [
    (8, 4, PAGE, "same length"),
    (6, 6, PAGE, "divisible by page size"),
    (8, 8, 0, "positive"),
])
def test_bad_indices_are_refused_as_the_cuda_op_refuses_them(src_n, dst_n, page, message):
    src, dst = device_layers(0), device_layers(1)
    with pytest.raises(ValueError, match=message):
        transfer_kv_direct(src, dst, torch.arange(src_n), torch.arange(dst_n), page_size=page)


def test_transfer_kv_direct_refuses_unequal_layer_counts():
    with pytest.raises(ValueError, match="number of layers"):
        transfer_kv_direct(device_layers(0), device_layers(1)[:2], page_indices([0]),
                           page_indices([1]), page_size=PAGE)
