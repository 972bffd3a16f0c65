"""Output top-k in the two forms SGLang 0.5.23 answers with: nested lists, or flat arrays.

With `return_flat_raw_output_top_logprobs` the finished response carries the top-k as flat
arrays instead of `output_top_logprobs` (tokenizer_manager's `_build_flat_top_logprobs_fields`):
`output_top_logprobs_val_flat` / `_idx_flat` (JSON lists) or, with
`return_flat_raw_top_logprobs_b64`, `_val_flat_b64` / `_idx_flat_b64` (base64 of little-endian
float32 / int32, with `_dtype` markers), plus `output_top_logprobs_shape = [rows, k]` and
`output_top_logprobs_null_prefix` (leading positions without top-k; 0 here). The engine's
logprobs are float32 values, so both forms carry the same bits.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np


def output_top_fields(rows: list[tuple[list[int], list[float]]], k: int, *, flat: bool,
                      b64: bool) -> dict[str, Any]:
    """The meta_info keys for the output top-k `rows` ([(ids, logprobs)] per position)."""
    if not flat:
        return {"output_top_logprobs": [[[lp, tok, None] for tok, lp in zip(ids, lps)]
                                        for ids, lps in rows]}
    width = len(rows[0][0]) if rows else k
    vals = np.array([lps for _, lps in rows], dtype=np.float32).reshape(len(rows), width)
    idx = np.array([ids for ids, _ in rows], dtype=np.int32).reshape(len(rows), width)
    fields: dict[str, Any] = {}
    if b64:
        fields["output_top_logprobs_val_flat_b64"] = base64.b64encode(vals.astype("<f4").tobytes()).decode()
        fields["output_top_logprobs_idx_flat_b64"] = base64.b64encode(idx.astype("<i4").tobytes()).decode()
        fields["output_top_logprobs_val_flat_b64_dtype"] = "float32"
        fields["output_top_logprobs_idx_flat_b64_dtype"] = "int32"
    else:
        fields["output_top_logprobs_val_flat"] = [v for _, lps in rows for v in lps]
        fields["output_top_logprobs_idx_flat"] = [t for ids, _ in rows for t in ids]
    fields["output_top_logprobs_shape"] = [len(rows), width]
    fields["output_top_logprobs_null_prefix"] = 0
    return fields
