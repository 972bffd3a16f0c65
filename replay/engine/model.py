"""The embedded hybrid (attention + SSM) decoder, exact by construction.

Contract: a sequence's logprobs, new K/V and SSM states are bit-identical whatever other items
share a `forward` call and however its tokens are split across calls (with past K/V and SSM states
carried over, as a prefix-cache hit does). It holds because every operation is either row-wise
(linear layers via `exact.linear`, norms, elementwise math), per item (attention), or a fixed
sequential recurrence (SSM), and every reduction is a halving tree whose result does not depend on
zero padding (`exact.tree_sum_`). An item can ask for the logprobs after each of its last
`logprob_rows` tokens (prompt logprobs): the same row-wise lm-head and log-softmax, so a prompt
position scores exactly as a decode step at that position would. `k_splits > 1` exists only for
the split-k-by-extend fault and deliberately breaks the contract for that item's rows.

Layer: h += mixer(rms_norm(h)); h += mlp(rms_norm(h)), mixer = GQA attention with RoPE or a
Mamba2-like SSM (causal depthwise conv, silu, per-head gated decay a_t = sigmoid(g_t + bias),
h_t = a_t h_{t-1} + B_t (1 - a_t) x_t, y_t = C_t . h_t + D x_t, gated by silu(z)).
The mixers are replay/engine/mixers.py; a call's inputs, outputs and row layout replay/engine/batch.py.
"""

from __future__ import annotations

import math

import torch

from replay.engine.batch import Batch, BatchLayout, ForwardItem, ForwardResult, SSMState
from replay.engine.config import ModelConfig
from replay.engine.exact import F32, ExactMath, Workspace, linear, linear_split_k
from replay.engine.mixers import Mixers
from replay.engine.weights import MLPWeights, make_weights

CPU_CHUNK_ELEMS = 1 << 19  # 2 MiB of products: measured fastest on a 2-core EPYC (L2 512 KiB, L3 32 MiB)
CUDA_CHUNK_ELEMS = 1 << 27  # 512 MiB of products


class HybridModel(BatchLayout, Mixers):
    """Seeded hybrid decoder; `forward` is exact and batch/chunk invariant (module docstring)."""

    def __init__(self, config: ModelConfig, seed: int = 0, device: str = "cpu") -> None:
        self.config = config
        self.seed = seed
        self.device = torch.device(device)
        self._math = ExactMath(self.device)
        self._weights = make_weights(config, seed).to(self.device)
        self._chunk_elems = CUDA_CHUNK_ELEMS if self.device.type == "cuda" else CPU_CHUNK_ELEMS
        self._attn_scale = self._math.const(1.0 / math.sqrt(config.head_dim))
        per_head = config.d_inner // config.n_heads
        self._ssm_skip = [
            layer.mixer.skip.repeat_interleave(per_head) for layer in self._weights.layers if layer.kind == "ssm"
        ]

    @property
    def model_path(self) -> str:
        return f"embedded/hybrid-{self.config.name}@seed{self.seed}"

    def empty_ssm(self) -> list[SSMState]:
        c = self.config
        return [
            SSMState(
                conv=torch.zeros(c.conv_width - 1, c.d_inner, dtype=F32, device=self.device),
                h=torch.zeros(c.d_inner, c.d_state, dtype=F32, device=self.device),
            )
            for _ in range(c.ssm_layers)
        ]

    def forward(self, items: list[ForwardItem]) -> list[ForwardResult]:
        """Process each item's new tokens; see the module docstring for the exactness contract."""
        if not items:
            return []
        for index, item in enumerate(items):
            self._validate(index, item)
        all_tokens = torch.cat([item.tokens for item in items])
        if int(all_tokens.min()) < 0 or int(all_tokens.max()) >= self.config.vocab_size:
            raise ValueError(f"forward: token ids must be in [0, {self.config.vocab_size})")
        with torch.no_grad():
            return self._forward(items)

    # ------------------------------------------------------------------ orchestration

    def _forward(self, items: list[ForwardItem]) -> list[ForwardResult]:
        workspace = Workspace(self.device, self._chunk_elems)
        batch = self._layout(items, workspace)
        w = self._weights
        tokens = torch.cat([item.tokens for item in items]).to(self.device)
        hidden = w.embed[tokens]
        cos = w.rope_cos[batch.positions]
        sin = w.rope_sin[batch.positions]
        new_kv: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in items]
        new_ssm: list[list[SSMState]] = [[] for _ in items]
        attn_index = ssm_index = 0
        for layer in w.layers:
            x = self._math.rms_norm(hidden, layer.mixer.norm)
            if layer.kind == "attn":
                mixed, kvs = self._attention(x, layer.mixer, batch, attn_index, cos, sin, workspace)
                for per_item, kv in zip(new_kv, kvs):
                    per_item.append(kv)
                attn_index += 1
            else:
                mixed, states = self._ssm(x, layer.mixer, batch, ssm_index, workspace)
                for per_item, state in zip(new_ssm, states):
                    per_item.append(state)
                ssm_index += 1
            hidden = hidden + mixed
            hidden = hidden + self._mlp(self._math.rms_norm(hidden, layer.mlp.norm), layer.mlp, batch, workspace)
        wanted = [min(item.logprob_rows, n) for item, n in zip(items, batch.lengths)]
        rows = torch.tensor([r for o, n, k in zip(batch.offsets, batch.lengths, wanted)
                             for r in range(o + n - k, o + n)], device=self.device)
        logits = linear(self._math.rms_norm(hidden[rows], w.final_norm), w.lm_head, workspace)
        logprobs = self._math.log_softmax(logits).split(wanted)
        logits = logits.split(wanted)
        return [
            ForwardResult(logprobs=logprobs[i][-1], logits=logits[i][-1], row_logprobs=logprobs[i],
                          new_kv=new_kv[i], ssm=new_ssm[i])
            for i in range(len(items))
        ]

    def _validate(self, index: int, item: ForwardItem) -> None:
        c = self.config
        where = f"forward item {index}"
        if item.tokens.dim() != 1 or item.tokens.shape[0] < 1 or item.tokens.dtype != torch.int64:
            raise ValueError(f"{where}: tokens must be a non-empty 1-D int64 tensor")
        if item.logprob_rows < 1 or item.k_splits < 1:
            raise ValueError(f"{where}: logprob_rows and k_splits must be >= 1")
        if item.start < 0 or item.start + item.tokens.shape[0] > c.max_context:
            raise ValueError(
                f"{where}: positions {item.start}..{item.start + item.tokens.shape[0] - 1} "
                f"exceed max_context {c.max_context}"
            )
        if len(item.past_kv) != c.attn_layers or len(item.ssm) != c.ssm_layers:
            raise ValueError(
                f"{where}: need {c.attn_layers} past_kv pairs and {c.ssm_layers} SSM states, "
                f"got {len(item.past_kv)} and {len(item.ssm)}"
            )
        kv_shape = (item.start, c.n_kv_heads, c.head_dim)
        for k, v in item.past_kv:
            if tuple(k.shape) != kv_shape or tuple(v.shape) != kv_shape:
                raise ValueError(f"{where}: past K/V must be {kv_shape}, got {tuple(k.shape)}, {tuple(v.shape)}")
        conv_shape, h_shape = (c.conv_width - 1, c.d_inner), (c.d_inner, c.d_state)
        for state in item.ssm:
            if tuple(state.conv.shape) != conv_shape or tuple(state.h.shape) != h_shape:
                raise ValueError(f"{where}: SSM state must be conv {conv_shape}, h {h_shape}")

    # ------------------------------------------------------------------ MLP

    def _mlp(self, x: torch.Tensor, w: MLPWeights, batch: Batch, workspace: Workspace) -> torch.Tensor:
        gate_up = linear(x, w.gate_up, workspace)
        d_ff = self.config.d_ff
        act = self._math.silu(gate_up[:, :d_ff]).mul_(gate_up[:, d_ff:])
        out = linear(act, w.down, workspace)
        for item, offset, n in zip(batch.items, batch.offsets, batch.lengths):
            if item.k_splits > 1:
                out[offset : offset + n] = linear_split_k(act[offset : offset + n], w.down, item.k_splits)
        return out


def greedy(logprobs: torch.Tensor) -> int:
    """Index of the largest logprob; the lowest id among ties."""
    best = torch.amax(logprobs)
    return int(torch.nonzero(logprobs == best)[0, 0])


def top_k(logprobs: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
    """The k best (id, logprob) pairs, best first, ties broken by lower id; values as float64."""
    if k < 0:
        raise ValueError("k must be >= 0")
    values, ids = torch.sort(logprobs.detach().cpu(), descending=True, stable=True)
    k = min(k, logprobs.shape[0])
    return [int(i) for i in ids[:k]], [float(v) for v in values[:k]]
