"""The two token mixers of the hybrid model's layers, exact by construction (model.py's module
docstring): GQA attention with RoPE, and a Mamba2-like SSM (causal depthwise conv, silu, a gated
linear recurrence). A part of `HybridModel`: they use its `config`, exact math and weights.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from replay.engine.batch import AttnGroup, Batch, SSMState
from replay.engine.exact import F32, Workspace, linear, tree_sum_
from replay.engine.weights import AttnWeights, SSMWeights

ATTN_CHUNK_FACTOR = 4  # attention blocks may use 4x the chunk: fewer, larger ops per query block
ATTN_TRANSPOSE_ROWS = 16  # from this many query rows per kv head, transpose keys for the score tree


class Mixers:
    """Attention and SSM over a laid-out batch (`Batch`)."""

    # ------------------------------------------------------------------ attention

    def _attention(
        self,
        x: torch.Tensor,
        w: AttnWeights,
        batch: Batch,
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
        self, group: AttnGroup, pasts: list[tuple[torch.Tensor, torch.Tensor]], k: torch.Tensor, v: torch.Tensor
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
        group: AttnGroup,
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
        self, x: torch.Tensor, w: SSMWeights, batch: Batch, ssm_index: int, workspace: Workspace
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
        self, xs: torch.Tensor, w: SSMWeights, batch: Batch, ssm_index: int
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
        batch: Batch,
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
