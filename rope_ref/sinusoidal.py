"""The additive sinusoidal position encoding of "Attention Is All You Need", for comparison."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_positions, check_int, check_real
from ._exact_trig import cos_sin_of_product
from .frequencies import default_inv_freq

__all__ = ["sinusoidal_embedding", "MAX_D_MODEL"]

#: Largest accepted model width; larger values are caller bugs, not models.
MAX_D_MODEL = 1 << 20


def sinusoidal_embedding(positions: Any, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(m, 2i) = sin(m / base^(2i/d_model)), PE(m, 2i+1) = cos(m / base^(2i/d_model)).

    Vaswani et al. 2017 (arXiv 1706.03762) §3.5. RoPE rotates by the same angles that this encoding
    adds; RoFormer §3.1 contrasts the two. Returns float64 of shape ``positions.shape + (d_model,)``.
    The frequencies are RoPE's correctly rounded ``base^(-2i/d)`` and sin/cos are of the exact product
    ``m * base^(-2i/d)`` (:mod:`rope_ref._exact_trig`), as in :func:`rope_ref.cos_sin`.
    """
    d_model = check_int(d_model, "d_model")
    if d_model <= 0 or d_model % 2 or d_model > MAX_D_MODEL:
        raise ValueError(f"d_model must be a positive even integer <= {MAX_D_MODEL}, got {d_model}")
    base = check_real(base, "base")
    if not base > 1.0:
        raise ValueError(f"base must be a finite number > 1, got {base}")
    pos = as_positions(positions)
    cos, sin = cos_sin_of_product(pos[..., None], default_inv_freq(base, d_model))
    out = np.empty(pos.shape + (d_model,), dtype=np.float64)
    out[..., 0::2] = sin
    out[..., 1::2] = cos
    return out
