"""What a Gated DeltaNet hybrid (Qwen3-Next) needs of a CPU test server.

Checked before SGLang starts: sgl-kernel's GDN ops (scripts/sglang_cpu/hybrid_ops.cpp), which
have AVX-512 code only and so are built only on a CPU with AVX-512 BF16. Without them SGLang
would load the model and fail at its first forward with an unknown `torch.ops.sgl_kernel` name;
the launcher says why in one line instead (exit 2).

Then, in the scheduler process of a hybrid's server only, what SGLang 0.5.23 does for these ops
on a CPU with AMX, done here on one without (every patch prints its line to the server's log):

1. The gated RMSNorm: SGLang uses `fused_rmsnorm_gated_cpu` only where the CPU has AMX
   (`_use_cpu = is_cpu() and cpu_has_amx_support()` in fla/layernorm_gated.py and
   fla/fused_norm_gate.py) and otherwise a Triton kernel, which cannot run on a CPU.
2. The conv1d weights: SGLang's CPU conv ops are always called as already VNNI-packed
   (`is_vnni=True` in sgl_kernel/mamba.py), but the weights are packed
   (`causal_conv1d_weight_pack`, in UnquantizedLinearMethod.process_weights_after_loading) only
   where the CPU has AMX. Unpacked, the kernel reads every conv weight from the wrong place.
3. The conv-state layout: the Mamba pool gives conv_state the layout the CPU conv ops expect
   (`_init_amx_conv_state`) only where the CPU has AMX (`memory_pool._cpu_has_amx_support`);
   the flag is set for the pool (it also makes K/V writes go through sgl-kernel's
   `store_cache_cpu`: the same bytes moved).

None of these ops holds an AMX instruction; they need AVX-512 BF16. Without 2 and 3 the server
runs and answers, wrongly: found on the way (docs/sglang-cpu.md, "The hybrid").
"""

from __future__ import annotations

import json
from pathlib import Path

HYBRID_ARCHITECTURES = frozenset({"Qwen3NextForCausalLM"})
GDN_OPS = (
    "chunk_gated_delta_rule_cpu", "fused_sigmoid_gating_delta_rule_update_cpu",
    "fused_gdn_gating_cpu", "causal_conv1d_weight_pack", "causal_conv1d_fwd_cpu",
    "causal_conv1d_update_cpu", "fused_rmsnorm_gated_cpu", "l2norm_cpu",
)


def architectures(model_path: str) -> list[str]:
    """The model's `architectures`, or [] when it is not a local HF folder we can read."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return []
    found = config.get("architectures") if isinstance(config, dict) else None
    return [a for a in found if isinstance(a, str)] if isinstance(found, list) else []


def is_hybrid(model_path: str) -> bool:
    return bool(HYBRID_ARCHITECTURES & set(architectures(model_path)))


def missing_ops(registered: set[str]) -> list[str]:
    return [op for op in GDN_OPS if op not in registered]


def refusal(model_path: str, registered: set[str]) -> str | None:
    """The one line that stops a hybrid on a kernel without the GDN ops, else None."""
    if not is_hybrid(model_path):
        return None
    missing = missing_ops(registered)
    if not missing:
        return None
    return (f"{model_path} is a Gated DeltaNet hybrid, and this sgl-kernel build lacks its CPU "
            f"ops ({', '.join(missing[:2])}{', ...' if len(missing) > 2 else ''}): they have "
            "AVX-512 code only, so scripts/install_sglang_cpu.sh builds them only on a CPU with "
            "AVX-512 BF16 (avx512f, avx512_bf16, avx512_vnni in /proc/cpuinfo); hint: run on "
            "such a CPU, or use a Llama")


def registered_ops() -> set[str]:
    """The GDN ops this process has (after `import sgl_kernel`)."""
    return {op for op in GDN_OPS if has_op(op)}


def has_op(name: str) -> bool:
    import torch

    try:
        getattr(torch.ops.sgl_kernel, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def log(message: str) -> None:
    from replay.sglang_cpu.patches import log as patch_log

    patch_log(message)


GATED_NORM_MODULES = (
    "sglang.kernels.ops.attention.fla.layernorm_gated",
    "sglang.kernels.ops.attention.fla.fused_norm_gate",
)


def patch_gated_norm() -> None:
    import importlib

    for name in GATED_NORM_MODULES:
        module = importlib.import_module(name)
        if not module._use_cpu:
            module._use_cpu = True
            log(f"{name}._use_cpu = True (sgl-kernel's fused_rmsnorm_gated_cpu, not Triton)")


def packed_conv_weights(process):
    """`process` (a linear method's process_weights_after_loading), then a conv1d weight
    VNNI-packed in place, as SGLang packs it on an AMX CPU."""
    def process_weights_after_loading(self, layer):
        import torch
        from sglang.srt.layers.amx_utils import is_dim_conv_weight

        process(self, layer)
        weight = layer.weight
        if is_dim_conv_weight(weight) and weight.dim() == 3:
            flat = weight.data.view(-1, weight.size(-1))
            flat.copy_(torch.ops.sgl_kernel.causal_conv1d_weight_pack(flat.contiguous()))
    process_weights_after_loading.golden_packed = True
    return process_weights_after_loading


def patch_conv_weight_packing() -> None:
    from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod

    current = UnquantizedLinearMethod.process_weights_after_loading
    if getattr(current, "golden_packed", False):
        return
    UnquantizedLinearMethod.process_weights_after_loading = packed_conv_weights(current)
    log("UnquantizedLinearMethod.process_weights_after_loading packs conv1d weights "
        "(causal_conv1d_weight_pack, as on an AMX CPU)")


def patch_conv_state_layout() -> None:
    from sglang.srt.mem_cache import memory_pool

    if not memory_pool._cpu_has_amx_support:
        memory_pool._cpu_has_amx_support = True
        log("mem_cache.memory_pool._cpu_has_amx_support = True (the conv-state layout of "
            "the CPU conv ops, as on an AMX CPU)")


def apply(model_path: str) -> None:
    """A hybrid's patches, in the scheduler process; nothing for any other model. (The launcher
    has already refused a hybrid whose ops are missing.)"""
    if not is_hybrid(model_path):
        return
    patch_gated_norm()
    patch_conv_weight_packing()
    patch_conv_state_layout()
