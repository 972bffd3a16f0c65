"""Choosing the next token: greedy, or seeded sampling as SGLang 0.5.23 defines it, exactly.

SGLang's rules (sampling/sampling_params.py, layers/sampler.py):
- `temperature` below 1e-6 means greedy (SGLang rewrites it to temperature 1, top_k 1); a request
  is greedy when top_k is 1. Greedy takes the lowest-id argmax of the raw log-softmax and reports
  those raw logprobs (SGLang's all-greedy batch).
- Otherwise the reported logprobs are log_softmax(logits / T) (what SGLang returns under
  `--enable-deterministic-inference`). probs = exp of them, sorted descending (ties: lower id
  first); top_k keeps ranks below top_k; top_p zeroes every prob whose preceding mass
  (cumsum - prob) exceeds top_p; min_p zeroes probs below the largest kept prob times min_p. One
  token is drawn from what is left by the Gumbel-max trick, with uniforms from a hash of
  (sampling_seed, position of the last input token, token id); the seed defaults to 42, as in
  SGLang's deterministic mode.
Invariant: the draw depends only on the request's own logits, parameters and position. Every step
is elementwise float32 math from `ExactMath`, a fixed scan (`exact.prefix_sum`), a sort or a
maximum, on the CPU, so a seeded conversation replays bit for bit with any batch, any cache and on
any machine. With temperature 1 the reported logprobs are the raw ones (x / 1 is exact), so they
equal the prompt logprobs a later prefill of the same tokens returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from replay.engine.exact import ExactMath, prefix_sum
from replay.engine.model import greedy

SAMPLING_EPS = 1e-6  # SGLang's _SAMPLING_EPS
DEFAULT_SEED = 42  # SGLang's seed for a request without one under deterministic inference
_MASK64 = (1 << 64) - 1
_UNIFORM_BITS = 23  # (k + 0.5) / 2^23 is exact in float32 and never 0 or 1


@dataclass(frozen=True)
class SamplingParams:
    """The sampling fields of one request, checked as SGLang's `SamplingParams.verify` does."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1  # -1: the whole vocabulary
    min_p: float = 0.0
    sampling_seed: int | None = None

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a non-negative finite number, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}")
        if self.sampling_seed is not None and not -(2**63) <= self.sampling_seed <= 2**63 - 1:
            raise ValueError(f"sampling_seed must be in [-2**63, 2**63 - 1], got {self.sampling_seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS or self.top_k == 1

    @property
    def seed(self) -> int:
        return DEFAULT_SEED if self.sampling_seed is None else self.sampling_seed


GREEDY = SamplingParams()


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic)."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(seed: int, position: int, token_ids: np.ndarray) -> np.ndarray:
    """float32 uniforms in (0, 1), one per token id, from a hash of (seed, position, id)."""
    key = _mix(np.asarray([seed & _MASK64], dtype=np.uint64))
    key = _mix(key ^ np.uint64(position & _MASK64))
    bits = _mix(key ^ token_ids.astype(np.uint64)) >> np.uint64(64 - _UNIFORM_BITS)
    return ((bits.astype(np.float64) + 0.5) / float(1 << _UNIFORM_BITS)).astype(np.float32)


class Sampler:
    """Draws tokens on the CPU with its own `ExactMath` (the model may live on another device)."""

    def __init__(self) -> None:
        self._math = ExactMath("cpu")

    def choose(self, logits: torch.Tensor, logprobs: torch.Tensor, params: SamplingParams,
               position: int) -> tuple[int, torch.Tensor]:
        """The next token and the logprobs to report for it (raw when greedy, else scaled by the
        temperature). `position` is the position of the last input token."""
        if params.greedy:
            return greedy(logprobs), logprobs
        m = self._math
        scaled = m.log_softmax(torch.div(logits.detach().cpu(), m.const(params.temperature)))
        probs, order = torch.sort(m.exp(scaled), descending=True, stable=True)
        keep = torch.ones_like(probs, dtype=torch.bool)
        if params.top_k != -1:
            keep[params.top_k:] = False
        if params.top_p < 1.0:
            keep &= ~((prefix_sum(probs) - probs) > m.const(params.top_p))
        if params.min_p > 0.0:
            keep &= ~(probs < probs[0] * m.const(params.min_p))
        candidates = order[keep]
        u = torch.from_numpy(uniforms(params.seed, position, candidates.numpy()))
        gumbel = torch.neg(m.log(torch.neg(m.log(u))))
        scores = scaled[candidates] + gumbel
        best = candidates[scores == torch.amax(scores)]
        return int(torch.min(best)), scaled
