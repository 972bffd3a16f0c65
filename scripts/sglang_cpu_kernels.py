"""The two CPU kernel facts behind the findings on SGLang's real CPU server (docs/findings.md,
"SGLang's real server on a CPU"), measured with torch alone, in the calls SGLang 0.5.23's
torch_native attention backend and its plain-torch linear layers make:

1. attention: a decode step computes row i as `scaled_dot_product_attention(q[i:i+1], K[:i+1],
   V[:i+1], is_causal=False)`; a prefill (extend) computes the same row inside one causal call
   over the whole square (`is_causal=True`, torch_native_backend.py `_run_sdpa_forward_extend`).
   Counted: rows whose outputs differ in any bit.
2. linear: row 0 of `x @ W.T` computed with M = 1 row vs inside a batch of M rows.

    python scripts/sglang_cpu_kernels.py [--threads 1]   # prints one line per measurement

Shapes: the tiny Llama of replay/sglang_cpu/tiny_model.py (4 query heads, 2 KV heads of 64,
hidden 256, intermediate 512), sequences of 768 tokens, inputs N(0, 1) from seed 0.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

HEADS, KV_HEADS, DIM, SEQ = 4, 2, 64, 768
HIDDEN, INTER = 256, 512


def sdpa_rows_differing(dtype: torch.dtype, rows: range) -> tuple[int, int]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(HEADS, SEQ, DIM, generator=gen).to(dtype)
    k = torch.randn(KV_HEADS, SEQ, DIM, generator=gen).to(dtype)
    v = torch.randn(KV_HEADS, SEQ, DIM, generator=gen).to(dtype)
    scale = DIM ** -0.5
    prefill = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True,
                                             enable_gqa=True, scale=scale)[0]
    differing = 0
    for i in rows:
        decode = F.scaled_dot_product_attention(q[None, :, i:i + 1], k[None, :, :i + 1],
                                                v[None, :, :i + 1], is_causal=False,
                                                enable_gqa=True, scale=scale)[0]
        differing += int(not torch.equal(decode[:, 0], prefill[:, i]))
    return differing, len(rows)


def linear_batch_sizes_differing(dtype: torch.dtype, sizes: list[int]) -> list[int]:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(INTER, HIDDEN, generator=gen).to(dtype)
    x = torch.randn(max(sizes), HIDDEN, generator=gen).to(dtype)
    alone = F.linear(x[:1], w)
    return [m for m in sizes if not torch.equal(F.linear(x[:m], w)[:1], alone)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the server: 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    rows = range(SEQ - 128, SEQ)
    for dtype in (torch.bfloat16, torch.float32):
        n, of = sdpa_rows_differing(dtype, rows)
        print(f"sdpa {str(dtype)[6:]}: decode row vs causal-prefill row differ in {n} of {of} rows "
              f"(rows {rows.start}..{rows.stop - 1} of {SEQ})")
    sizes = [2, 3, 4, 8, 16, 64, 128, 512, 1024, 2304]
    for dtype in (torch.bfloat16, torch.float32):
        bad = linear_batch_sizes_differing(dtype, sizes)
        print(f"linear {str(dtype)[6:]}: row 0 of M rows differs from M=1 for M in {bad} "
              f"(of {sizes})")


if __name__ == "__main__":
    main()
