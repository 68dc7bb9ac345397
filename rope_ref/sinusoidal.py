"""The additive sinusoidal position encoding of "Attention Is All You Need", for comparison."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_positions, check_int, check_real

__all__ = ["sinusoidal_embedding", "MAX_D_MODEL"]

#: Largest accepted model width; larger values are caller bugs, not models.
MAX_D_MODEL = 1 << 20


def sinusoidal_embedding(positions: Any, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(m, 2i) = sin(m / base^(2i/d_model)), PE(m, 2i+1) = cos(m / base^(2i/d_model)).

    Vaswani et al. 2017 (arXiv 1706.03762) §3.5. RoPE rotates by the same angles that this encoding
    adds; RoFormer §3.1 contrasts the two. Returns float64 of shape ``positions.shape + (d_model,)``.
    """
    d_model = check_int(d_model, "d_model")
    if d_model <= 0 or d_model % 2 or d_model > MAX_D_MODEL:
        raise ValueError(f"d_model must be a positive even integer <= {MAX_D_MODEL}, got {d_model}")
    base = check_real(base, "base")
    if not base > 1.0:
        raise ValueError(f"base must be a finite number > 1, got {base}")
    pos = as_positions(positions)
    freqs = np.power(base, -np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    theta = pos[..., None] * freqs
    out = np.empty(pos.shape + (d_model,), dtype=np.float64)
    out[..., 0::2] = np.sin(theta)
    out[..., 1::2] = np.cos(theta)
    return out
