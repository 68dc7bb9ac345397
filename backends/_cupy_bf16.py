"""bfloat16 on the host as raw bits (pure NumPy): CuPy has no bfloat16 dtype, so bf16 arrays travel as uint16.

bfloat16 is the upper 16 bits of an IEEE-754 binary32 (1 sign, 8 exponent, 7 fraction bits; Intel,
"BFLOAT16 - Hardware Numerics Definition", 2018, §2). Rounding float32 to it is round-to-nearest-even on
the dropped 16 bits; NaNs stay NaN (quiet bit set), as ``cuda_bf16.h`` ``__float2bfloat16_rn`` does.
"""

from __future__ import annotations

import numpy as np

__all__ = ["float32_to_bf16_bits", "bf16_bits_to_float32"]


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float values to bfloat16 (nearest, ties to even) and return the bits as uint16."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    bits = np.where(nan, (u >> 16) | 0x0040, rounded)
    return bits.astype(np.uint16).reshape(f.shape)


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (exact: every bfloat16 is a float32)."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32).reshape(b.shape)
