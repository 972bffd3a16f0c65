"""What one forward call of the hybrid model takes and gives (`ForwardItem`, `ForwardResult`, the
SSM state carried between calls) and how its rows are laid out: `BatchLayout` builds every index
tensor the layers need once per call, with numpy (replay/engine/model.py's `HybridModel` is one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from replay.engine.exact import Workspace

ATTN_GROUP_QUERY_TOKENS = 64  # items of equal length attend together up to this many query tokens


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
class AttnGroup:
    """Items with the same number of new tokens T, attended together (a decode step: all items)."""

    items: list[int]
    starts: list[int]
    t_new: int
    rows: torch.Tensor  # int64 [B * T]: batch rows of the group's tokens, item-major
    key_batch: torch.Tensor  # int64 [B * T]: item slot of each new key
    key_pos: torch.Tensor  # int64 [B * T]: absolute position of each new key
    query_pos: torch.Tensor  # int64 [B, T * group]: position of each query row


@dataclass
class ScanBlock:
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
class Batch:
    """Row layout of one forward call, shared by all layers: item i owns rows
    offsets[i] : offsets[i] + lengths[i]; index tensors are built once, here."""

    items: list[ForwardItem]
    lengths: list[int]
    offsets: list[int]
    rows: int
    positions: torch.Tensor  # int64 [rows]
    attn_groups: list[AttnGroup]
    conv_index: torch.Tensor  # int64 [rows, conv_width] into [saved conv rows; new rows]
    conv_state_index: torch.Tensor  # int64 [items, conv_width - 1]: the new saved conv rows
    scan_order: list[int]  # items longest first
    scan_blocks: list[ScanBlock]


class BatchLayout:
    """The row layout of a forward call (a part of `HybridModel`: it needs `config`, `device`)."""

    def _layout(self, items: list[ForwardItem], workspace: Workspace) -> Batch:
        """Every index tensor the layers need, built once per call with numpy."""
        lengths = [int(item.tokens.shape[0]) for item in items]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        starts = [item.start for item in items]
        positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
        conv_index, conv_state_index = self._conv_indices(lengths, offsets)
        order = sorted(range(len(items)), key=lambda i: -lengths[i])
        return Batch(
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

    def _attn_groups(self, starts: list[int], lengths: list[int], offsets: np.ndarray) -> list[AttnGroup]:
        by_length: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            by_length.setdefault(n, []).append(i)
        groups = []
        for t_new, same_length in by_length.items():
            per_group = max(1, ATTN_GROUP_QUERY_TOKENS // t_new)
            for first in range(0, len(same_length), per_group):
                groups.append(self._attn_group(same_length[first : first + per_group], t_new, starts, offsets))
        return groups

    def _attn_group(self, members: list[int], t_new: int, starts: list[int], offsets: np.ndarray) -> AttnGroup:
        group_size = self.config.n_heads // self.config.n_kv_heads
        steps = np.arange(t_new)
        group_starts = np.asarray([starts[i] for i in members])
        return AttnGroup(
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

    def _scan_blocks(self, lengths: list[int], offsets: np.ndarray, workspace: Workspace) -> list[ScanBlock]:
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
                ScanBlock(
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
