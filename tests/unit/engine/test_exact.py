"""Exact arithmetic of the embedded engine: accuracy against float64 and bit-level invariances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.exact import (
    ExactMath,
    Workspace,
    linear,
    next_pow2,
    rope_tables,
    tree_sum,
    tree_sum_,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def em() -> ExactMath:
    return ExactMath(CPU)


def uniform(seed: int, shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
    """float32 test inputs from PCG64 (the same on every machine)."""
    u = np.random.Generator(np.random.PCG64(seed)).random(shape)
    return torch.from_numpy((low + (high - low) * u).astype(np.float32))


def ulps(result: torch.Tensor, reference: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps between `result` and the float64 reference rounded to float32."""
    a = result.numpy().astype(np.float32).view(np.int32).astype(np.int64)
    b = reference.astype(np.float32).view(np.int32).astype(np.int64)
    # map sign-magnitude to a monotonic integer line
    a = np.where(a < 0, -(a & 0x7FFFFFFF), a)
    b = np.where(b < 0, -(b & 0x7FFFFFFF), b)
    return np.abs(a - b)


def reference_tree_sum(a: torch.Tensor) -> torch.Tensor:
    """The definition: zero-pad the last axis to a power of two, then a = a[..., :h] + a[..., h:]."""
    n = a.shape[-1]
    p = next_pow2(n)
    a = torch.cat([a, torch.zeros(*a.shape[:-1], p - n)], dim=-1)
    while a.shape[-1] > 1:
        h = a.shape[-1] // 2
        a = a[..., :h] + a[..., h:]
    return a[..., 0]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)))


# ---------------------------------------------------------------- accuracy


def test_exp_within_2_ulp_of_float64(em: ExactMath) -> None:
    x = torch.cat([uniform(1, (20000,), -87.0, 88.0), uniform(2, (5000,), -1.0, 1.0), torch.tensor([0.0, -0.0])])
    reference = np.exp(x.numpy().astype(np.float64))
    assert ulps(em.exp(x), reference).max() <= 2


def test_exp_underflows_to_exact_zero_below_minus_87(em: ExactMath) -> None:
    x = torch.tensor([-87.5, -100.0, -1e30, float("-inf")])
    assert same_bits(em.exp(x), torch.zeros(4))


def test_exp_of_zero_is_exactly_one(em: ExactMath) -> None:
    assert em.exp(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]


def test_log_within_2_ulp_of_float64(em: ExactMath) -> None:
    mantissas = uniform(3, (20000,), 1.0, 2.0)
    exponents = torch.from_numpy(np.random.Generator(np.random.PCG64(4)).integers(-120, 120, 20000))
    x = (mantissas * torch.pow(2.0, exponents.double()).float()).abs()
    x = torch.cat([x, torch.tensor([1.0, 2.0, 0.5, 1.4142135, 1.4142137])])
    reference = np.log(x.numpy().astype(np.float64))
    result = em.log(x)
    near_one = np.abs(reference) < 1e-3  # absolute error there is what matters
    assert ulps(result, reference)[~near_one].max() <= 2
    assert np.abs(result.numpy()[near_one] - reference[near_one]).max() < 1e-9
    assert em.log(torch.tensor([1.0])).item() == 0.0


def test_rsqrt_within_2_ulp_of_float64(em: ExactMath) -> None:
    x = torch.cat([uniform(5, (10000,), 1e-6, 1.0), uniform(6, (10000,), 1.0, 1e6)])
    reference = 1.0 / np.sqrt(x.numpy().astype(np.float64))
    assert ulps(em.rsqrt(x), reference).max() <= 2


def test_silu_sigmoid_softplus_close_to_float64(em: ExactMath) -> None:
    x = uniform(7, (20000,), -30.0, 30.0)
    x64 = x.numpy().astype(np.float64)
    sigmoid = 1.0 / (1.0 + np.exp(-x64))
    assert ulps(em.sigmoid(x), sigmoid).max() <= 4
    assert ulps(em.silu(x), x64 * sigmoid).max() <= 4
    softplus = np.log1p(np.exp(x64))
    assert np.abs(em.softplus(x).numpy() - softplus).max() <= 4e-7 * np.maximum(1.0, softplus).max()


def test_log_softmax_close_to_float64(em: ExactMath) -> None:
    logits = uniform(8, (4, 1000), -20.0, 20.0)
    x64 = logits.numpy().astype(np.float64)
    shifted = x64 - x64.max(axis=1, keepdims=True)
    reference = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert np.abs(em.log_softmax(logits).numpy() - reference).max() < 1e-5


def test_rms_norm_close_to_float64(em: ExactMath) -> None:
    x = uniform(9, (16, 128), -3.0, 3.0)
    weight = uniform(10, (128,), 0.9, 1.1)
    x64 = x.numpy().astype(np.float64)
    reference = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-6) * weight.numpy()
    assert np.abs(em.rms_norm(x, weight).numpy() - reference).max() < 1e-5


def test_rope_tables_match_float64_trig() -> None:
    cos, sin = rope_tables(32, 4096)
    inv_freq = 10000.0 ** (-np.arange(16) / 16)
    angles = np.arange(4096)[:, None] * inv_freq[None, :]
    assert np.abs(cos - np.cos(angles)).max() < 1e-7
    assert np.abs(sin - np.sin(angles)).max() < 1e-7
    assert cos.dtype == np.float32 and cos.shape == (4096, 16)


# ---------------------------------------------------------------- invariance


def test_transcendentals_bit_equal_across_batch_shapes(em: ExactMath) -> None:
    x = uniform(11, (64, 96), -10.0, 10.0)
    positive = x.abs() + 1e-3
    for fn, data in ((em.exp, x), (em.silu, x), (em.softplus, x), (em.log, positive), (em.rsqrt, positive)):
        whole = fn(data)
        rows = torch.stack([fn(row) for row in data])
        single = torch.stack([fn(data[i, j : j + 1]) for i, j in ((0, 0), (17, 5), (63, 95))]).reshape(-1)
        assert same_bits(whole, rows), fn.__name__
        assert same_bits(single, whole[[0, 17, 63], [0, 5, 95]]), fn.__name__


def test_tree_sum_is_the_zero_padded_halving_tree() -> None:
    for n in (1, 2, 3, 5, 8, 13, 64, 100, 129):
        a = uniform(12 + n, (7, n), -1.0, 1.0)
        assert same_bits(tree_sum(a, -1), reference_tree_sum(a)), n
        assert same_bits(tree_sum_(a.clone(), -1), reference_tree_sum(a)), n


def test_tree_sum_over_a_middle_axis_matches_last_axis() -> None:
    a = uniform(13, (3, 37, 5), -1.0, 1.0)
    assert same_bits(tree_sum(a, 1), reference_tree_sum(a.transpose(1, 2)))


def test_tree_sum_does_not_modify_its_input() -> None:
    a = uniform(14, (4, 9), -1.0, 1.0)
    before = a.clone()
    tree_sum(a, -1)
    assert same_bits(a, before)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), extra=st.integers(0, 700), seed=st.integers(0, 2**32 - 1))
def test_tree_sum_padding_with_more_zeros_keeps_bits(n: int, extra: int, seed: int) -> None:
    """The property attention relies on: appending zeros (any count) never changes the sum."""
    em = ExactMath(CPU)
    a = uniform(seed, (3, n), -1e3, 1e3)
    padded = torch.cat([a, torch.zeros(3, extra)], dim=1)
    assert same_bits(em.canonical_zero(tree_sum(a, -1)), em.canonical_zero(tree_sum(padded, -1)))


def test_canonical_zero_settles_the_sign_of_an_all_negative_zero_sum() -> None:
    em = ExactMath(CPU)
    minus_zeros = torch.full((1, 3), -0.0)
    padded = torch.cat([minus_zeros, torch.zeros(1, 1)], dim=1)
    assert not same_bits(tree_sum(minus_zeros, -1), tree_sum(padded, -1))  # -0.0 vs +0.0
    assert same_bits(em.canonical_zero(tree_sum(minus_zeros, -1)), em.canonical_zero(tree_sum(padded, -1)))


def test_linear_is_the_products_tree_of_the_brief() -> None:
    x = uniform(15, (5, 96), -2.0, 2.0)
    w = uniform(16, (96, 40), -0.5, 0.5)
    reference = reference_tree_sum((x[:, :, None] * w[None]).transpose(1, 2))
    assert same_bits(linear(x, w, Workspace(CPU, 1 << 20)), reference)


def test_linear_rows_do_not_depend_on_the_batch_or_chunking() -> None:
    x = uniform(17, (130, 128), -2.0, 2.0)
    w = uniform(18, (128, 64), -0.5, 0.5)
    whole = linear(x, w, Workspace(CPU, 1 << 20))
    assert same_bits(linear(x[:1], w, Workspace(CPU, 1 << 20)), whole[:1])
    assert same_bits(linear(x, w, Workspace(CPU, 3 * 128 * 64)), whole)  # 3-row chunks + a tail
    assert same_bits(linear(x, w, Workspace(CPU, 1)), whole)  # one row at a time
    assert not math.isnan(whole.sum().item())
