"""The CPU patches (replay/sglang_cpu/patches.py) against SGLang 0.5.23's own modules. Needs sglang
importable (scripts/install_sglang.sh; scripts/test.sh runs the suite on that venv's Python)."""

from __future__ import annotations

import pytest
import torch

common = pytest.importorskip("sglang.srt.mem_cache.pool_host.common",
                             reason="sglang 0.5.23 is not installed (scripts/install_sglang.sh)")

from replay.sglang_cpu import patches  # noqa: E402


def test_the_cpu_host_buffer_is_the_pools_own_memory_with_nothing_registered():
    buf = patches.alloc_cpu_host_buffer((2, 4, 8), torch.bfloat16, "cpu", True,
                                        common.HostTensorAllocator())
    assert (buf.shape, buf.dtype, buf.device.type) == ((2, 4, 8), torch.bfloat16, "cpu")
    assert getattr(buf, common._CUDA_HOST_REGISTERED_RANGES_ATTR) == []


def test_the_host_allocation_patch_adds_a_cpu_entry_and_logs_it_once(monkeypatch, capsys):
    # undone after the test: the key is removed again
    monkeypatch.setitem(common.ALLOC_MEMORY_FUNCS, "cpu", common.alloc_with_host_register)
    patches.patch_host_allocation()
    patches.patch_host_allocation()
    assert common.ALLOC_MEMORY_FUNCS["cpu"] is patches.alloc_cpu_host_buffer
    assert capsys.readouterr().err.count(patches.LOG_PREFIX) == 1


def test_unpatched_sglang_sends_the_cpu_to_cuda_host_register():
    """The gap itself: without the patch a CPU host pool is allocated by the CUDA path."""
    assert "cpu" not in common.ALLOC_MEMORY_FUNCS
    assert common.ALLOC_MEMORY_FUNCS.default_factory() is common.alloc_with_host_register


def test_the_patches_refuse_a_server_that_is_not_on_the_cpu(monkeypatch):
    import sglang.srt.utils as utils

    monkeypatch.setattr(utils, "is_cpu", lambda: False)
    with pytest.raises(RuntimeError, match="CPU server only"):
        patches.apply()


def test_unpatched_host_pools_are_built_pinned_which_a_cpu_cannot_allocate():
    """The gap itself: the L3 staging page of an unpatched pool asks torch for pinned memory."""
    import inspect

    from sglang.srt.mem_cache.pool_host import mha

    assert inspect.signature(mha.MHATokenToKVPoolHost.__init__).parameters["pin_memory"].default
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="pin_memory"):
            torch.zeros(4, pin_memory=True)


def test_the_unpinned_patch_builds_every_host_pool_with_pin_memory_off(monkeypatch, capsys):
    base = pytest.importorskip("sglang.srt.mem_cache.pool_host.base")
    mamba = pytest.importorskip("sglang.srt.mem_cache.pool_host.mamba")
    for cls in (base.HostKVCache, mamba.MambaPoolHost):
        monkeypatch.setattr(cls, "__init__", cls.__dict__["__init__"])  # restored afterwards
    seen = []

    def init(self, *args, **kwargs):
        seen.append(kwargs["pin_memory"])

    monkeypatch.setattr(base.HostKVCache, "__init__", init)
    patches.patch_unpinned_host_pools()
    patches.patch_unpinned_host_pools()
    base.HostKVCache.__init__(object(), pin_memory=True)
    assert seen == [False]
    assert capsys.readouterr().err.count(patches.LOG_PREFIX) == 2  # once per pool class
