"""The CPU gaps of SGLang 0.5.23's prefill/decode disaggregation, closed; loaded only into a CPU
test server started with `--disaggregation-mode prefill|decode` (the pd-* launch profiles,
docs/topologies.md). A server without disaggregation is not touched.

With the Mooncake transfer backend over TCP (`mooncake_tcp`: no RDMA) 0.5.23's prefill
scheduler reaches two CUDA-only spots, both about waiting for asynchronous device work before
the transfer thread reads KV pages:

1. `_send_kv_chunk` stages each chunk's page indices in pinned host memory and records a
   `torch.cuda.Event` when the sender says `supports_host_tensor_indices` (Mooncake's does). On a
   CPU there is no pinned allocator ("pin_memory=True requires a CUDA or other accelerator
   backend"): the scheduler dies at the first request's last chunk. The patch clears that flag on
   Mooncake's sender, so the scheduler takes the path every other backend takes
   (`kv_to_page_indices`: the same page indices, computed in line).
2. `maybe_send_cached_prefix_chunk` (the early send of a radix-cache hit's pages, on by default:
   SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX) records a `torch.cuda.Event` on the forward
   stream under overlap scheduling ("Tried to instantiate dummy base class Event" on a CPU, at the
   first request that hits the cache). On a CPU, device work is finished when it is issued, so
   the patch binds `torch.cuda.Event` to torch's own CPU event (`torch.cpu.Event`, whose
   record/synchronize/wait do nothing) in this scheduler process, where CUDA cannot exist.

The transfer itself (Mooncake's TransferEngine, SGLang's KV manager, bootstrap server, sender
and receiver) runs unmodified. Every patch prints one line to the server's log
(patches.LOG_PREFIX); `apply()` is idempotent and refuses to run anywhere but a CPU server.
"""

from __future__ import annotations

from typing import Any

import torch

from replay.sglang_cpu.patches import log


def patch_mooncake_host_indices() -> None:
    from sglang.srt.disaggregation.mooncake import conn

    sender = conn.MooncakeKVSender
    if sender.__dict__.get("supports_host_tensor_indices") is False:
        return
    sender.supports_host_tensor_indices = False
    log("disaggregation.mooncake.conn.MooncakeKVSender.supports_host_tensor_indices = False "
        "(page indices computed in line: no pinned staging)")


def patch_cuda_event() -> None:
    if torch.cuda.is_available():
        raise RuntimeError("torch.cuda.Event is real here: the patch is for a CPU server only")
    if torch.cuda.Event is torch.cpu.Event:
        return
    torch.cuda.Event = torch.cpu.Event  # type: ignore[misc, assignment]
    log("torch.cuda.Event = torch.cpu.Event in the scheduler process (device work on a CPU is "
        "done when issued: nothing to wait for)")


def apply(server_args: Any) -> None:
    """Close both gaps in this scheduler process, for a PD server only."""
    from sglang.srt.utils import is_cpu

    if server_args.disaggregation_mode == "null":
        return
    if not is_cpu():
        raise RuntimeError("replay.sglang_cpu patches are for a CPU server only")
    patch_mooncake_host_indices()
    patch_cuda_event()
