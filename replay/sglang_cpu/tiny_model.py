"""A tiny random-weight Llama (or Qwen3-Next) for SGLang's real server on a CPU, from a seed.

    python -m replay.sglang_cpu.tiny_model DIR [--seed 0] [--dtype bfloat16] [--arch qwen3-next]

Writes an HF `config.json` and `model.safetensors` (2 layers, hidden 256, 4 query heads over 2 KV
heads of 64, vocabulary 4096 so the scenario presets' token ids fit). Weights are drawn from
torch's CPU generator seeded with `--seed`, N(0, 0.15^2) (norms 1 + N(0, 0.05^2)): real numbers,
so logprobs differ from token to token; `--load-format dummy` would give every token the same
logprob to 6 digits and can show no numeric difference. Written atomically; an existing directory
with the same config is left as it is. No tokenizer: the server runs with --skip-tokenizer-init.

`--arch qwen3-next`: the Gated DeltaNet hybrid (3 linear-attention layers, then a gated full
attention layer; a 4-expert MoE in each, no shared expert), bf16 only, in the shape SGLang's CPU
path takes (docs/sglang-cpu.md, "The hybrid"): linear heads of 64 (the CPU GDN kernel's sizes),
no shared expert (its gate is a Triton kernel off AMX), and `linear_num_{key,value}_heads_cpu`,
which SGLang's CPU model reads but sets only when the heads do not divide by the TP size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def llama_config(seed: int, dtype: str) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 4096,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": dtype,
        "bos_token_id": 1, "eos_token_id": 2,
        "golden_replay_tiny_model": {"seed": seed, "format": 1},
    }


def llama_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim, vocab = config["head_dim"], config["vocab_size"]
    q_out = config["num_attention_heads"] * head_dim
    kv_out = config["num_key_value_heads"] * head_dim
    dtype = DTYPES[config["torch_dtype"]]

    def normal(*shape: int, std: float = 0.15, mean: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std + mean).to(dtype)

    weights = {"model.embed_tokens.weight": normal(vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights.update({
            p + "input_layernorm.weight": normal(hidden, std=0.05, mean=1.0),
            p + "self_attn.q_proj.weight": normal(q_out, hidden),
            p + "self_attn.k_proj.weight": normal(kv_out, hidden),
            p + "self_attn.v_proj.weight": normal(kv_out, hidden),
            p + "self_attn.o_proj.weight": normal(hidden, q_out),
            p + "post_attention_layernorm.weight": normal(hidden, std=0.05, mean=1.0),
            p + "mlp.gate_proj.weight": normal(inter, hidden),
            p + "mlp.up_proj.weight": normal(inter, hidden),
            p + "mlp.down_proj.weight": normal(hidden, inter),
        })
    weights["model.norm.weight"] = normal(hidden, std=0.05, mean=1.0)
    weights["lm_head.weight"] = normal(vocab, hidden)
    return weights


def qwen3_next_config(seed: int) -> dict:
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
        "full_attention_interval": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "partial_rotary_factor": 0.25, "rope_theta": 10000.0,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 64,
        "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4,
        "linear_num_key_heads_cpu": 2, "linear_num_value_heads_cpu": 4,
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 0, "decoder_sparse_step": 1, "norm_topk_prob": True,
        "mlp_only_layers": [], "vocab_size": 4096, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
        "golden_replay_tiny_model": {"seed": seed, "format": 1},
    }


def qwen3_next_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """By the published checkpoints' names. Qwen3-Next's RMSNorms compute x * (1 + w), so their
    weights are centred on 0; the gated norm inside Gated DeltaNet computes x * w (centred on 1)."""
    gen = torch.Generator().manual_seed(seed)
    h, hd = config["hidden_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    moe, vocab = config["moe_intermediate_size"], config["vocab_size"]

    def normal(*shape: int, std: float = 0.15, mean: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std + mean).to(torch.bfloat16)

    w = {"model.embed_tokens.weight": normal(vocab, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if (i + 1) % config["full_attention_interval"]:  # Gated DeltaNet
            w.update({
                p + "linear_attn.dt_bias": normal(nv, std=0.5, mean=1.0),
                p + "linear_attn.A_log": normal(nv, std=0.5),
                p + "linear_attn.conv1d.weight": normal(2 * nk * dk + nv * dv, 1,
                                                        config["linear_conv_kernel_dim"]),
                p + "linear_attn.in_proj_qkvz.weight": normal(2 * nk * dk + 2 * nv * dv, h),
                p + "linear_attn.in_proj_ba.weight": normal(2 * nv, h),
                p + "linear_attn.norm.weight": normal(dv, std=0.05, mean=1.0),
                p + "linear_attn.out_proj.weight": normal(h, nv * dv),
            })
        else:  # gated attention: q_proj also yields the output gate
            w.update({
                p + "self_attn.q_proj.weight": normal(2 * q, h),
                p + "self_attn.k_proj.weight": normal(kv, h),
                p + "self_attn.v_proj.weight": normal(kv, h),
                p + "self_attn.o_proj.weight": normal(h, q),
                p + "self_attn.q_norm.weight": normal(hd, std=0.05),
                p + "self_attn.k_norm.weight": normal(hd, std=0.05),
            })
        w[p + "mlp.gate.weight"] = normal(config["num_experts"], h)
        for e in range(config["num_experts"]):
            w.update({p + f"mlp.experts.{e}.gate_proj.weight": normal(moe, h),
                      p + f"mlp.experts.{e}.up_proj.weight": normal(moe, h),
                      p + f"mlp.experts.{e}.down_proj.weight": normal(h, moe)})
        w[p + "input_layernorm.weight"] = normal(h, std=0.05)
        w[p + "post_attention_layernorm.weight"] = normal(h, std=0.05)
    w["model.norm.weight"] = normal(h, std=0.05)
    w["lm_head.weight"] = normal(vocab, h)
    return w


def write_tiny_llama(path: Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    """The model directory at `path` (made unless it already holds this very config)."""
    return write_model(path, llama_config(seed, dtype), lambda c: llama_weights(c, seed))


def write_tiny_qwen3_next(path: Path, seed: int = 0) -> Path:
    return write_model(path, qwen3_next_config(seed), lambda c: qwen3_next_weights(c, seed))


def write_model(path: Path, config: dict, weights) -> Path:
    config_file = path / "config.json"
    if config_file.is_file() and json.loads(config_file.read_text()) == config \
            and (path / "model.safetensors").is_file():
        return path
    partial = path.with_name(path.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_file(weights(config), str(partial / "model.safetensors"))
    (partial / "config.json").write_text(json.dumps(config, indent=1))
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replay.sglang_cpu.tiny_model",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--arch", choices=("llama", "qwen3-next"), default="llama")
    args = parser.parse_args(argv)
    if args.seed < 0:
        print("error: --seed must be >= 0", file=sys.stderr)
        return 2
    if args.arch == "qwen3-next":
        if args.dtype != "bfloat16":
            print("error: --arch qwen3-next is bfloat16 only (SGLang's CPU GDN kernels)",
                  file=sys.stderr)
            return 2
        print(write_tiny_qwen3_next(args.path, args.seed))
        return 0
    print(write_tiny_llama(args.path, args.seed, args.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
