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


def widen_float32(values: np.ndarray) -> np.ndarray:
    """float32 -> float64 on bit patterns, exactly as IEEE 754 widening (NaN payloads shifted
    up, signalling NaNs kept signalling), independent of the FPU's flush-to-zero or
    denormals-are-zero modes, which would silently zero float32 subnormals. Arrays without
    subnormals, infinities or NaNs (the usual case) take the hardware cast, which is exact for
    them in any mode."""
    raw = np.ascontiguousarray(values, dtype="<f4").view("<u4")
    if not has_float32_specials(raw.view("<f4")):
        return raw.view("<f4").astype(np.float64).reshape(np.shape(values))
    bits = raw.astype(np.uint64)
    sign = (bits >> np.uint64(31)) << np.uint64(63)
    exp = (bits >> np.uint64(23)) & np.uint64(0xFF)
    mant = bits & np.uint64(0x7FFFFF)
    out_exp = exp + np.uint64(1023 - 127)
    out_mant = mant << np.uint64(29)
    out_exp = np.where(exp == 0xFF, np.uint64(0x7FF), out_exp)
    out_exp = np.where((exp == 0) & (mant == 0), np.uint64(0), out_exp)
    # Subnormal float32 (mant * 2**-149) becomes a normal float64: normalise on the leading bit.
    sub = (exp == 0) & (mant != 0)
    lead = (np.frexp(np.where(sub, mant, 1).astype(np.float64))[1] - 1).astype(np.uint64)
    sub_exp = lead + np.uint64(1023 - 149)
    sub_mant = (mant << (np.uint64(52) - lead)) & np.uint64((1 << 52) - 1)
    out_exp = np.where(sub, sub_exp, out_exp)
    out_mant = np.where(sub, sub_mant, out_mant)
    result = sign | (out_exp << np.uint64(52)) | out_mant
    return result.astype("<u8").view("<f8").astype(np.float64).reshape(np.shape(values))


def has_float32_specials(values: np.ndarray) -> bool:
    """Does the float32 array hold a subnormal, an infinity or a NaN? Without them, the
    hardware's float32 -> float64 cast is exact in any floating-point mode (it is what
    `widen_float32` then uses). Decided on integer bit patterns, in place where possible."""
    magnitude = np.ascontiguousarray(values, dtype="<f4").view("<u4") & np.uint32(0x7FFFFFFF)
    magnitude -= np.uint32(1)  # zero wraps to 0xFFFFFFFF: -1 once read as signed
    special = magnitude < np.uint32(0x7FFFFF)  # subnormals (unsigned)
    special |= magnitude.view(np.int32) >= 0x7F7FFFFF  # infinities and NaNs (signed)
    return bool(special.any())


def fits_float32(values: np.ndarray) -> np.ndarray:
    """Elementwise: is the float64 value the widening of a float32, bit for bit? The one rule
    for "float32 holds it exactly" (golden storage, the parsers, ULP distances): the hardware
    cast only proposes a candidate, the comparison through `widen_float32` (integer bit
    patterns, so no flush-to-zero mode can interfere) decides."""
    v = np.asarray(values, np.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        candidate = v.astype(np.float32)
    return same_bits(v, widen_float32(candidate))


def narrow_if_exact(values: np.ndarray) -> np.ndarray:
    """float32 when every value fits float32 exactly (`fits_float32`), else the float64 values
    unchanged: a bad cast can cost space, never exactness."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    if values.size and not fits_float32(values).all():
        return values
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return values.astype(np.float32)


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
