"""The CPU gaps of SGLang 0.5.23's HiCache, closed; loaded only into a CPU test server.

With `--device cpu` SGLang 0.5.23 runs its Scheduler, ModelRunner, radix cache, HiCache
controller and host pools unmodified, except for three gaps that make a HiCache server fail on a
machine without CUDA:

1. Host-pool allocation: `pool_host/common.py` `ALLOC_MEMORY_FUNCS` has entries for npu, musa and
   xpu and defaults every other device, the CPU included, to `alloc_with_host_register`, which
   calls `cudaHostRegister` ("Found no NVIDIA driver"). On a CPU the host pool is plain memory
   and its "device" is the same memory, so the patch adds a `cpu` entry that allocates with the
   pool's own allocator and registers nothing.
2. Direct-IO copy ops: `transfer_kv_direct`, `transfer_kv_per_layer_direct_pf_lf` and
   `transfer_kv_all_layer_direct_lf_pf` are imported into the host-pool modules only on
   CUDA/HIP (from sgl-kernel) and XPU, so on a CPU the names are undefined where
   `--hicache-io-backend direct` calls them. The patch binds direct_io.py's ATen ports there.
3. Pinned staging pages for L3: the host pools are built with `pin_memory=True` (their default;
   no builder passes it), which on a CPU only reaches `get_dummy_flat_data_page`, the page an L3
   read lands in before it is copied into the host pool (`torch.zeros(..., pin_memory=True)`:
   "pin_memory=True requires a CUDA or other accelerator backend"), so every storage prefetch
   fails and nothing is ever served from L3. Nothing can be pinned on a CPU, so the patch builds
   the host pools (`HostKVCache` and `MambaPoolHost`, which sets its own) with
   `pin_memory=False`; elsewhere the flag only matters on CUDA/HIP (registration, pointer
   tables, destroy), and the allocation is patch 1's.

A hybrid's own gaps (not HiCache's) are closed by hybrid.py. Every patch prints one line to the
server's log (`[golden-replay sglang_cpu] patch: ...`).
`apply()` is idempotent and refuses to run anywhere but a CPU server.
"""

from __future__ import annotations

import sys

import torch

from replay.sglang_cpu.direct_io import OPS

LOG_PREFIX = "[golden-replay sglang_cpu] patch:"
# The host-pool modules whose transfer methods call the direct-IO ops by module-level name: the
# MHA pools (Llama) and the Mamba state pool (Qwen3-Next), plus the legacy re-export module.
OP_MODULES = (
    "sglang.srt.mem_cache.pool_host.mha",
    "sglang.srt.mem_cache.pool_host.mamba",
    "sglang.srt.mem_cache.memory_pool_host",
)


def log(message: str) -> None:
    print(f"{LOG_PREFIX} {message}", file=sys.stderr, flush=True)


def alloc_cpu_host_buffer(dims: tuple, dtype: torch.dtype, device: str, pin_memory: bool,
                          allocator, registration_granularity_bytes: int | None = None
                          ) -> torch.Tensor:
    """`alloc_with_host_register` without the registration: the pool's allocator, unpinned."""
    from sglang.srt.mem_cache.pool_host.common import _CUDA_HOST_REGISTERED_RANGES_ATTR

    buffer = allocator.allocate(dims, dtype=dtype, device=device)
    setattr(buffer, _CUDA_HOST_REGISTERED_RANGES_ATTR, [])  # destroy() must unregister nothing
    return buffer


def patch_host_allocation() -> None:
    from sglang.srt.mem_cache.pool_host import common

    if common.ALLOC_MEMORY_FUNCS.get("cpu") is alloc_cpu_host_buffer:
        return
    common.ALLOC_MEMORY_FUNCS["cpu"] = alloc_cpu_host_buffer
    log("pool_host.common.ALLOC_MEMORY_FUNCS['cpu'] = alloc_cpu_host_buffer "
        "(host pool allocated without cudaHostRegister)")


def patch_direct_io_ops() -> None:
    import importlib

    for name in OP_MODULES:
        module = importlib.import_module(name)
        for op_name, op in OPS.items():
            current = getattr(module, op_name, None)
            if current is op:
                continue
            if current is not None:
                raise RuntimeError(f"{name}.{op_name} is already bound ({current!r}): "
                                   "this SGLang build has the op, the patch is not needed")
            setattr(module, op_name, op)
            log(f"{name}.{op_name} = replay.sglang_cpu.direct_io.{op_name} (ATen slice-copies)")


UNPINNED_POOLS = (
    ("sglang.srt.mem_cache.pool_host.base", "HostKVCache"),
    ("sglang.srt.mem_cache.pool_host.mamba", "MambaPoolHost"),
)


def unpinned(init):
    """`init` with `pin_memory=False` whatever the caller passed (keyword-only in both pools)."""
    def __init__(self, *args, **kwargs):
        kwargs["pin_memory"] = False
        init(self, *args, **kwargs)
    __init__.golden_unpinned = True
    __init__.__wrapped__ = init
    return __init__


def patch_unpinned_host_pools() -> None:
    import importlib

    for module_name, class_name in UNPINNED_POOLS:
        cls = getattr(importlib.import_module(module_name), class_name)
        if getattr(cls.__dict__["__init__"], "golden_unpinned", False):
            continue
        cls.__init__ = unpinned(cls.__dict__["__init__"])
        log(f"{module_name}.{class_name}.__init__ with pin_memory=False "
            "(L3 staging pages allocated unpinned)")


def apply() -> None:
    """Close the three gaps in this process (the scheduler's: the host pools live there)."""
    from sglang.srt.utils import is_cpu

    if not is_cpu():
        raise RuntimeError("replay.sglang_cpu patches are for a CPU server only "
                           "(SGLANG_USE_CPU_ENGINE=1, --device cpu)")
    patch_host_allocation()
    patch_direct_io_ops()
    patch_unpinned_host_pools()
