"""Injectable cache bugs: each one a small switch at one site of a cache path.

Every fault reproduces a class of real HiCache / hybrid-cache defect, and touches only a path that
moves or reuses cached state (host round trips, checkpoints, loads, reporting). A request computed
from scratch never passes through one, so it stays exact: a replay with a fault diverges exactly on
the requests served from the path the fault breaks. docs/faults.md says what the tool should see.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FAULTS: dict[str, str] = {
    "host-bf16": "SSM state round-trips through bfloat16 on its way to host memory",
    "late-ssm-checkpoint": "under overlap scheduling, a decode track-boundary checkpoint stores "
                           "the state one token late",
    "stale-host-page": "a load from host reads the neighbouring (stale) host slot",
    "write-back-early-evict": "write_back frees a device page before its host backup is copied",
    "page-first-head-transpose": "page_first host loads read one KV head's block transposed",
    "overreport-cached": "cached_tokens reports the whole prompt whenever anything was reused",
    "conv-state-dropped": "SSM checkpoints keep the recurrent state but lose the conv window",
    "prompt-logprobs-stale-buffer": "prompt logprobs do not cap prefix reuse; the rows of reused "
                                    "positions are what the previous request left in the buffer",
    "split-k-by-extend": "the MLP down projection reduces split-K when a request prefills few "
                         "tokens, so a cache hit (a short uncached tail) changes the bits",
    "cache-key-drops-extra-key": "the radix key leaves out the request's extra_key (cache salt), "
                                 "so requests of different keys share cached pages",
    "largest-group-hit": "a hybrid hit takes the attention group's (deepest page) length and the "
                         "Mamba state there, which no checkpoint holds, is never restored",
    "checkpoint-on-shorter-key": "a finished request's final SSM state is stamped as the "
                                 "checkpoint of its insert key's last full page, which ends earlier",
    "host-load-race": "a host-to-device load is read before its last page landed when another "
                      "request's compute overlaps it (a missing wait on the load stream)",
    "storage-read-unfilled": "an L3 read reports a hit but leaves the page it lands in unwritten "
                             "(zeros): SGLang's sim backend, a short read counted as a hit",
}

# split-k-by-extend: a request that prefills fewer tokens than this gets the split-K kernel.
# Every cold prompt of the committed goldens and of the CI detection scenario is at least this
# long, so their fault-free references are also what the faulty kernel computes cold.
SPLIT_K_BELOW = 160
SPLIT_K_SLICES = 4


def check_fault(name: str | None) -> None:
    if name is not None and name not in FAULTS:
        raise ValueError(f"unknown fault {name!r} (choose from {', '.join(FAULTS)})")


@dataclass(frozen=True)
class Faults:
    """The active fault (or none). Each method is one fault's switch: identity unless active."""

    active: str | None = None

    def __post_init__(self) -> None:
        check_fault(self.active)

    def ssm_to_host(self, array: np.ndarray) -> np.ndarray:
        """host-bf16: a host pool that stores Mamba state in the KV cache dtype (bf16) instead
        of the state's own float32, as when a hybrid host pool reuses the attention pool's dtype."""
        if self.active != "host-bf16":
            return array
        return torch.from_numpy(array).to(torch.bfloat16).to(torch.float32).numpy()

    def late_checkpoint(self, overlap: bool) -> bool:
        """late-ssm-checkpoint: SGLang PR 29792's class. With overlap scheduling the results of
        step N are processed after step N+1 was launched; bookkeeping that reads the request's
        live state then records the state after boundary+1 tokens as the boundary's checkpoint."""
        return self.active == "late-ssm-checkpoint" and overlap

    def host_slot_to_load(self, slot: int, capacity: int) -> int:
        """stale-host-page: an off-by-one in the host index translation (or a slot reused before
        its node was invalidated) makes a load read another page's bytes."""
        if self.active != "stale-host-page":
            return slot
        return (slot + 1) % capacity

    def written_back(self, pages: torch.Tensor) -> torch.Tensor:
        """write-back-early-evict: write_back eviction returns the device pages to the allocator
        before the device-to-host copy completes; the last page of the batch is reused (here:
        zeroed) first, so host keeps garbage for it. `pages` is [n, layers, 2, page, heads, dim]."""
        if self.active != "write-back-early-evict" or len(pages) == 0:
            return pages
        pages = pages.clone()
        pages[-1].zero_()
        return pages

    def page_first_loaded(self, pages: np.ndarray) -> np.ndarray:
        """page-first-head-transpose: a page_first load kernel with wrong strides for some KV
        heads: the last head's [page, dim] block is read as if it were stored [dim, page].
        `pages` is [..., page_size, heads, dim]."""
        if self.active != "page-first-head-transpose":
            return pages
        out = np.array(pages, copy=True)
        block = np.ascontiguousarray(pages[..., -1, :])  # [..., page_size, dim]
        *lead, tokens, dim = block.shape
        out[..., -1, :] = block.reshape(*lead, dim, tokens).swapaxes(-1, -2)
        return out

    def reported_cached(self, cached: int, prompt_len: int) -> int:
        """overreport-cached: the reported hit counts the whole prompt (including the last
        token, which is always recomputed) instead of the tokens actually reused."""
        if self.active != "overreport-cached" or cached == 0:
            return cached
        return prompt_len

    def caps_prefix_for_prompt_logprobs(self) -> bool:
        """prompt-logprobs-stale-buffer: vLLM issue 42019 (PR 42245): with prefix caching, a
        request asking for prompt logprobs still reuses the cached prefix, and the logprob rows of
        the reused positions, never computed, come from a `torch.empty` buffer: whatever the
        previous request left there, so prompt_logprobs depend on request order. False when
        active: the scheduler then reuses past logprob_start_len and copies the stale rows."""
        return self.active != "prompt-logprobs-stale-buffer"

    def k_splits(self, extend_len: int) -> int:
        """split-k-by-extend: a GEMM whose reduction split is picked from the problem shape, as
        cuBLASLt's heuristics do (its plan is keyed on M, N, K; split-K for small M). A cache hit
        prefills only the uncached tail, so the same prompt reaches the kernel with a smaller M
        and another summation order (atoma-infer issue 257: cached and cold prefills of one
        prompt decode differently). Keyed on the request's own extend length, not the batch's
        M, so that a cold request is computed the same way under any batching: only a cache hit
        changes the kernel."""
        if self.active != "split-k-by-extend" or extend_len >= SPLIT_K_BELOW:
            return 1
        return SPLIT_K_SLICES

    def host_load_races(self) -> bool:
        """host-load-race: vLLM 45704 / TensorRT-LLM 8813 / LMCache 2181's class. A host-to-
        device load runs on a copy stream and the forward that reads the pages must wait for it.
        With the fault the wait is missing: the last page of a host load is still in flight when
        its request's first chunk is launched (`host_load_landed` says whether it made it)."""
        return self.active == "host-load-race"

    def host_load_landed(self, alone: bool) -> bool:
        """The unwaited copy wins the race only when the request computes alone; when another
        request's compute shares the step (contention for the copy engine and memory), the
        forward reads the device page first: it still holds its previous owner's bytes, and the
        copy is never waited for. So the fault passes at --concurrency 1 and fails under load."""
        return alone or self.active != "host-load-race"

    def storage_loaded(self, page: np.ndarray) -> np.ndarray:
        """storage-read-unfilled: seen on SGLang 0.5.23's real CPU server (docs/sglang-cpu.md,
        L3 backends): its `sim` backend answers a read by returning the landing page as it was,
        and HiCacheStorage's generic get path (`_generic_page_get`) counts any answer that is not
        None as a hit; a backend whose short read reports success is the same class. The page
        that reaches the device is the landing buffer, never written: zeros here."""
        if self.active != "storage-read-unfilled":
            return page
        return np.zeros_like(page)

    def cache_namespace(self, extra_key: str | None) -> str | None:
        """cache-key-drops-extra-key: vLLM 30931's class (a LoRA keyed by name shared KV between
        adapters) and LMCache 4086's (a multimodal identity cut to 16 bits): the cache key
        leaves out a field the request's identity needs, so requests that differ only there
        reuse each other's pages."""
        return None if self.active == "cache-key-drops-extra-key" else extra_key

    def takes_largest_group_hit(self) -> bool:
        """largest-group-hit: vLLM / LMCache 4247's class. A hybrid model's cache groups each
        find their own hit (attention: any full page; Mamba: only where a state was kept); the
        bug takes the largest instead of the smallest, and the Mamba state at that length,
        which no checkpoint holds, is never restored: the request resumes from an empty state.
        True when active: the match keeps every matched page."""
        return self.active == "largest-group-hit"

    def stamps_final_state_on_shorter_key(self) -> bool:
        """checkpoint-on-shorter-key: SGLang PR 39209's class. When a finished request is
        inserted, its key is cut to whole pages, but its final SSM state (after every computed
        position) is stamped as the checkpoint of that shorter key's last node: a later hit
        there resumes from a state that already saw tokens past it."""
        return self.active == "checkpoint-on-shorter-key"

    def checkpoint_conv(self, conv: torch.Tensor) -> torch.Tensor:
        """conv-state-dropped: a checkpoint copies the SSM's recurrent state but not its conv
        window (the last conv_width-1 inputs), so a restored request starts with zeros there."""
        if self.active != "conv-state-dropped":
            return conv
        return torch.zeros_like(conv)
