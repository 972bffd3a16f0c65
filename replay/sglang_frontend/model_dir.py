"""A model directory SGLang can load without weights: an HF config.json describing the engine's
model and a word-level tokenizer (token i is the word `t<i>`), made locally, nothing from a hub.

The directory is named like the engine's own model path (`embedded/hybrid-tiny@seed0`) and
SGLang is started from its parent, so `/model_info` reports the same `model_path` as the native
engine and goldens recorded on either are replayable on the other without a model mismatch.

The config is NemotronH's (Mamba2 + attention, `hybrid_override_pattern` with one letter per
layer: a config class transformers and SGLang load) under the engine's own architecture name,
`GoldenHybridForCausalLM`, so `/model_info` names the same architecture as the native engine (the
replay's model-identity check compares them). The launcher registers that architecture with
SGLang's registry for external hybrid models (`register_linear_attn_model`), so SGLang's own flag
resolution decides `uses_mamba_radix_cache` as for any hybrid. No weights exist; only the
scheduler process computes, with the engine's own seeded weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from replay.engine.config import ModelConfig

ARCHITECTURE = "GoldenHybridForCausalLM"  # what the engine's own /model_info reports
ENGINE_KEY = "golden_replay_engine"  # config.json entry naming the engine config and weight seed
FORMAT = 1  # bump when the files written here change, so stale directories are rewritten


def model_path(config: ModelConfig, seed: int) -> str:
    """The relative model path, identical to the native engine's `HybridModel.model_path`."""
    return f"embedded/hybrid-{config.name}@seed{seed}"


def hf_config(config: ModelConfig, seed: int) -> dict:
    pattern = "".join("M" if kind == "ssm" else "*" for kind in config.layers)
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "nemotron_h",
        "vocab_size": config.vocab_size,
        "hidden_size": config.d_model,
        "num_hidden_layers": len(config.layers),
        "hybrid_override_pattern": pattern,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "intermediate_size": config.d_ff,
        "mamba_num_heads": config.n_heads,
        "mamba_head_dim": config.d_inner // config.n_heads,
        "ssm_state_size": config.d_state,
        "n_groups": 1,
        "conv_kernel": config.conv_width,
        "max_position_embeddings": config.max_context,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        ENGINE_KEY: {"config": config.name, "seed": seed, "format": FORMAT},
    }


def tokenizer_json(config: ModelConfig) -> dict:
    """A `tokenizers` WordLevel tokenizer: whitespace-separated words `t0` .. `t<vocab-1>`."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "unk_token": "t0",
                  "vocab": {f"t{i}": i for i in range(config.vocab_size)}},
    }


def write_model_dir(root: Path, config: ModelConfig, seed: int) -> Path:
    """Write (or reuse) root/<model_path>; returns that directory."""
    path = root / model_path(config, seed)
    files = {
        "config.json": hf_config(config, seed),
        "tokenizer.json": tokenizer_json(config),
        "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast",
                                  "model_max_length": config.max_context},
    }
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = json.dumps(content, indent=1) + "\n"
        target = path / name
        if not target.exists() or target.read_text() != text:
            partial = target.with_name(f".{name}.{os.getpid()}")  # concurrent launches: atomic
            partial.write_text(text)
            os.replace(partial, target)
    return path


def engine_model(config_json: dict) -> tuple[str, int]:
    """The engine config name and weight seed a model directory was written for."""
    entry = config_json.get(ENGINE_KEY)
    if not isinstance(entry, dict) or "config" not in entry or "seed" not in entry:
        raise ValueError(f"config.json has no {ENGINE_KEY!r} entry: not a golden-replay model directory")
    return str(entry["config"]), int(entry["seed"])
