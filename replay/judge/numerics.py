"""Numerics parity: do the reference server and the replay server run the same arithmetic?

A bit-exact verdict between two servers that run different kernels is meaningless either way: a
difference proves no cache bug, and agreement would be luck. The golden stores the reference's
resolved `/server_info` (values after SGLang's own flag resolution); at replay the same fields of
the replay server are compared, and any difference refuses the replay (NumericsMismatch, exit 2)
unless the user allows it. The report always shows the compared fields.

The fields, and why each one changes bits (SGLang 0.5.23 names):

| field | why it matters |
| --- | --- |
| `device` | cuda, npu, cpu...: different kernels altogether |
| `attention_backend`, `prefill_attention_backend`, `decode_attention_backend` | each backend reduces over keys in its own order and tiling |
| `linear_attn_backend`, `mamba_backend`, `mamba_ssm_dtype` | hybrid models: the SSM / linear-attention kernels and the state precision |
| `dtype`, `kv_cache_dtype` | precision of weights/activations and of the cached K/V |
| `quantization` | other weights and other GEMM kernels |
| `tp_size`, `pp_size`, `dp_size`, `ep_size`, `enable_dp_attention` | how matmuls and all-reduces are split, so the summation order |
| `page_size` | paged kernels read K/V page by page; the split follows page boundaries |
| `chunked_prefill_size` | a long prompt is prefilled in chunks, each attending to the earlier ones |
| `enable_deterministic_inference` | batch-invariant kernels on or off |
| `sampling_backend` | computes the logprobs and breaks argmax ties |
| `preferred_sampling_params`, `sampling_defaults` | server-side sampling defaults merged into every request (a penalty changes greedy outputs) |
| `enable_fp32_lm_head` | precision of the logits |
| `enable_torch_compile`, `enable_tf32_matmul` | fused or lower-precision matmul kernels |
| `triton_attention_reduce_in_fp32`, `triton_attention_num_kv_splits`, `triton_attention_split_tile_size` | the triton backend's reduction |
| `moe_runner_backend`, `moe_a2a_backend` | MoE expert kernels and their dispatch |
| `bf16_gemm_backend`, `fp8_gemm_runner_backend`, `fp4_gemm_runner_backend` | GEMM kernels |
| `speculative_algorithm` | speculative decoding verifies drafts through another kernel path |

Deliberately not compared (they differ between a reference and a replay by design, or change only
what is cached, not how a token is computed): `disable_radix_cache`, `disable_overlap_schedule`,
the `hicache_*` settings, pool sizes (`max_total_tokens`, `mem_fraction_static`,
`max_running_requests`), `mamba_track_interval` and the Mamba cache strategy (checked by the cache
expectation instead), `random_seed` (greedy decoding).

A field absent on either side (an older golden, llama.cpp, a server that does not report it) is
not a mismatch: it is shown as `null`.

Which fields may differ is this module's decision, never the server's alone. A server whose
arithmetic does not depend on some fields by construction (the embedded engine: portable math,
identical bits on any device, page size and chunking) lists them in
`/server_info["numerics_independent_of"]`; a field is shown and not enforced only when it is one
of `MAY_BE_INDEPENDENT` (the fields a fixed reduction order can make irrelevant) and both the
reference (the golden's stored `/server_info`) and the replay server declare it. Anything else a
server declares (deterministic inference, a backend, a dtype...) is compared as usual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NUMERICS_FIELDS: tuple[str, ...] = (
    "device",
    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
    "linear_attn_backend", "mamba_backend", "mamba_ssm_dtype",
    "dtype", "kv_cache_dtype", "quantization",
    "tp_size", "pp_size", "dp_size", "ep_size", "enable_dp_attention",
    "page_size", "chunked_prefill_size",
    "enable_deterministic_inference",
    "sampling_backend", "preferred_sampling_params", "sampling_defaults",
    "enable_fp32_lm_head", "enable_torch_compile", "enable_tf32_matmul",
    "triton_attention_reduce_in_fp32", "triton_attention_num_kv_splits",
    "triton_attention_split_tile_size",
    "moe_runner_backend", "moe_a2a_backend",
    "bf16_gemm_backend", "fp8_gemm_runner_backend", "fp4_gemm_runner_backend",
    "speculative_algorithm",
)
INDEPENDENT_KEY = "numerics_independent_of"
# The only fields a server may be independent of: how the work is laid out (device, pages,
# chunks), which portable math with a fixed reduction order makes irrelevant. Kernels,
# precision, parallelism and determinism switches always change bits.
MAY_BE_INDEPENDENT: tuple[str, ...] = ("device", "page_size", "chunked_prefill_size")


@dataclass(frozen=True)
class NumericsComparison:
    """The compared fields of both servers, and which of them differ."""

    fields: dict[str, dict[str, Any]]  # name -> {"golden": value or None, "replay": value or None}
    differing: tuple[str, ...]
    independent: tuple[str, ...]  # fields the replay server's arithmetic does not depend on

    def mismatch_line(self) -> str:
        """One line naming each differing field with both values."""
        parts = [f"{name} {_show(self.fields[name]['replay'])} (golden: "
                 f"{_show(self.fields[name]['golden'])})" for name in self.differing]
        return ("the replay server's numerics differ from the reference's, so bits would differ "
                "with no cache bug: " + ", ".join(parts))

    def as_dict(self, allowed: bool) -> dict[str, Any]:
        """The report's `numerics` object (docs/report.md)."""
        return {"fields": self.fields, "differing": list(self.differing),
                "independent": list(self.independent), "mismatch_allowed": allowed}


def compare_numerics(golden_info: dict[str, Any], replay_info: dict[str, Any]) -> NumericsComparison:
    """Compare the numerics fields of the golden's stored reference `/server_info` with the
    replay server's. Only fields present on both sides can differ."""
    skipped = tuple(f for f in MAY_BE_INDEPENDENT
                    if f in _declared(golden_info) and f in _declared(replay_info))
    fields: dict[str, dict[str, Any]] = {}
    differing = []
    for name in NUMERICS_FIELDS:
        if name not in golden_info and name not in replay_info:
            continue
        a, b = golden_info.get(name), replay_info.get(name)
        fields[name] = {"golden": a, "replay": b}
        if name in golden_info and name in replay_info and a != b and name not in skipped:
            differing.append(name)
    return NumericsComparison(fields=fields, differing=tuple(differing), independent=skipped)


def _declared(info: dict[str, Any]) -> list[Any]:
    independent = info.get(INDEPENDENT_KEY)
    return independent if isinstance(independent, list) else []


def _show(value: Any) -> str:
    return "null" if value is None else str(value)
