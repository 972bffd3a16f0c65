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

A test switch, for showing that a corrupt transfer is caught (never set by a built-in profile):
`GOLDEN_SGLANG_CPU_PD_FAULT=wrong-page-offset` on a prefill server makes Mooncake's sender read
the last page of every KV chunk of two or more pages from the page before it (a source offset
one page short: the decode worker receives real KV, in the wrong place). Each corrupted chunk
prints a line.
"""

from __future__ import annotations

from typing import Any

import os

import numpy as np
import torch

from replay.sglang_cpu.patches import log

FAULT_ENV = "GOLDEN_SGLANG_CPU_PD_FAULT"
FAULTS = ("wrong-page-offset",)


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


def wrong_page_offset(pages: np.ndarray) -> np.ndarray:
    """The chunk's source pages with the last one replaced by the page before it."""
    if len(pages) < 2:
        return pages
    wrong = np.array(pages, copy=True)
    wrong[-1] = wrong[-2]
    return wrong


def arm_transfer_fault(fault: str) -> None:
    if fault not in FAULTS:
        raise RuntimeError(f"{FAULT_ENV}={fault!r}: not a transfer fault ({', '.join(FAULTS)})")
    from sglang.srt.disaggregation.mooncake import conn

    manager = conn.MooncakeKVManager
    send = manager.send_kvcache
    if vars(send).get("golden_fault") == fault:
        return

    def send_kvcache(self: Any, session_id: str, prefill_kv_indices: np.ndarray,
                     *args: Any, **kwargs: Any) -> Any:
        wrong = wrong_page_offset(prefill_kv_indices)
        if wrong is not prefill_kv_indices:
            log(f"FAULT {fault}: chunk of {len(wrong)} pages, page {prefill_kv_indices[-1]} "
                f"sent from page {wrong[-1]}")
        return send(self, session_id, wrong, *args, **kwargs)

    send_kvcache.golden_fault = fault  # type: ignore[attr-defined]
    manager.send_kvcache = send_kvcache
    log(f"FAULT armed ({FAULT_ENV}={fault}): MooncakeKVManager.send_kvcache sends each chunk's "
        "last page from the page before it")


def apply(server_args: Any) -> None:
    """Close both gaps in this scheduler process, for a PD server only (and arm the test
    switch on a prefill server when it is set)."""
    from sglang.srt.utils import is_cpu

    if server_args.disaggregation_mode == "null":
        return
    if not is_cpu():
        raise RuntimeError("replay.sglang_cpu patches are for a CPU server only")
    patch_mooncake_host_indices()
    patch_cuda_event()
    fault = os.environ.get(FAULT_ENV)
    if fault and server_args.disaggregation_mode == "prefill":
        arm_transfer_fault(fault)
