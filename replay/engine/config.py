"""Shapes of the embedded hybrid (attention + SSM) reference model.

A config fixes every tensor shape; together with a seed it fixes every weight bit (see weights.py).
"""

from __future__ import annotations

from dataclasses import dataclass

LAYER_KINDS = ("attn", "ssm")


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of one model. SSM layers use `n_heads` heads for their step sizes (dt)."""

    name: str
    vocab_size: int
    d_model: int
    layers: tuple[str, ...]  # each "attn" or "ssm"
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    d_inner: int  # SSM channels
    d_state: int
    conv_width: int
    max_context: int  # positions covered by the RoPE table

    def __post_init__(self) -> None:
        problems = []
        if any(kind not in LAYER_KINDS for kind in self.layers):
            problems.append(f"layers must be 'attn' or 'ssm', got {self.layers}")
        if self.n_heads % self.n_kv_heads:
            problems.append("n_heads must be a multiple of n_kv_heads (GQA)")
        if self.head_dim % 2:
            problems.append("head_dim must be even (RoPE rotates pairs)")
        if self.d_inner % self.n_heads:
            problems.append("d_inner must be a multiple of n_heads (SSM step-size heads)")
        if self.conv_width < 1:
            problems.append("conv_width must be >= 1")
        if min(self.vocab_size, self.d_model, self.d_ff, self.d_state, self.max_context) < 1:
            problems.append("sizes must be positive")
        if problems:
            raise ValueError(f"invalid ModelConfig {self.name!r}: " + "; ".join(problems))

    @property
    def attn_layers(self) -> int:
        return sum(kind == "attn" for kind in self.layers)

    @property
    def ssm_layers(self) -> int:
        return sum(kind == "ssm" for kind in self.layers)

    @property
    def kv_bytes_per_token(self) -> int:
        """float32 K and V of one token over all attention layers."""
        return self.attn_layers * 2 * self.n_kv_heads * self.head_dim * 4


def _alternating(n_layers: int) -> tuple[str, ...]:
    return tuple("ssm" if i % 2 == 0 else "attn" for i in range(n_layers))


CONFIGS: dict[str, ModelConfig] = {
    config.name: config
    for config in (
        ModelConfig(
            name="tiny",
            vocab_size=4096,
            d_model=128,
            layers=_alternating(4),
            n_heads=2,
            n_kv_heads=1,
            head_dim=32,
            d_ff=128,
            d_inner=128,
            d_state=16,
            conv_width=4,
            max_context=4096,
        ),
        ModelConfig(
            name="small",
            vocab_size=16384,
            d_model=256,
            layers=_alternating(8),
            n_heads=8,
            n_kv_heads=2,
            head_dim=32,
            d_ff=768,
            d_inner=512,
            d_state=32,
            conv_width=4,
            max_context=8192,
        ),
        ModelConfig(
            name="medium",
            vocab_size=32768,
            d_model=512,
            layers=_alternating(12),
            n_heads=8,
            n_kv_heads=4,
            head_dim=64,
            d_ff=1536,
            d_inner=1024,
            d_state=64,
            conv_width=4,
            max_context=16384,
        ),
    )
}


def get_config(name: str) -> ModelConfig:
    """The named config; ValueError names the known ones."""
    try:
        return CONFIGS[name]
    except KeyError:
        known = ", ".join(sorted(CONFIGS))
        raise ValueError(f"unknown model config {name!r}; known configs: {known}") from None
