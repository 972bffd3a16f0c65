"""Float32 arithmetic that gives the same bits on any batch shape, thread count, CPU and CUDA.

Why (docs/engine-model.md): BLAS matmuls and built-in reductions or
transcendentals change bits with the batch size, the CPU capability and the device. Single IEEE
operations (+, -, *, /, floor, min/max, integer bit tricks) do not. So everything here is built from
those alone, one torch op per arithmetic step (no fused multiply-add), with every reduction a
fixed-shape halving tree:

* `tree_sum` pairs element i with i + h, h = half the axis padded to a power of two, and repeats.
  Padding with zeros to *any* larger power of two adds only exact zeros, so the bits depend on the
  real elements alone (except the sign of an all-zero result: see `canonical_zero`). That is what
  makes attention over a varying number of keys chunking-invariant.
* `linear` forms every product x[m, k] * w[k, n] elementwise and tree-sums over k, row by row, so a
  row's result cannot depend on which other rows share the call.
* `ExactMath` builds exp, log, rsqrt, silu, softplus and log-softmax from + - * / only, with its
  constants as float32 tensors on the model's device (never Python floats for the backend to round,
  and never a CPU scalar divisor, which CUDA turns into a reciprocal multiply).
* `rope_tables` makes RoPE's cos/sin once, in numpy float64, from + - * / and fmod only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

F32 = torch.float32


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


def tree_sum_(a: torch.Tensor, dim: int) -> torch.Tensor:
    """Halving tree sum over `dim`, in place (a is overwritten); returns a view with `dim` removed.

    Same bits as zero-padding `dim` to the next power of two p and repeating
    `a = a[:p/2] + a[p/2:]`, without touching the padding: the real upper-half elements are added
    into the lower half and the lower-half elements without a partner are kept as they are.
    """
    dim = dim % a.dim()
    n = a.shape[dim]
    if n < 1:
        raise ValueError("tree_sum over an empty axis")
    while n > 1:
        half = next_pow2(n) // 2
        tail = n - half
        a.narrow(dim, 0, tail).add_(a.narrow(dim, half, tail))
        n = half
    return a.select(dim, 0)


def tree_sum(a: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """`tree_sum_` without modifying `a` (the first level writes a new tensor of half the size)."""
    dim = dim % a.dim()
    n = a.shape[dim]
    if n == 1:
        return a.select(dim, 0).clone()
    if n < 1:
        raise ValueError("tree_sum over an empty axis")
    half = next_pow2(n) // 2
    tail = n - half
    if tail == half:
        first = a.narrow(dim, 0, half) + a.narrow(dim, half, half)
    else:
        first = a.narrow(dim, 0, half).clone()
        first.narrow(dim, 0, tail).add_(a.narrow(dim, half, tail))
    return tree_sum_(first, dim)


@dataclass
class Workspace:
    """Reusable scratch memory for the product tensors of one forward call.

    `chunk_elems` bounds how many float32 products are materialised at once (rows are chunked to
    fit); results never depend on it, only speed and memory do. Kept per call, not per model, so
    that forward stays reentrant.
    """

    device: torch.device
    chunk_elems: int
    _buffer: torch.Tensor | None = field(default=None, repr=False)

    def take(self, *shape: int) -> torch.Tensor:
        """An uninitialised float32 tensor of `shape` backed by the shared scratch buffer."""
        numel = 1
        for size in shape:
            numel *= size
        if self._buffer is None or self._buffer.numel() < numel:
            self._buffer = torch.empty(max(numel, self.chunk_elems), dtype=F32, device=self.device)
        return self._buffer[:numel].view(shape)

    def rows_per_chunk(self, elems_per_row: int) -> int:
        return max(1, self.chunk_elems // max(1, elems_per_row))


def linear(x: torch.Tensor, w: torch.Tensor, workspace: Workspace) -> torch.Tensor:
    """x [M, K] @ w [K, N] as elementwise products and a halving tree over K, per row.

    Bit-identical to `tree_sum((x[:, :, None] * w[None]).transpose(1, 2), -1)`; the [M, K, N]
    layout keeps N innermost so that every tree level is a contiguous vector add. Rows are chunked
    so the products stay in cache; the tree's views are built once for the full-size chunks and
    the last level writes straight into the output.
    """
    m, k = x.shape
    n = w.shape[1]
    out = torch.empty(m, n, dtype=F32, device=x.device)
    rows = min(m, workspace.rows_per_chunk(k * n))
    full = workspace.take(rows, k, n)
    levels = _tree_levels(full, 1) if m >= 2 * rows and k > 1 else []
    for x_chunk, out_chunk in zip(x.unsqueeze(2).split(rows), out.unsqueeze(1).split(rows)):
        if levels and x_chunk.shape[0] == rows:
            torch.mul(x_chunk, w, out=full)
            for dst, src in levels[:-1]:
                dst.add_(src)
            torch.add(levels[-1][0], levels[-1][1], out=out_chunk)
        else:
            products = full[: x_chunk.shape[0]]
            torch.mul(x_chunk, w, out=products)
            out_chunk.copy_(tree_sum_(products, 1).unsqueeze(1))
    return out


def prefix_sum(a: torch.Tensor) -> torch.Tensor:
    """Inclusive prefix sums over the last axis by a fixed doubling scan (Hillis-Steele): step d
    adds element i - d into element i, d = 1, 2, 4, ... The order of additions depends only on the
    axis length, never on the device or a library's scan kernel (torch.cumsum's does)."""
    out = a.clone()
    n = out.shape[-1]
    shift = 1
    while shift < n:
        out = torch.cat([out[..., :shift], out[..., shift:] + out[..., :-shift]], dim=-1)
        shift *= 2
    return out


def linear_split_k(x: torch.Tensor, w: torch.Tensor, splits: int) -> torch.Tensor:
    """x [M, K] @ w [K, N] reduced in `splits` contiguous slices of K, each a halving tree, the
    slice results then added left to right: a split-K GEMM's order. Exact and deterministic, but
    not the bits of `linear` (another association of the same sum)."""
    m, k = x.shape
    bounds = [round(i * k / splits) for i in range(splits + 1)]
    rows = max(1, (1 << 22) // (k * w.shape[1]))
    out = []
    for x_rows in x.split(rows):
        total = None
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            part = tree_sum_(x_rows[:, lo:hi, None] * w[None, lo:hi, :], 1)
            total = part if total is None else total + part
        out.append(total)
    return torch.cat(out)


def _tree_levels(a: torch.Tensor, dim: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (destination, source) view pairs of `tree_sum_(a, dim)`, to replay on new contents."""
    levels = []
    n = a.shape[dim]
    while n > 1:
        half = next_pow2(n) // 2
        tail = n - half
        levels.append((a.narrow(dim, 0, tail), a.narrow(dim, half, tail)))
        n = half
    return levels


class ExactMath:
    """Transcendentals from basic float32 operations, with constants on one device."""

    # exp: x = k*ln2 + r with ln2 split so that k*LN2_HI is exact (Cody-Waite), |r| <= ln2/2.
    EXP_LOW = -87.0  # below: result 0 (2^k would leave the normal range)
    EXP_HIGH = 88.0  # above: saturates at exp(88) ~ 1.65e38
    LN2_HI = 0.693359375  # 355/512: 9 significant bits
    LN2_LO = -2.1219444005469057e-4  # ln2 - LN2_HI
    INV_LN2 = 1.4426950408889634
    # Taylor coefficients of exp(r), degree 8 (truncation < 1e-9 relative on |r| <= 0.35).
    EXP_COEFFS = (1.0, 1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040, 1 / 40320)
    # log(m) = 2 atanh(f), f = (m-1)/(m+1), m in [sqrt(1/2), sqrt(2)): 2 * sum f^(2i+1) / (2i+1).
    LOG_COEFFS = tuple(2.0 / (2 * i + 1) for i in range(8))
    SQRT2 = 1.4142135623730951
    RSQRT_MAGIC = 0x5F3759DF
    RSQRT_NEWTON_STEPS = 3  # guess error 0.18% -> 5e-6 -> 4e-11 -> rounding only
    SOFTPLUS_LINEAR_ABOVE = 20.0

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

        def const(value: float) -> torch.Tensor:
            return torch.tensor(value, dtype=F32, device=self.device)

        def const_i32(value: int) -> torch.Tensor:
            return torch.tensor(value, dtype=torch.int32, device=self.device)

        self.exponent_bias = const_i32(127)
        self.mantissa_bits = const_i32(23)
        self.rsqrt_magic = const_i32(self.RSQRT_MAGIC)
        self.one_i32 = const_i32(1)
        self._values: dict[float, torch.Tensor] = {}
        self.zero = const(0.0)
        self.half = const(0.5)
        self.one = const(1.0)
        self.three_halves = const(1.5)
        self.neg_inf = const(float("-inf"))
        self.exp_low = const(self.EXP_LOW)
        self.exp_high = const(self.EXP_HIGH)
        self.ln2_hi = const(self.LN2_HI)
        self.ln2_lo = const(self.LN2_LO)
        self.inv_ln2 = const(self.INV_LN2)
        self.exp_coeffs = [const(c) for c in self.EXP_COEFFS]
        self.log_coeffs = [const(c) for c in self.LOG_COEFFS]
        self.sqrt2 = const(self.SQRT2)
        self.softplus_linear_above = const(self.SOFTPLUS_LINEAR_ABOVE)

    def const(self, value: float) -> torch.Tensor:
        """A float32 scalar tensor on this device (round-to-nearest of `value`), made once."""
        tensor = self._values.get(value)
        if tensor is None:
            tensor = self._values[value] = torch.tensor(value, dtype=F32, device=self.device)
        return tensor

    def exp(self, x: torch.Tensor) -> torch.Tensor:
        """e^x within ~2 ulp; 0 for x < -87 (including -inf); saturates at e^88 above 88.

        In-place steps on fresh temporaries: the same IEEE operations, fewer allocations.
        """
        xc = torch.clamp(x, min=self.exp_low, max=self.exp_high)
        k = xc * self.inv_ln2
        k.add_(self.half).floor_()
        r = k * self.ln2_hi
        torch.sub(xc, r, out=r)
        r.sub_(k * self.ln2_lo)
        p = r * self.exp_coeffs[-1]
        for c in reversed(self.exp_coeffs[1:-1]):
            p.add_(c).mul_(r)
        p.add_(self.exp_coeffs[0])
        scale = k.to(torch.int32).add_(self.exponent_bias).bitwise_left_shift_(self.mantissa_bits).view(F32)  # 2^k
        p.mul_(scale)
        return p.masked_fill_(x < self.exp_low, 0.0)

    def log(self, x: torch.Tensor) -> torch.Tensor:
        """Natural log within ~2 ulp for positive normal x (the only inputs the model produces)."""
        bits = x.view(torch.int32)
        exponent = (bits >> 23) - 127
        mantissa = ((bits & 0x007FFFFF) | 0x3F800000).view(F32)  # in [1, 2)
        above = mantissa > self.sqrt2
        mantissa = torch.where(above, mantissa * self.half, mantissa)  # now in [sqrt(.5), sqrt(2)]
        e = (exponent + above.to(torch.int32)).to(F32)
        f = (mantissa - self.one) / (mantissa + self.one)
        s = f * f
        p = self.log_coeffs[-1]
        for c in reversed(self.log_coeffs[:-1]):
            p = p * s
            p = p + c
        log_m = f * p
        return e * self.ln2_hi + (log_m + e * self.ln2_lo)

    def rsqrt(self, x: torch.Tensor) -> torch.Tensor:
        """1/sqrt(x) for positive normal x: bit-trick guess plus fixed Newton steps (~1 ulp)."""
        y = torch.sub(self.rsqrt_magic, x.view(torch.int32).bitwise_right_shift(self.one_i32)).view(F32)
        half_x = x * self.half
        for _ in range(self.RSQRT_NEWTON_STEPS):
            t = half_x * y
            t.mul_(y)
            torch.sub(self.three_halves, t, out=t)
            y = y * t
        return y

    def logistic_denominator(self, x: torch.Tensor) -> torch.Tensor:
        """1 + e^-x: sigmoid(x) = 1 / it, silu(x) = x / it (one exp serves both)."""
        return self.exp(torch.neg(x)).add_(self.one)

    def sigmoid(self, x: torch.Tensor) -> torch.Tensor:
        """1 / (1 + e^-x)."""
        denominator = self.logistic_denominator(x)
        return torch.div(self.one, denominator, out=denominator)

    def silu(self, x: torch.Tensor) -> torch.Tensor:
        """x * sigmoid(x), as x / (1 + e^-x)."""
        denominator = self.logistic_denominator(x)
        return torch.div(x, denominator, out=denominator)

    def softplus(self, x: torch.Tensor) -> torch.Tensor:
        """log(1 + e^x); x itself above 20 (where the difference is below float32 resolution)."""
        clipped = torch.minimum(x, self.softplus_linear_above)
        soft = self.log(self.one + self.exp(clipped))
        return torch.where(x > self.softplus_linear_above, x, soft)

    def log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """(s - max) - log(tree_sum(exp(s - max))) over the last axis."""
        m = torch.amax(logits, dim=-1, keepdim=True)
        shifted = logits - m
        total = tree_sum_(self.exp(shifted), -1).unsqueeze(-1)
        return shifted - self.log(total)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
        """x / sqrt(mean(x^2) + eps) * weight over the last axis (mean as a multiply by 1/d)."""
        d = x.shape[-1]
        mean_sq = tree_sum_(x * x, -1).mul_(self.const(1.0 / d)).add_(self.const(eps))
        inv = self.rsqrt(mean_sq)
        return (x * inv.unsqueeze(-1)).mul_(weight)

    def canonical_zero(self, x: torch.Tensor) -> torch.Tensor:
        """x + 0: turns -0.0 into +0.0 and changes nothing else.

        A tree sum's value does not depend on the sign of zeros among its inputs, except when the
        result itself is zero; adding +0 removes that last difference, so sums over differently
        padded axes agree bit for bit.
        """
        return x + self.zero


def _nth_root(c: float, n: int, iterations: int = 200) -> float:
    """c^(1/n) for 0 < c < 1 by Newton's method on r^n = c, using only * - / (IEEE float64)."""
    r = 1.0
    for _ in range(iterations):
        power = 1.0
        for _ in range(n - 1):
            power *= r
        r = r - (power * r - c) / (n * power)
    return r


def _sin_cos_float64(angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sin and cos from fmod range reduction to [-pi, pi] and Taylor series (30 terms), float64."""
    two_pi = np.float64(6.283185307179586)
    pi = np.float64(3.141592653589793)
    x = np.fmod(angles, two_pi)
    x = np.where(x > pi, x - two_pi, x)
    x = np.where(x < -pi, x + two_pi, x)
    x2 = x * x
    terms = 30
    # sin(x) = x * sum (-x^2)^i / (2i+1)!,  cos(x) = sum (-x^2)^i / (2i)!   (Horner, from the end)
    sin_acc = np.ones_like(x)
    cos_acc = np.ones_like(x)
    for i in range(terms, 0, -1):
        sin_acc = np.float64(1.0) - (x2 / np.float64((2 * i) * (2 * i + 1))) * sin_acc
        cos_acc = np.float64(1.0) - (x2 / np.float64((2 * i - 1) * (2 * i))) * cos_acc
    return x * sin_acc, cos_acc


def rope_tables(head_dim: int, max_context: int, theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin float32 [max_context, head_dim // 2] for RoPE, identical on every machine.

    inv_freq[i] = theta^(-i / (head_dim/2)) as a geometric sequence (repeated multiplication by
    a Newton-computed root), angles = position * inv_freq, then `_sin_cos_float64`.
    """
    half = head_dim // 2
    ratio = _nth_root(1.0 / theta, half)
    inv_freq = [1.0]
    for _ in range(half - 1):
        inv_freq.append(inv_freq[-1] * ratio)
    positions = np.arange(max_context, dtype=np.float64)
    angles = positions[:, None] * np.asarray(inv_freq, dtype=np.float64)[None, :]
    sin, cos = _sin_cos_float64(angles)
    return cos.astype(np.float32), sin.astype(np.float32)
