"""The embedded hybrid (attention + SSM) decoder, exact by construction.

Contract: a sequence's logprobs, new K/V and SSM states are bit-identical whatever other items
share a `forward` call and however its tokens are split across calls (with past K/V and SSM states
carried over, as a prefix-cache hit does). It holds because every operation is either row-wise
(linear layers via `exact.linear`, norms, elementwise math), per item (attention), or a fixed
sequential recurrence (SSM), and every reduction is a halving tree whose result does not depend on
zero padding (`exact.tree_sum_`).

Layer: h += mixer(rms_norm(h)); h += mlp(rms_norm(h)), mixer = GQA attention with RoPE or a
Mamba2-like SSM (causal depthwise conv, silu, per-head decay a_t = exp(-softplus(dt) * A),
h_t = a_t h_{t-1} + dt x_t B_t, y_t = C_t . h_t + D x_t, gated by silu(z)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from replay.engine.config import ModelConfig
from replay.engine.exact import F32, ExactMath, Workspace, linear, next_pow2, tree_sum_
from replay.engine.weights import AttnWeights, MLPWeights, SSMWeights, make_weights

CPU_CHUNK_ELEMS = 1 << 20  # 4 MiB of products: stays in cache, measured fastest on CPU
CUDA_CHUNK_ELEMS = 1 << 27  # 512 MiB of products


@dataclass
class SSMState:
    conv: torch.Tensor  # [conv_width - 1, d_inner] last inputs of the causal conv
    h: torch.Tensor  # [d_inner, d_state] recurrent state

    def clone(self) -> "SSMState":
        return SSMState(conv=self.conv.clone(), h=self.h.clone())


@dataclass
class ForwardItem:
    tokens: torch.Tensor  # int64 [T], T >= 1: the new tokens of one sequence
    start: int  # position of tokens[0] = tokens already processed
    past_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per attn layer: K, V [start, n_kv_heads, head_dim]
    ssm: list[SSMState]  # per ssm layer: state after `start` tokens


@dataclass
class ForwardResult:
    logprobs: torch.Tensor  # float32 [vocab]: log-softmax after the last new token
    new_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per attn layer: K, V [T, n_kv_heads, head_dim]
    ssm: list[SSMState]  # per ssm layer: state after start + T tokens


@dataclass
class _Batch:
    """Row layout of one forward call: item i owns rows offsets[i] : offsets[i] + lengths[i]."""

    items: list[ForwardItem]
    lengths: list[int]
    offsets: list[int]
    rows: int
    positions: torch.Tensor  # int64 [rows], absolute position of each row


class HybridModel:
    """Seeded hybrid decoder; `forward` is exact and batch/chunk invariant (module docstring)."""

    def __init__(self, config: ModelConfig, seed: int = 0, device: str = "cpu") -> None:
        self.config = config
        self.seed = seed
        self.device = torch.device(device)
        self._math = ExactMath(self.device)
        self._weights = make_weights(config, seed).to(self.device)
        self._chunk_elems = CUDA_CHUNK_ELEMS if self.device.type == "cuda" else CPU_CHUNK_ELEMS
        self._attn_scale = self._math.const(1.0 / math.sqrt(config.head_dim))
        self._ssm_channels_per_head = config.d_inner // config.n_heads

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
        with torch.no_grad():
            return self._forward(items)

    # ------------------------------------------------------------------ orchestration

    def _forward(self, items: list[ForwardItem]) -> list[ForwardResult]:
        batch = self._layout(items)
        w = self._weights
        workspace = Workspace(self.device, self._chunk_elems)
        tokens = torch.cat([item.tokens.to(self.device) for item in items])
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
            hidden = hidden + self._mlp(self._math.rms_norm(hidden, layer.mlp.norm), layer.mlp, workspace)
        last_rows = torch.tensor(
            [o + n - 1 for o, n in zip(batch.offsets, batch.lengths)], device=self.device
        )
        final = self._math.rms_norm(hidden[last_rows], w.final_norm)
        logprobs = self._math.log_softmax(linear(final, w.lm_head, workspace))
        return [
            ForwardResult(logprobs=logprobs[i].clone(), new_kv=new_kv[i], ssm=new_ssm[i])
            for i in range(len(items))
        ]

    def _layout(self, items: list[ForwardItem]) -> _Batch:
        lengths = [int(item.tokens.shape[0]) for item in items]
        offsets = []
        total = 0
        for n in lengths:
            offsets.append(total)
            total += n
        positions = torch.cat(
            [torch.arange(item.start, item.start + n, dtype=torch.int64) for item, n in zip(items, lengths)]
        ).to(self.device)
        return _Batch(items=items, lengths=lengths, offsets=offsets, rows=total, positions=positions)

    def _validate(self, index: int, item: ForwardItem) -> None:
        c = self.config
        where = f"forward item {index}"
        if item.tokens.dim() != 1 or item.tokens.shape[0] < 1 or item.tokens.dtype != torch.int64:
            raise ValueError(f"{where}: tokens must be a non-empty 1-D int64 tensor")
        if item.start < 0 or item.start + item.tokens.shape[0] > c.max_context:
            raise ValueError(
                f"{where}: positions {item.start}..{item.start + item.tokens.shape[0] - 1} "
                f"exceed max_context {c.max_context}"
            )
        low, high = int(item.tokens.min()), int(item.tokens.max())
        if low < 0 or high >= c.vocab_size:
            raise ValueError(f"{where}: token ids must be in [0, {c.vocab_size})")
        if len(item.past_kv) != c.attn_layers or len(item.ssm) != c.ssm_layers:
            raise ValueError(
                f"{where}: need {c.attn_layers} past_kv pairs and {c.ssm_layers} SSM states, "
                f"got {len(item.past_kv)} and {len(item.ssm)}"
            )
        kv_shape = (item.start, c.n_kv_heads, c.head_dim)
        for k, v in item.past_kv:
            if tuple(k.shape) != kv_shape or tuple(v.shape) != kv_shape:
                raise ValueError(f"{where}: past K/V must be {kv_shape}, got {tuple(k.shape)}, {tuple(v.shape)}")
        for state in item.ssm:
            if tuple(state.conv.shape) != (c.conv_width - 1, c.d_inner) or tuple(state.h.shape) != (
                c.d_inner,
                c.d_state,
            ):
                raise ValueError(f"{where}: SSM state has the wrong shape")

    # ------------------------------------------------------------------ MLP

    def _mlp(self, x: torch.Tensor, w: MLPWeights, workspace: Workspace) -> torch.Tensor:
        gate_up = linear(x, w.gate_up, workspace)
        d_ff = self.config.d_ff
        act = self._math.silu(gate_up[:, :d_ff]) * gate_up[:, d_ff:]
        return linear(act, w.down, workspace)

    # ------------------------------------------------------------------ attention

    def _attention(
        self,
        x: torch.Tensor,
        w: AttnWeights,
        batch: _Batch,
        attn_index: int,
        cos: torch.Tensor,
        sin: torch.Tensor,
        workspace: Workspace,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        c = self.config
        qkv = linear(x, w.qkv, workspace)
        q_width = c.n_heads * c.head_dim
        kv_width = c.n_kv_heads * c.head_dim
        q = self._rope(qkv[:, :q_width].reshape(batch.rows, c.n_heads, c.head_dim), cos, sin)
        k = self._rope(qkv[:, q_width : q_width + kv_width].reshape(batch.rows, c.n_kv_heads, c.head_dim), cos, sin)
        v = qkv[:, q_width + kv_width :].reshape(batch.rows, c.n_kv_heads, c.head_dim)
        out = torch.empty(batch.rows, q_width, dtype=F32, device=self.device)
        kvs = []
        for item, offset, length in zip(batch.items, batch.offsets, batch.lengths):
            rows = slice(offset, offset + length)
            k_new, v_new = k[rows].clone(), v[rows].clone()
            past_k, past_v = item.past_kv[attn_index]
            k_all = torch.cat([past_k.to(self.device), k_new])
            v_all = torch.cat([past_v.to(self.device), v_new])
            out[rows] = self._attend(q[rows], k_all, v_all, item.start, workspace)
            kvs.append((k_new, v_new))
        return linear(out, w.out, workspace), kvs

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate-half RoPE: [x1 c - x2 s, x2 c + x1 s] with per-row tables."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def _attend(
        self, q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, start: int, workspace: Workspace
    ) -> torch.Tensor:
        """Causal GQA attention of one item's T queries over its start + T keys -> [T, n_heads * hd].

        Query blocks only touch the keys they can see (bits do not depend on that: tree sums over
        keys are padding-invariant and masked keys contribute exact zeros).
        """
        c = self.config
        m = self._math
        t_new = q.shape[0]
        kv_heads, group, hd = c.n_kv_heads, c.n_heads // c.n_kv_heads, c.head_dim
        # row r of a kv head's query block is (token r // group, head kv * group + r % group)
        qg = q.reshape(t_new, kv_heads, group, hd).permute(1, 0, 2, 3).reshape(kv_heads, t_new * group, hd)
        keys_t = k_all.permute(1, 2, 0).contiguous()  # [kv, hd, L]
        values = v_all.permute(1, 0, 2).contiguous()  # [kv, L, hd]
        out = torch.empty(kv_heads, t_new * group, hd, dtype=F32, device=self.device)
        key_index = torch.arange(start + t_new, device=self.device)
        query_pos = torch.arange(start, start + t_new, device=self.device).repeat_interleave(group)
        tokens_per_block = max(1, workspace.chunk_elems // (kv_heads * group * hd * (start + t_new)))
        for t0 in range(0, t_new, tokens_per_block):
            t1 = min(t_new, t0 + tokens_per_block)
            r0, r1 = t0 * group, t1 * group
            n_keys = start + t1
            products = workspace.take(kv_heads, r1 - r0, hd, n_keys)
            torch.mul(qg[:, r0:r1, :, None], keys_t[:, None, :, :n_keys], out=products)
            scores = tree_sum_(products, 2) * self._attn_scale  # [kv, rows, keys]
            visible = key_index[None, :n_keys] <= query_pos[r0:r1, None]  # [rows, keys]
            top = torch.amax(torch.where(visible, scores, m.neg_inf), dim=-1, keepdim=True)
            weights = torch.where(visible, m.exp(scores - top), m.zero)
            denom = tree_sum_(weights.clone(), -1)  # [kv, rows]
            products = workspace.take(kv_heads, r1 - r0, n_keys, hd)
            torch.mul(weights[..., None], values[:, None, :n_keys, :], out=products)
            numer = m.canonical_zero(tree_sum_(products, 2))  # [kv, rows, hd]
            out[:, r0:r1] = numer / denom[..., None]
        return out.reshape(kv_heads, t_new, group, hd).permute(1, 0, 2, 3).reshape(t_new, c.n_heads * hd)

    # ------------------------------------------------------------------ SSM

    def _ssm(
        self, x: torch.Tensor, w: SSMWeights, batch: _Batch, ssm_index: int, workspace: Workspace
    ) -> tuple[torch.Tensor, list[SSMState]]:
        c = self.config
        m = self._math
        di, ds = c.d_inner, c.d_state
        proj = linear(x, w.in_proj, workspace)
        xs, z = proj[:, :di], proj[:, di : 2 * di]
        b_in, c_out = proj[:, 2 * di : 2 * di + ds], proj[:, 2 * di + ds : 2 * di + 2 * ds]
        dt_raw = proj[:, 2 * di + 2 * ds :]
        conv_out, conv_states = self._causal_conv(xs, w, batch, ssm_index)
        xc = m.silu(conv_out)
        dt = m.softplus(dt_raw + w.dt_bias)  # [rows, heads]
        decay = m.exp(torch.neg(dt * w.decay_rate))  # in (0, 1]
        per_head = self._ssm_channels_per_head
        dt_x = dt.repeat_interleave(per_head, dim=1) * xc  # [rows, d_inner]
        decay = decay.repeat_interleave(per_head, dim=1)
        y, h_states = self._scan(dt_x, decay, b_in, c_out, batch, ssm_index, workspace)
        y = y + w.skip.repeat_interleave(per_head) * xc
        y = y * m.silu(z)
        states = [SSMState(conv=conv, h=h) for conv, h in zip(conv_states, h_states)]
        return linear(y, w.out, workspace), states

    def _causal_conv(
        self, xs: torch.Tensor, w: SSMWeights, batch: _Batch, ssm_index: int
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Depthwise causal conv over each item's [saved inputs; new inputs], all rows at once."""
        width = self.config.conv_width
        pieces, window_starts, bases = [], [], []
        base = 0
        for item, offset, length in zip(batch.items, batch.offsets, batch.lengths):
            pieces += [item.ssm[ssm_index].conv.to(self.device), xs[offset : offset + length]]
            window_starts.append(torch.arange(base, base + length, device=self.device))
            bases.append(base)
            base += width - 1 + length
        history = torch.cat(pieces)  # per item: width-1 saved rows, then its new rows
        index = torch.cat(window_starts)[:, None] + torch.arange(width, device=self.device)[None, :]
        products = history[index] * w.conv_weight[None]  # [rows, width, d_inner]
        out = tree_sum_(products, 1) + w.conv_bias
        states = [
            history[b + length : b + length + width - 1].clone() for b, length in zip(bases, batch.lengths)
        ]
        return out, states

    def _scan(
        self,
        dt_x: torch.Tensor,
        decay: torch.Tensor,
        b_in: torch.Tensor,
        c_out: torch.Tensor,
        batch: _Batch,
        ssm_index: int,
        workspace: Workspace,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """h_t = decay_t * h_{t-1} + B_t (dt x)_t step by step; y_t = tree_sum_s C_t[s] h_t[s].

        Items advance together one time step per op (longest first, so the active items are always
        a prefix); states are kept as [d_state, d_inner] so every op is a contiguous vector op.
        """
        di, ds = self.config.d_inner, self.config.d_state
        order = sorted(range(len(batch.items)), key=lambda i: -batch.lengths[i])
        lengths = [batch.lengths[i] for i in order]
        offsets = torch.tensor([batch.offsets[i] for i in order], device=self.device)
        lengths_t = torch.tensor(lengths, device=self.device)
        state = torch.stack([batch.items[i].ssm[ssm_index].h.to(self.device).t() for i in order])
        y = torch.empty(batch.rows, di, dtype=F32, device=self.device)
        steps_total = lengths[0]
        active_at = [sum(n > t for n in lengths) for t in range(steps_total)]
        t0 = 0
        while t0 < steps_total:
            n_block = active_at[t0]
            steps = min(steps_total - t0, max(1, workspace.chunk_elems // (2 * n_block * ds * di)))
            t_index = torch.arange(t0, t0 + steps, device=self.device)[:, None]
            live = t_index < lengths_t[None, :n_block]  # [steps, items]
            rows = offsets[None, :n_block] + torch.minimum(t_index, lengths_t[None, :n_block] - 1)
            u = b_in[rows][..., :, None] * dt_x[rows][..., None, :]  # [steps, items, ds, di]
            a = decay[rows][..., None, :]  # [steps, items, 1, di]
            hs = workspace.take(steps, n_block, ds, di)
            prev = state[:n_block]
            for t in range(steps):
                n = active_at[t0 + t]
                torch.mul(a[t, :n], prev[:n], out=hs[t, :n])
                hs[t, :n].add_(u[t, :n])
                prev = hs[t]
            last = torch.minimum(lengths_t[:n_block], torch.tensor(t0 + steps, device=self.device)) - 1 - t0
            state[:n_block] = hs[last, torch.arange(n_block, device=self.device)]
            y_block = tree_sum_(c_out[rows][..., :, None] * hs, 2)  # [steps, items, di]
            y[rows[live]] = y_block[live]
            t0 += steps
        h_states: list[torch.Tensor] = [torch.empty(0)] * len(order)
        for slot, i in enumerate(order):
            h_states[i] = state[slot].t().contiguous()  # [d_inner, d_state]
        return y, h_states


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
