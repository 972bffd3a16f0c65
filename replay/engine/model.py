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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from replay.engine.config import ModelConfig
from replay.engine.exact import F32, ExactMath, Workspace, linear, linear_split_k, tree_sum_
from replay.engine.weights import AttnWeights, MLPWeights, SSMWeights, make_weights

CPU_CHUNK_ELEMS = 1 << 19  # 2 MiB of products: measured fastest on a 2-core EPYC (L2 512 KiB, L3 32 MiB)
CUDA_CHUNK_ELEMS = 1 << 27  # 512 MiB of products
ATTN_CHUNK_FACTOR = 4  # attention blocks may use 4x the chunk: fewer, larger ops per query block
ATTN_GROUP_QUERY_TOKENS = 64  # items of equal length attend together up to this many query tokens
ATTN_TRANSPOSE_ROWS = 16  # from this many query rows per kv head, transpose keys for the score tree


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
    logprob_rows: int = 1  # trailing new tokens whose next-token logprobs are wanted (prompt logprobs)
    k_splits: int = 1  # > 1: the MLP down projection of these tokens reduces split-K (a fault)


@dataclass
class ForwardResult:
    logprobs: torch.Tensor  # float32 [vocab]: log-softmax after the last new token
    logits: torch.Tensor  # float32 [vocab]: the raw logits after the last new token
    row_logprobs: torch.Tensor  # float32 [logprob_rows, vocab]: log-softmax after each wanted token
    new_kv: list[tuple[torch.Tensor, torch.Tensor]]  # per attn layer: K, V [T, n_kv_heads, head_dim]
    ssm: list[SSMState]  # per ssm layer: state after start + T tokens


@dataclass
class _AttnGroup:
    """Items with the same number of new tokens T, attended together (a decode step: all items)."""

    items: list[int]
    starts: list[int]
    t_new: int
    rows: torch.Tensor  # int64 [B * T]: batch rows of the group's tokens, item-major
    key_batch: torch.Tensor  # int64 [B * T]: item slot of each new key
    key_pos: torch.Tensor  # int64 [B * T]: absolute position of each new key
    query_pos: torch.Tensor  # int64 [B, T * group]: position of each query row


@dataclass
class _ScanBlock:
    """A run of time steps of the SSM recurrence over the items still active at its first step."""

    t0: int
    steps: int
    n_items: int
    active: list[int]  # items still running at each step (a prefix of the longest-first order)
    rows: torch.Tensor  # int64 [steps, n_items]: batch row of (step, item), clamped to its last
    live: torch.Tensor  # bool [steps, n_items]: the step exists for that item
    live_rows: torch.Tensor  # int64: rows[live]
    last_step: torch.Tensor  # int64 [n_items]: each item's last step within this block


@dataclass
class _Batch:
    """Row layout of one forward call, shared by all layers: item i owns rows
    offsets[i] : offsets[i] + lengths[i]; index tensors are built once, here."""

    items: list[ForwardItem]
    lengths: list[int]
    offsets: list[int]
    rows: int
    positions: torch.Tensor  # int64 [rows]
    attn_groups: list[_AttnGroup]
    conv_index: torch.Tensor  # int64 [rows, conv_width] into [saved conv rows; new rows]
    conv_state_index: torch.Tensor  # int64 [items, conv_width - 1]: the new saved conv rows
    scan_order: list[int]  # items longest first
    scan_blocks: list[_ScanBlock]


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

    def _layout(self, items: list[ForwardItem], workspace: Workspace) -> _Batch:
        """Every index tensor the layers need, built once per call with numpy."""
        lengths = [int(item.tokens.shape[0]) for item in items]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        starts = [item.start for item in items]
        positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
        conv_index, conv_state_index = self._conv_indices(lengths, offsets)
        order = sorted(range(len(items)), key=lambda i: -lengths[i])
        return _Batch(
            items=items,
            lengths=lengths,
            offsets=[int(o) for o in offsets],
            rows=int(sum(lengths)),
            positions=self._index(positions),
            attn_groups=self._attn_groups(starts, lengths, offsets),
            conv_index=self._index(conv_index),
            conv_state_index=self._index(conv_state_index),
            scan_order=order,
            scan_blocks=self._scan_blocks([lengths[i] for i in order], offsets[order], workspace),
        )

    def _index(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64)).to(self.device)

    def _attn_groups(self, starts: list[int], lengths: list[int], offsets: np.ndarray) -> list[_AttnGroup]:
        by_length: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            by_length.setdefault(n, []).append(i)
        groups = []
        for t_new, same_length in by_length.items():
            per_group = max(1, ATTN_GROUP_QUERY_TOKENS // t_new)
            for first in range(0, len(same_length), per_group):
                groups.append(self._attn_group(same_length[first : first + per_group], t_new, starts, offsets))
        return groups

    def _attn_group(self, members: list[int], t_new: int, starts: list[int], offsets: np.ndarray) -> _AttnGroup:
        group_size = self.config.n_heads // self.config.n_kv_heads
        steps = np.arange(t_new)
        group_starts = np.asarray([starts[i] for i in members])
        return _AttnGroup(
            items=members,
            starts=[starts[i] for i in members],
            t_new=t_new,
            rows=self._index((offsets[members][:, None] + steps[None, :]).reshape(-1)),
            key_batch=self._index(np.repeat(np.arange(len(members)), t_new)),
            key_pos=self._index((group_starts[:, None] + steps[None, :]).reshape(-1)),
            query_pos=self._index(group_starts[:, None] + np.repeat(steps, group_size)[None, :]),
        )

    def _conv_indices(self, lengths: list[int], offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of [saved conv inputs of all items (width-1 each); new rows] for every conv window.

        Relative position s < 0 of item b is its saved row b*(width-1) + (width-1) + s; s >= 0 is
        its new row offsets[b] + s.
        """
        saved = self.config.conv_width - 1
        n_saved = saved * len(lengths)

        def source(item: int, rel: np.ndarray) -> np.ndarray:
            return np.where(rel < 0, item * saved + saved + rel, n_saved + offsets[item] + rel)

        taps = np.arange(saved + 1) - saved  # window of new token t: t + taps
        windows = [source(b, np.arange(n)[:, None] + taps[None, :]) for b, n in enumerate(lengths)]
        state = [source(b, n + np.arange(-saved, 0)) for b, n in enumerate(lengths)]
        return np.concatenate(windows), np.stack(state) if saved else np.zeros((len(lengths), 0))

    def _scan_blocks(self, lengths: list[int], offsets: np.ndarray, workspace: Workspace) -> list[_ScanBlock]:
        """Time blocks of the SSM scan (items sorted longest first, so the active ones are a prefix)."""
        c = self.config
        lengths_np = np.asarray(lengths)
        active_at = (lengths_np[None, :] > np.arange(lengths[0])[:, None]).sum(axis=1).tolist()
        blocks = []
        t0 = 0
        while t0 < lengths[0]:
            n_items = active_at[t0]
            steps = min(lengths[0] - t0, max(1, workspace.chunk_elems // (n_items * c.d_state * c.d_inner)))
            t = np.arange(t0, t0 + steps)[:, None]
            item_lengths = lengths_np[None, :n_items]
            rows = offsets[None, :n_items] + np.minimum(t, item_lengths - 1)
            live = t < item_lengths
            blocks.append(
                _ScanBlock(
                    t0=t0,
                    steps=steps,
                    n_items=n_items,
                    active=active_at[t0 : t0 + steps],
                    rows=self._index(rows),
                    live=torch.from_numpy(live).to(self.device),
                    live_rows=self._index(rows[live]),
                    last_step=self._index(np.minimum(lengths_np[:n_items], t0 + steps) - 1 - t0),
                )
            )
            t0 += steps
        return blocks

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

    def _mlp(self, x: torch.Tensor, w: MLPWeights, batch: _Batch, workspace: Workspace) -> torch.Tensor:
        gate_up = linear(x, w.gate_up, workspace)
        d_ff = self.config.d_ff
        act = self._math.silu(gate_up[:, :d_ff]).mul_(gate_up[:, d_ff:])
        out = linear(act, w.down, workspace)
        for item, offset, n in zip(batch.items, batch.offsets, batch.lengths):
            if item.k_splits > 1:
                out[offset : offset + n] = linear_split_k(act[offset : offset + n], w.down, item.k_splits)
        return out

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
        v = qkv[:, q_width + kv_width :].reshape(batch.rows, c.n_kv_heads, c.head_dim).contiguous()
        kvs = list(zip(k.split(batch.lengths), v.split(batch.lengths)))
        out = torch.empty(batch.rows, q_width, dtype=F32, device=self.device)
        for group in batch.attn_groups:
            queries = q[group.rows].reshape(len(group.items), group.t_new, c.n_heads, c.head_dim)
            keys, values = self._group_keys(group, [batch.items[i].past_kv[attn_index] for i in group.items], k, v)
            attended = self._attend(queries, keys, values, group, workspace)
            out[group.rows] = attended.reshape(-1, q_width)
        return linear(out, w.out, workspace), kvs

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate-half RoPE: [x1 c - x2 s, x2 c + x1 s] with per-row tables."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([(x1 * c).sub_(x2 * s), (x2 * c).add_(x1 * s)], dim=-1)

    def _group_keys(
        self, group: _AttnGroup, pasts: list[tuple[torch.Tensor, torch.Tensor]], k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys [B, kv, L, hd] and values with a ones column [B, kv, L, hd + 1], zero-padded to the
        longest item. The ones column makes the value tree also sum the softmax denominator."""
        c = self.config
        n_keys = max(group.starts) + group.t_new
        filler = torch.zeros(n_keys, c.n_kv_heads, c.head_dim, dtype=F32, device=self.device)
        keys = pad_sequence([past_k.to(self.device) for past_k, _ in pasts] + [filler], batch_first=True)[:-1]
        values = pad_sequence([past_v.to(self.device) for _, past_v in pasts] + [filler], batch_first=True)[:-1]
        keys[group.key_batch, group.key_pos] = k[group.rows]
        values[group.key_batch, group.key_pos] = v[group.rows]
        ones = torch.ones(len(pasts), n_keys, c.n_kv_heads, 1, dtype=F32, device=self.device)
        values = torch.cat([values, ones], dim=-1)
        return keys.transpose(1, 2).contiguous(), values.transpose(1, 2).contiguous()

    def _attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        group: _AttnGroup,
        workspace: Workspace,
    ) -> torch.Tensor:
        """Causal GQA attention of B items' T queries [B, T, heads, hd] -> [B, T, heads * hd].

        Query token t of item b sees keys 0 .. starts[b] + t. Keys beyond that (later tokens of
        the chunk, or padding up to the longest item) get weight exactly 0, and query blocks only
        touch the keys they can see: the bits do not depend on either, because tree sums over
        keys are padding-invariant (exact.tree_sum_, ExactMath.canonical_zero).
        """
        c = self.config
        m = self._math
        batch, t_new = queries.shape[0], queries.shape[1]
        kv_heads, group_size, hd = c.n_kv_heads, c.n_heads // c.n_kv_heads, c.head_dim
        # row r of a kv head is (token r // group_size, query head kv * group_size + r % group_size)
        qg = queries.reshape(batch, t_new, kv_heads, group_size, hd).permute(0, 2, 1, 3, 4)
        qg = qg.reshape(batch, kv_heads, t_new * group_size, hd)
        total_keys = keys.shape[2]
        keys_t = keys.transpose(2, 3).contiguous() if t_new * group_size >= ATTN_TRANSPOSE_ROWS else None
        out = torch.empty(batch, kv_heads, t_new * group_size, hd, dtype=F32, device=self.device)
        key_index = torch.arange(total_keys, device=self.device)
        per_token = batch * kv_heads * group_size * (hd + 1) * total_keys
        tokens_per_block = max(1, ATTN_CHUNK_FACTOR * workspace.chunk_elems // per_token)
        for t0 in range(0, t_new, tokens_per_block):
            t1 = min(t_new, t0 + tokens_per_block)
            r0, r1 = t0 * group_size, t1 * group_size
            n_keys = min(total_keys, max(group.starts) + t1)
            if keys_t is None:  # few query rows: keys as they are, the tree runs over the last axis
                products = workspace.take(batch, kv_heads, r1 - r0, n_keys, hd)
                torch.mul(qg[:, :, r0:r1, None, :], keys[:, :, None, :n_keys, :], out=products)
                scores = tree_sum_(products, 4).mul(self._attn_scale)  # [B, kv, rows, keys]
            else:  # many rows: transposed keys keep every tree level a contiguous vector add
                products = workspace.take(batch, kv_heads, r1 - r0, hd, n_keys)
                torch.mul(qg[:, :, r0:r1, :, None], keys_t[:, :, None, :, :n_keys], out=products)
                scores = tree_sum_(products, 3).mul(self._attn_scale)  # [B, kv, rows, keys]
            hidden = (key_index[None, None, :n_keys] > group.query_pos[:, r0:r1, None]).unsqueeze(1)
            top = torch.amax(scores.masked_fill(hidden, float("-inf")), dim=-1, keepdim=True)
            weights = m.exp(scores.sub_(top)).masked_fill_(hidden, 0.0)
            products = workspace.take(batch, kv_heads, r1 - r0, n_keys, hd + 1)
            torch.mul(weights[..., None], values[:, :, None, :n_keys, :], out=products)
            sums = m.canonical_zero(tree_sum_(products, 3))  # [B, kv, rows, hd + 1]
            torch.div(sums[..., :hd], sums[..., hd:], out=out[:, :, r0:r1])
        out = out.reshape(batch, kv_heads, t_new, group_size, hd).permute(0, 2, 1, 3, 4)
        return out.reshape(batch, t_new, c.n_heads * hd)

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
        gate_raw = proj[:, 2 * di + 2 * ds :]
        conv_out, conv_states = self._causal_conv(xs, w, batch, ssm_index)
        # one exp for silu(conv), silu(z) and sigmoid(g + bias): x / (1 + e^-x) and 1 / (1 + e^-x)
        pre = torch.cat([conv_out, z, gate_raw + w.gate_bias], dim=1)
        denominator = m.logistic_denominator(pre)
        xc, gate = (pre[:, : 2 * di] / denominator[:, : 2 * di]).split(di, dim=1)
        keep = m.one / denominator[:, 2 * di :]  # decay a_t in (0, 1), per head
        per_head = c.d_inner // c.n_heads
        inject = (m.one - keep).repeat_interleave(per_head, dim=1).mul_(xc)  # (1 - a_t) x_t
        decay = keep.repeat_interleave(per_head, dim=1)
        y, h_states = self._scan(inject, decay, b_in, c_out, batch, ssm_index, workspace)
        y = y.add_(self._ssm_skip[ssm_index] * xc).mul_(gate)
        states = [SSMState(conv=conv, h=h) for conv, h in zip(conv_states, h_states)]
        return linear(y, w.out, workspace), states

    def _causal_conv(
        self, xs: torch.Tensor, w: SSMWeights, batch: _Batch, ssm_index: int
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Depthwise causal conv over each item's [saved inputs; new inputs], all rows at once."""
        saved = torch.stack([item.ssm[ssm_index].conv.to(self.device) for item in batch.items])
        history = torch.cat([saved.reshape(-1, self.config.d_inner), xs])
        products = history[batch.conv_index].mul_(w.conv_weight[None])  # [rows, width, d_inner]
        out = tree_sum_(products, 1).add(w.conv_bias)
        return out, history[batch.conv_state_index].unbind(0)

    def _scan(
        self,
        inject: torch.Tensor,
        decay: torch.Tensor,
        b_in: torch.Tensor,
        c_out: torch.Tensor,
        batch: _Batch,
        ssm_index: int,
        workspace: Workspace,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """h_t = decay_t * h_{t-1} + B_t inject_t step by step; y_t = tree_sum_s C_t[s] h_t[s].

        Items advance together one time step per op (longest first, so the active items are always
        a prefix); states are kept as [d_state, d_inner] so every op is a contiguous vector op.
        """
        di, ds = self.config.d_inner, self.config.d_state
        order = batch.scan_order
        state = torch.stack([batch.items[i].ssm[ssm_index].h.to(self.device) for i in order])
        state = state.transpose(1, 2).contiguous()  # [items, d_state, d_inner]
        y = torch.empty(batch.rows, di, dtype=F32, device=self.device)
        for block in batch.scan_blocks:
            n_block = block.n_items
            u = b_in[block.rows][..., :, None] * inject[block.rows][..., None, :]  # [steps, items, ds, di]
            a = decay[block.rows][..., None, :]  # [steps, items, 1, di]
            hs = workspace.take(block.steps, n_block, ds, di)
            prev = state[:n_block]
            for t, n in enumerate(block.active):
                step = hs[t, :n]
                torch.mul(a[t, :n], prev[:n], out=step)
                step.add_(u[t, :n])
                prev = hs[t]
            state[:n_block] = hs[block.last_step, torch.arange(n_block, device=self.device)]
            y_block = tree_sum_(c_out[block.rows][..., :, None] * hs, 2)  # [steps, items, di]
            y[block.live_rows] = y_block[block.live]
        by_slot = state.transpose(1, 2).contiguous().unbind(0)  # [d_inner, d_state] each
        h_states: list[torch.Tensor] = [by_slot[0]] * len(order)
        for slot, i in enumerate(order):
            h_states[i] = by_slot[slot]
        return y, tuple(h_states)


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
