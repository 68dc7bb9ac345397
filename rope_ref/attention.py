"""Reference scaled dot-product attention with RoPE applied to queries and keys only."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_float64, as_positions, to_numpy
from ._fixed import exp_basic, fixed_dot, fixed_sum
from .config import RopeConfig
from .frequencies import _check_config, resolve_seq_len
from .rotation import apply

__all__ = ["attention"]


def attention(
    q: Any,
    k: Any,
    v: Any,
    q_positions: Any,
    k_positions: Any,
    cfg: RopeConfig,
    mask: Any = None,
    *,
    seq_len: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(R q . R k / sqrt(head_dim)) v, in float64. Returns ``(output, probabilities)``.

    ``q``: ``(..., Sq, head_dim)``; ``k``: ``(..., Sk, head_dim)``; ``v``: ``(..., Sk, dv)``. Positions
    broadcast against ``q.shape[:-1]`` / ``k.shape[:-1]``. ``mask`` (optional) broadcasts to
    ``(..., Sq, Sk)``: boolean with True meaning "may attend", or a float array added to the scores.
    A query row whose keys are all masked raises ``ValueError`` instead of producing NaN.
    RoFormer eq. 16-17 (the rotation enters only q and k; v is not rotated).

    q and k are rotated with the *same* frequencies: for length-dependent scalings (dynamic NTK,
    LongRoPE) ``seq_len`` defaults to max(all q and k positions) + 1, as HF computes one cos/sin table
    per forward pass.

    Every reduction (the scores q.k, the softmax normaliser, the weighted sum of v) is a fixed pairwise
    tree of elementwise additions and the softmax uses a basic-operation exp (:mod:`rope_ref._fixed`),
    so the result is the same on every CPU, BLAS and thread count.
    """
    q_pos = as_positions(q_positions, "q_positions")
    k_pos = as_positions(k_positions, "k_positions")
    q, k = as_float64(q, "q"), as_float64(k, "k")  # converted here so that a bad one is named (not "x")
    if seq_len is None:
        both = np.concatenate([q_pos.ravel(), k_pos.ravel()])
        seq_len = resolve_seq_len(both, _check_config(cfg), None)
    qr = apply(q, q_pos, cfg, seq_len=seq_len)
    kr = apply(k, k_pos, cfg, seq_len=seq_len)
    v = as_float64(v, "v")
    if qr.ndim < 2 or kr.ndim < 2 or v.ndim < 2:
        raise ValueError("q, k and v must have at least 2 dimensions (..., seq, features)")
    if v.shape[-2] != kr.shape[-2]:
        raise ValueError(f"v.shape[-2] must equal k.shape[-2]={kr.shape[-2]}, got v.shape={v.shape}")
    # scores[..., i, j] = sum_c q[..., i, c] k[..., j, c] / sqrt(d): a fixed tree over c, no BLAS.
    scores = fixed_dot(qr[..., :, None, :], kr[..., None, :, :]) / np.sqrt(float(cfg.head_dim))
    if mask is not None:
        m = to_numpy(mask, "mask")
        try:
            np.broadcast_shapes(m.shape, scores.shape)
        except ValueError:
            raise ValueError(f"mask of shape {m.shape} does not broadcast to scores {scores.shape}") from None
        if m.dtype == np.bool_:
            if not np.all(np.any(np.broadcast_to(m, scores.shape), axis=-1)):
                raise ValueError("mask leaves a query row with no key to attend to")
            scores = np.where(m, scores, -np.inf)
        elif m.dtype.kind == "f":
            scores = scores + m
        else:
            raise TypeError(f"mask must be boolean or floating-point, got dtype {m.dtype}")
    peak = np.max(scores, axis=-1, keepdims=True)
    if not np.all(np.isfinite(peak)):
        raise ValueError("mask leaves a query row with no finite score")
    weights = exp_basic(scores - peak)
    probs = weights / fixed_sum(weights, axis=-1)[..., None]
    # out[..., i, e] = sum_j probs[..., i, j] v[..., j, e]: the tree runs over j.
    out = fixed_sum(probs[..., :, :, None] * v[..., None, :, :], axis=-2)
    return out, probs
