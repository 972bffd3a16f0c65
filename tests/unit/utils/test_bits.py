"""Bit equality and ULP distance agree with a straightforward reference on any float32."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from replay.utils.bits import ULP_INFINITE, fits_float32, has_float32_specials, same_bits, ulp_distance

float32_bits = st.integers(min_value=0, max_value=2**32 - 1)


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def reference_ulp(a: int, b: int) -> int:
    def ordered(u: int) -> int:
        return -(u & 0x7FFFFFFF) if u & 0x80000000 else u
    return abs(ordered(a) - ordered(b))


@given(float32_bits, float32_bits)
def test_same_bits_matches_raw_bit_comparison(a, b):
    x, y = np.array([f32(a)]), np.array([f32(b)])
    expected = struct.pack("<d", f32(a)) == struct.pack("<d", f32(b))
    assert bool(same_bits(x, y)[0]) == expected


@given(float32_bits)
def test_every_float32_round_trips(a):
    assert fits_float32(np.array([f32(a)]))[0]


@given(float32_bits, float32_bits)
def test_ulp_distance_matches_reference_for_non_nan(a, b):
    x, y = f32(a), f32(b)
    d = int(ulp_distance(np.array([x]), np.array([y]))[0])
    if np.isnan(x) or np.isnan(y):
        same = struct.pack("<d", x) == struct.pack("<d", y)
        assert d == (0 if same else ULP_INFINITE)
    else:
        assert d == reference_ulp(a, b)


@given(float32_bits, float32_bits)
def test_ulp_distance_is_symmetric(a, b):
    x, y = np.array([f32(a)]), np.array([f32(b)])
    assert ulp_distance(x, y)[0] == ulp_distance(y, x)[0]


def test_zero_signs_differ_in_bits_but_not_in_ulps():
    assert not same_bits(np.array([0.0]), np.array([-0.0]))[0]
    assert ulp_distance(np.array([0.0]), np.array([-0.0]))[0] == 0


def test_values_that_are_not_float32_are_measured_in_float64_steps():
    x = 0.1  # not a float32
    assert not fits_float32(np.array([x]))[0]
    assert ulp_distance(np.array([x]), np.array([np.nextafter(x, 1.0)]))[0] == 1


@pytest.mark.parametrize("pattern, special", [
    (0x00000000, False), (0x80000000, False), (0x3F800000, False), (0xBF7FFFFF, False),
    (0x00800000, False), (0x7F7FFFFF, False),  # smallest and largest normals
    (0x00000001, True), (0x807FFFFF, True),  # subnormals
    (0x7F800000, True), (0xFF800000, True), (0x7FC00000, True), (0x7F800001, True),  # inf, NaN
])
def test_has_float32_specials_finds_subnormals_infinities_and_nans(pattern, special):
    values = np.array([0x3F800000, pattern, 0x40000000], dtype=np.uint32).view(np.float32)
    assert has_float32_specials(values) is special


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=8))
def test_has_float32_specials_agrees_with_the_ieee_definition(patterns):
    v = np.array(patterns, dtype=np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        want = bool(np.any(~np.isfinite(v) | ((v != 0) & (np.abs(v) < np.finfo(np.float32).tiny))))
    assert has_float32_specials(v) is want
