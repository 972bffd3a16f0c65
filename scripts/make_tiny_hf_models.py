#!/usr/bin/env python3
"""Make tiny random-weight Hugging Face model folders for vLLM and SGLang, from a seed, with no
download.

Each model is a folder ``${GOLDEN_HF_MODELS:-~/.cache/golden-replay/hf-models}/<name>/`` with
``config.json``, ``model.safetensors`` (weights drawn from N(0, std), norms near their identity;
float32, or bfloat16 for the ``-sglang`` models) and a word-level tokenizer (``tokenizer.json``:
ids ``<unk> <s> </s> t3 .. tN``) of exactly the model's vocabulary, which the servers need to start
and to detokenize.

Why real random weights, not ``--load-format dummy``: vLLM's dummy loader fills every tensor with
U(-1e-3, 1e-3), so every logprob is -ln(vocab) to six digits and no numeric difference can ever
show. With std 0.15 the logits spread over several nats, so one ULP of drift is visible.

* ``tiny-llama``      LlamaForCausalLM: hidden 256, 2 layers, 4 heads / 2 KV heads of 64.
* ``tiny-qwen3-next`` Qwen3NextForCausalLM, the GDN hybrid: layer 0 Gated DeltaNet (linear
                      attention), layer 1 gated full attention, both with a 4-expert MoE
                      (2 per token) and a shared expert.
* ``tiny-nemotron-h`` NemotronHForCausalLM, the Mamba-2 hybrid: layers Mamba-2, MLP,
                      attention, MLP (pattern ``M-*-``).
* ``tiny-llama-sglang`` and ``tiny-qwen3-next-sglang``: the same shapes with a vocabulary of 4096,
                      bfloat16 weights from N(0, 0.2^2), for real SGLang on the H200 (the shape
                      of the GPU feasibility run; carried by scripts/gpu_sglang/build_carry.sh:
                      6.4 and 7.0 MB). bf16 on disk, so SGLang serves exactly these numbers.

The weights are written by name from the config (numpy + safetensors only: no transformers model
class, so the result does not depend on which transformers version runs this). The tensor names
are those of the published checkpoints that vLLM's loaders read.

Idempotent: a model is rewritten only when its ``recipe.json`` differs from the current recipe.
Prints ``<name> <path>`` per model. `python3 scripts/make_tiny_hf_models.py [NAME...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

RECIPE_VERSION = 1
SEED = 23
STD = 0.15
VOCAB = 2048
CACHE = Path(os.environ.get("GOLDEN_HF_MODELS", Path.home() / ".cache/golden-replay/hf-models"))
Shapes = dict[str, tuple[int, ...]]

LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": VOCAB, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
}

QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "vocab_size": VOCAB, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"], "full_attention_interval": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "partial_rotary_factor": 0.25, "rope_theta": 10000.0,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 64,
    "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4,
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128, "decoder_sparse_step": 1, "norm_topk_prob": True,
    "mlp_only_layers": [], "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
    "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
}


def llama_shapes(c: dict[str, Any]) -> Shapes:
    h, inter, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes: Shapes = {"model.embed_tokens.weight": (c["vocab_size"], h),
                      "model.norm.weight": (h,), "lm_head.weight": (c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    return shapes


def qwen3_next_shapes(c: dict[str, Any]) -> Shapes:
    h, hd = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
    moe, shared, experts = c["moe_intermediate_size"], c["shared_expert_intermediate_size"], c["num_experts"]
    shapes: Shapes = {"model.embed_tokens.weight": (c["vocab_size"], h),
                      "model.norm.weight": (h,), "lm_head.weight": (c["vocab_size"], h)}
    for i, kind in enumerate(c["layer_types"]):
        p = f"model.layers.{i}."
        if kind == "linear_attention":
            shapes.update({
                p + "linear_attn.dt_bias": (nv,), p + "linear_attn.A_log": (nv,),
                p + "linear_attn.conv1d.weight": (2 * nk * dk + nv * dv, 1, c["linear_conv_kernel_dim"]),
                p + "linear_attn.in_proj_qkvz.weight": (2 * nk * dk + 2 * nv * dv, h),
                p + "linear_attn.in_proj_ba.weight": (2 * nv, h),
                p + "linear_attn.norm.weight": (dv,), p + "linear_attn.out_proj.weight": (h, nv * dv),
            })
        else:  # gated attention: q_proj also yields the output gate
            shapes.update({
                p + "self_attn.q_proj.weight": (2 * q, h), p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            })
        shapes[p + "mlp.gate.weight"] = (experts, h)
        for e in range(experts):
            shapes.update({p + f"mlp.experts.{e}.gate_proj.weight": (moe, h),
                           p + f"mlp.experts.{e}.up_proj.weight": (moe, h),
                           p + f"mlp.experts.{e}.down_proj.weight": (h, moe)})
        shapes.update({
            p + "mlp.shared_expert.gate_proj.weight": (shared, h),
            p + "mlp.shared_expert.up_proj.weight": (shared, h),
            p + "mlp.shared_expert.down_proj.weight": (h, shared),
            p + "mlp.shared_expert_gate.weight": (1, h),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    return shapes


NEMOTRON_H: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "vocab_size": VOCAB, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
    "hybrid_override_pattern": "M-*-", "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "mamba_num_heads": 8, "mamba_head_dim": 32, "n_groups": 1,
    "ssm_state_size": 64, "conv_kernel": 4, "chunk_size": 128, "expand": 1,
    "use_conv_bias": True, "mamba_proj_bias": False, "use_bias": False, "mlp_bias": False,
    "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2", "attention_bias": False,
    "residual_in_fp32": False, "layer_norm_epsilon": 1e-5, "max_position_embeddings": 4096,
    "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    "rescale_prenorm_residual": True, "torch_dtype": "bfloat16",
}


def nemotron_h_shapes(c: dict[str, Any]) -> Shapes:
    """Mamba-2 mixers (M), MLPs (-) and attention (*), by the published checkpoints' names."""
    h, hd = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    heads, inner = c["mamba_num_heads"], c["mamba_num_heads"] * c["mamba_head_dim"]
    gs = c["n_groups"] * c["ssm_state_size"]
    shapes: Shapes = {"backbone.embeddings.weight": (c["vocab_size"], h),
                      "backbone.norm_f.weight": (h,), "lm_head.weight": (c["vocab_size"], h)}
    for i, kind in enumerate(c["hybrid_override_pattern"]):
        p = f"backbone.layers.{i}."
        shapes[p + "norm.weight"] = (h,)
        if kind == "M":
            shapes.update({
                p + "mixer.in_proj.weight": (2 * inner + 2 * gs + heads, h),
                p + "mixer.conv1d.weight": (inner + 2 * gs, 1, c["conv_kernel"]),
                p + "mixer.conv1d.bias": (inner + 2 * gs,),
                p + "mixer.dt_bias": (heads,), p + "mixer.A_log": (heads,), p + "mixer.D": (heads,),
                p + "mixer.norm.weight": (inner,), p + "mixer.out_proj.weight": (h, inner),
            })
        elif kind == "*":
            shapes.update({
                p + "mixer.q_proj.weight": (q, h), p + "mixer.k_proj.weight": (kv, h),
                p + "mixer.v_proj.weight": (kv, h), p + "mixer.o_proj.weight": (h, q),
            })
        else:  # "-": a relu2 MLP without a gate
            shapes.update({p + "mixer.up_proj.weight": (c["intermediate_size"], h),
                           p + "mixer.down_proj.weight": (h, c["intermediate_size"])})
    return shapes


def identity_of(name: str, arch: str) -> float:
    """What a norm weight is centred on: Qwen3-Next's RMSNorms compute x * (1 + w) (zero-centred),
    except the gated norm inside Gated DeltaNet; Llama's compute x * w."""
    if arch == "qwen3_next" and "linear_attn.norm" not in name:
        return 0.0
    return 1.0


@dataclass(frozen=True)
class Recipe:
    """A model: its config, its tensors' shapes, the weights' spread and stored dtype."""

    config: dict[str, Any]
    shapes_of: Callable[[dict[str, Any]], Shapes]
    std: float = STD
    dtype: str = "float32"  # or "bfloat16" (rounded to nearest even from the float32 draw)


SGLANG = {"vocab_size": 4096, "torch_dtype": "bfloat16"}
MODELS: dict[str, Recipe] = {
    "tiny-llama": Recipe(LLAMA, llama_shapes),
    "tiny-qwen3-next": Recipe(QWEN3_NEXT, qwen3_next_shapes),
    "tiny-nemotron-h": Recipe(NEMOTRON_H, nemotron_h_shapes),
    "tiny-llama-sglang": Recipe({**LLAMA, **SGLANG}, llama_shapes, 0.2, "bfloat16"),
    "tiny-qwen3-next-sglang": Recipe({**QWEN3_NEXT, **SGLANG}, qwen3_next_shapes, 0.2, "bfloat16"),
}


def weights(config: dict[str, Any], shapes: Shapes, seed: int,
            std: float = STD) -> dict[str, np.ndarray]:
    """N(0, std) everywhere; norm weights at their identity plus N(0, 0.02)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("norm.weight"):
            value = identity_of(name, config["model_type"]) + rng.normal(0.0, 0.02, shape)
        else:
            value = rng.normal(0.0, std, shape)
        out[name] = value.astype(np.float32)
    return out


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even (values are finite)."""
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def save_bfloat16(tensors: dict[str, np.ndarray], path: Path) -> None:
    """A safetensors file of BF16 tensors (numpy has no bfloat16, so safetensors.numpy cannot):
    u64 header length, the JSON header (space-padded to 8 bytes), the tensors' bytes in order."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        blob = bfloat16_bits(tensors[name]).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def write_tokenizer(folder: Path, vocab_size: int) -> None:
    """A word-level tokenizer with exactly `vocab_size` ids (so every id the model can emit has
    text, and the server's vocabulary equals the model's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": 4096, "clean_up_tokenization_spaces": False,
    }, indent=1))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=1))


def recipe(name: str) -> dict[str, Any]:
    r = MODELS[name]
    out = {"version": RECIPE_VERSION, "seed": SEED, "std": r.std, "config": r.config}
    if r.dtype != "float32":  # float32 models keep the stamp they always had
        out["dtype"] = r.dtype
    return out


def model_dir(name: str) -> Path:
    return CACHE / name


def make(name: str) -> Path:
    """The model folder, written atomically (a temporary folder renamed into place)."""
    folder = model_dir(name)
    want = recipe(name)
    stamp = folder / "recipe.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return folder
    r = MODELS[name]
    config = r.config
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=CACHE))
    tmp.chmod(0o755)
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    tensors = weights(config, r.shapes_of(config), SEED, r.std)
    if r.dtype == "bfloat16":
        save_bfloat16(tensors, tmp / "model.safetensors")
    else:
        from safetensors.numpy import save_file

        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    write_tokenizer(tmp, config["vocab_size"])
    (tmp / "recipe.json").write_text(json.dumps(want, indent=1))
    if folder.exists():
        old = folder.with_name(f".{name}-old-{os.getpid()}")
        folder.rename(old)
        tmp.rename(folder)
        import shutil

        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", choices=[[], *MODELS], default=[],
                        help=f"models to make (default: all of {', '.join(MODELS)})")
    args = parser.parse_args(argv)
    for name in args.names or list(MODELS):
        print(name, make(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
