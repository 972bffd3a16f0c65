"""A tiny random-weight Llama for SGLang's real server on a CPU, made from a seed.

    python -m replay.sglang_cpu.tiny_model DIR [--seed 0] [--dtype bfloat16]

Writes an HF `config.json` and `model.safetensors` (2 layers, hidden 256, 4 query heads over 2 KV
heads of 64, vocabulary 4096 so the scenario presets' token ids fit). Weights are drawn from
torch's CPU generator seeded with `--seed`, N(0, 0.15^2) (norms 1 + N(0, 0.05^2)): real numbers,
so logprobs differ from token to token; `--load-format dummy` would give every token the same
logprob to 6 digits and can show no numeric difference. Written atomically; an existing directory
with the same config is left as it is. No tokenizer: the server runs with --skip-tokenizer-init.
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


def write_tiny_llama(path: Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    """The model directory at `path` (made unless it already holds this very config)."""
    config = llama_config(seed, dtype)
    config_file = path / "config.json"
    if config_file.is_file() and json.loads(config_file.read_text()) == config \
            and (path / "model.safetensors").is_file():
        return path
    partial = path.with_name(path.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_file(llama_weights(config, seed), str(partial / "model.safetensors"))
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
    args = parser.parse_args(argv)
    if args.seed < 0:
        print("error: --seed must be >= 0", file=sys.stderr)
        return 2
    print(write_tiny_llama(args.path, args.seed, args.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
