"""CuPy version of RoFormer's relative upper bound of the long-term decay (``decay_upper_bound``).

Semantics are :func:`rope_ref.decay.relative_upper_bound` (RoFormer §3.4.3).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rope_ref
from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len

from ._cupy_device import _cupy, _to_device

__all__ = ["relative_upper_bound"]


def relative_upper_bound(distances: Any, cfg: RopeConfig, *, max_bytes: int = 256 * 2**20) -> Any:
    """RoFormer §3.4.3 relative upper bound (1/(d/2)) sum_j |S_j(r)| in CuPy float64, shape of ``distances``.

    S_j(r) = sum_{i<j} e^{i r theta_i}; theta from the oracle's float64 frequency table; the seq_len a
    length-dependent scaling sees is max|r| + 1 (as :func:`rope_ref.decay.relative_upper_bound`).
    """
    cp = _cupy()
    r = _to_device(distances)
    if r.dtype.kind not in "iuf":
        raise TypeError(f"distances must be an integer or real array, got dtype {r.dtype}")
    r = r.astype(cp.float64)
    if r.size and not bool(cp.isfinite(r).all()):
        raise ValueError("distances must be finite")
    probe = np.asarray([float(cp.abs(r).max())]) if r.size else np.empty(0)
    theta = cp.asarray(rope_ref.inv_freq(cfg, resolve_seq_len(probe, cfg, None)))
    flat = r.reshape(-1)
    out = cp.empty(flat.shape, dtype=cp.float64)
    rows = max(1, max_bytes // (2 * 8 * theta.size))
    for start in range(0, flat.size, rows):
        angle = flat[start : start + rows, None] * theta[None, :]
        re = cp.cumsum(cp.cos(angle), axis=1)
        im = cp.cumsum(cp.sin(angle), axis=1)
        out[start : start + rows] = cp.hypot(re, im).mean(axis=1)
    return out.reshape(r.shape)
