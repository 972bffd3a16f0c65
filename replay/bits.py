"""Bit-level views of logprob values.

Values are held as float64 carrying the server's float32 exactly. Equality is equality of the
float64 bit patterns (so -0.0 != +0.0 and NaN payloads matter). ULP distance is measured in
float32 steps when both values are float32-representable, else in float64 steps.
"""

from __future__ import annotations

import numpy as np

ULP_INFINITE = np.iinfo(np.int64).max  # distance to or between NaNs of different bits


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: are the float64 bit patterns identical?"""
    return np.asarray(a, np.float64).view(np.uint64) == np.asarray(b, np.float64).view(np.uint64)


def fits_float32(values: np.ndarray) -> np.ndarray:
    """Elementwise: does the float64 value survive a round trip through float32 bit for bit?"""
    v = np.asarray(values, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        back = v.astype(np.float32).astype(np.float64)
    return same_bits(v, back)


def _ordered(bits: np.ndarray, sign_bit: int) -> np.ndarray:
    """Map IEEE bit patterns to integers ordered like the values (-0 and +0 both map to 0)."""
    if sign_bit == 31:
        i = bits.astype(np.int64)
        neg = (i & 0x80000000) != 0
        mag = i & 0x7FFFFFFF
        return np.where(neg, -mag, mag)
    u = bits.view(np.uint64)
    neg = (u >> np.uint64(63)) == 1
    mag = (u & np.uint64(0x7FFFFFFFFFFFFFFF)).astype(np.int64)
    return np.where(neg, -mag, mag)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ULP distance (int64); identical bits give 0, a NaN against anything else gives
    ULP_INFINITE."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    both32 = fits_float32(a) & fits_float32(b)
    with np.errstate(over="ignore", invalid="ignore"):
        a32 = a.astype(np.float32).view(np.uint32)
        b32 = b.astype(np.float32).view(np.uint32)
    d32 = np.abs(_ordered(a32, 31) - _ordered(b32, 31))
    oa = _ordered(a.view(np.uint64), 63)
    ob = _ordered(b.view(np.uint64), 63)
    with np.errstate(over="ignore"):
        d64 = np.abs(oa - ob)
    d64 = np.where(d64 < 0, ULP_INFINITE, d64)  # overflow across the whole range
    dist = np.where(both32, d32, d64)
    nan = np.isnan(a) | np.isnan(b)
    dist = np.where(nan & ~same_bits(a, b), ULP_INFINITE, dist)
    return dist.astype(np.int64)


def hex_bits(value: float) -> str:
    """The float64 bit pattern, for reports: '0xbf847ae140000000'."""
    return "0x" + format(int(np.array(value, np.float64).view(np.uint64)), "016x")
