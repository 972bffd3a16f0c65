"""Seeded weights of the hybrid model: the same bits on every machine and torch version.

Why numpy and not torch: `torch.randn` changes with the CPU capability (portable-math.md). Every
tensor gets its own `Generator(PCG64(SeedSequence([seed, crc32(name)])))`, draws
`random(dtype=float32)` (a documented bit-exact algorithm) and is scaled with float32 operations
only, so adding a tensor never shifts another tensor's numbers.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, fields

import numpy as np
import torch

from replay.engine.config import ModelConfig
from replay.engine.exact import rope_tables

ROPE_THETA = 10000.0


@dataclass(frozen=True)
class AttnWeights:
    norm: torch.Tensor  # [d_model]
    qkv: torch.Tensor  # [d_model, (n_heads + 2 * n_kv_heads) * head_dim]
    out: torch.Tensor  # [n_heads * head_dim, d_model]


@dataclass(frozen=True)
class SSMWeights:
    norm: torch.Tensor  # [d_model]
    in_proj: torch.Tensor  # [d_model, 2 * d_inner + 2 * d_state + n_heads]: x, z, B, C, g
    conv_weight: torch.Tensor  # [conv_width, d_inner]; row conv_width - 1 multiplies the newest input
    conv_bias: torch.Tensor  # [d_inner]
    gate_bias: torch.Tensor  # [n_heads]: decay a_t = sigmoid(g_t + gate_bias), input scale 1 - a_t
    skip: torch.Tensor  # [n_heads]: y += skip * x
    out: torch.Tensor  # [d_inner, d_model]


@dataclass(frozen=True)
class MLPWeights:
    norm: torch.Tensor  # [d_model]
    gate_up: torch.Tensor  # [d_model, 2 * d_ff]: silu(gate) * up
    down: torch.Tensor  # [d_ff, d_model]


@dataclass(frozen=True)
class LayerWeights:
    kind: str  # "attn" or "ssm"
    mixer: AttnWeights | SSMWeights
    mlp: MLPWeights


@dataclass(frozen=True)
class ModelWeights:
    embed: torch.Tensor  # [vocab, d_model]
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor  # [d_model]
    lm_head: torch.Tensor  # [d_model, vocab]
    rope_cos: torch.Tensor  # [max_context, head_dim // 2]
    rope_sin: torch.Tensor  # [max_context, head_dim // 2]

    def to(self, device: torch.device) -> "ModelWeights":
        return _map_tensors(self, lambda t: t.to(device))

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by a stable dotted name (for hashing and inspection)."""
        named: dict[str, torch.Tensor] = {}
        _collect(self, "", named)
        return named


def _map_tensors(obj, fn):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(_map_tensors(item, fn) for item in obj)
    if hasattr(obj, "__dataclass_fields__"):
        return type(obj)(**{f.name: _map_tensors(getattr(obj, f.name), fn) for f in fields(obj)})
    return obj


def _collect(obj, prefix: str, named: dict[str, torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        named[prefix] = obj
    elif isinstance(obj, tuple):
        for i, item in enumerate(obj):
            _collect(item, f"{prefix}.{i}", named)
    elif hasattr(obj, "__dataclass_fields__"):
        for f in fields(obj):
            _collect(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name, named)


class _Drawer:
    """Draws named float32 tensors, each from its own seeded stream."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
        """Uniform in [low, high): u * (high - low) + low in float32."""
        stream = np.random.SeedSequence([self.seed, zlib.crc32(name.encode())])
        u = np.random.Generator(np.random.PCG64(stream)).random(shape, dtype=np.float32)
        values = u * np.float32(high - low) + np.float32(low)
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))

    def symmetric(self, name: str, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        """Uniform in [-scale, scale): (2u - 1) * scale in float32."""
        stream = np.random.SeedSequence([self.seed, zlib.crc32(name.encode())])
        u = np.random.Generator(np.random.PCG64(stream)).random(shape, dtype=np.float32)
        values = (u * np.float32(2.0) - np.float32(1.0)) * np.float32(scale)
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


def _fan_in_scale(fan_in: int, gain: float = 1.0) -> float:
    """Uniform half-width giving unit output variance for unit-variance inputs, times gain."""
    return gain * math.sqrt(3.0 / fan_in)


def make_weights(config: ModelConfig, seed: int) -> ModelWeights:
    """All weights of `config` for `seed`, as CPU float32 tensors."""
    c = config
    draw = _Drawer(seed)
    residual_gain = 1.0 / math.sqrt(2 * len(c.layers))
    layers = []
    for i, kind in enumerate(c.layers):
        p = f"layers.{i}"
        if kind == "attn":
            mixer: AttnWeights | SSMWeights = AttnWeights(
                norm=draw.uniform(f"{p}.attn.norm", (c.d_model,), 0.9, 1.1),
                qkv=draw.symmetric(
                    f"{p}.attn.qkv",
                    (c.d_model, (c.n_heads + 2 * c.n_kv_heads) * c.head_dim),
                    _fan_in_scale(c.d_model),
                ),
                out=draw.symmetric(
                    f"{p}.attn.out",
                    (c.n_heads * c.head_dim, c.d_model),
                    _fan_in_scale(c.n_heads * c.head_dim, residual_gain),
                ),
            )
        else:
            mixer = SSMWeights(
                norm=draw.uniform(f"{p}.ssm.norm", (c.d_model,), 0.9, 1.1),
                in_proj=draw.symmetric(
                    f"{p}.ssm.in_proj",
                    (c.d_model, 2 * c.d_inner + 2 * c.d_state + c.n_heads),
                    _fan_in_scale(c.d_model),
                ),
                conv_weight=draw.symmetric(
                    f"{p}.ssm.conv_weight", (c.conv_width, c.d_inner), _fan_in_scale(c.conv_width)
                ),
                conv_bias=draw.symmetric(f"{p}.ssm.conv_bias", (c.d_inner,), 0.1),
                gate_bias=draw.uniform(f"{p}.ssm.gate_bias", (c.n_heads,), 1.5, 6.0),  # a ~ 0.8 .. 0.998
                skip=draw.uniform(f"{p}.ssm.skip", (c.n_heads,), 0.5, 1.5),
                out=draw.symmetric(
                    f"{p}.ssm.out", (c.d_inner, c.d_model), _fan_in_scale(c.d_inner, residual_gain)
                ),
            )
        mlp = MLPWeights(
            norm=draw.uniform(f"{p}.mlp.norm", (c.d_model,), 0.9, 1.1),
            gate_up=draw.symmetric(f"{p}.mlp.gate_up", (c.d_model, 2 * c.d_ff), _fan_in_scale(c.d_model)),
            down=draw.symmetric(
                f"{p}.mlp.down", (c.d_ff, c.d_model), _fan_in_scale(c.d_ff, residual_gain)
            ),
        )
        layers.append(LayerWeights(kind=kind, mixer=mixer, mlp=mlp))
    cos, sin = rope_tables(c.head_dim, c.max_context, ROPE_THETA)
    return ModelWeights(
        embed=draw.symmetric("embed", (c.vocab_size, c.d_model), 1.0),
        layers=tuple(layers),
        final_norm=draw.uniform("final_norm", (c.d_model,), 0.9, 1.1),
        lm_head=draw.symmetric("lm_head", (c.d_model, c.vocab_size), _fan_in_scale(c.d_model, 2.5)),
        rope_cos=torch.from_numpy(cos),
        rope_sin=torch.from_numpy(sin),
    )
