"""Multi-axis RoPE (M-RoPE, 2D vision RoPE, ChatGLM-6B 2D) on any Array API namespace, standard calls only."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array_api_namespace import array_api_size, broadcasts_to, dtype_named, widest_float

__all__ = ["multiaxis_apply"]


def multiaxis_apply(x: Any, positions: Any, spec: Any, *, seq_len: int | None = None) -> Any:
    """Multi-axis RoPE (:func:`rope_ref.multiaxis.apply`) on any Array API namespace, standard calls only.

    ``x``: ``(..., head_dim)`` of any real floating dtype; ``positions``: ``(n_streams, ...)`` (an array
    of x's namespace, or anything ``xp.asarray`` takes), each stream broadcasting against
    ``x.shape[:-1]``. Pair ``i`` of ``spec`` (channels ``a_i, b_i``) is rotated by ``m^(s(i)) phi_i``
    (RoFormer eq. 34): the stream choice is one ``take`` along the stream axis, the pairs are gathered
    with ``take`` and put back with one inverse-permutation ``take``. Precision as the backend's
    ``apply``: angles and cos/sin in the widest real floating dtype of the device, times each pair's
    attention factor, then cast to ``x.dtype`` for the rotation; a pair at position 0 with factor 1 is
    copied. Length-dependent scalings see ``seq_len`` or ``max(positions) + 1`` over all streams.
    """
    import array_api_compat

    from rope_ref.multiaxis import MultiAxisRope

    if not isinstance(spec, MultiAxisRope):
        raise TypeError(f"spec must be a rope_ref.multiaxis.MultiAxisRope, got {type(spec).__name__}")
    xp = array_api_compat.array_namespace(x)
    device = array_api_compat.device(x)
    if x.ndim == 0 or x.shape[-1] != spec.head_dim:
        raise ValueError(f"x.shape[-1] must equal head_dim={spec.head_dim}, got x.shape={tuple(x.shape)}")
    try:
        array_api_compat.array_namespace(x, positions)
    except TypeError:  # not an array of x's library: convert on the host
        positions = xp.asarray(np.asarray(positions), device=device)
    adt = widest_float(xp, device)
    pos = xp.astype(positions, adt)
    lead = tuple(x.shape[:-1])
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(
            f"positions must have a leading axis of n_streams={spec.n_streams} (one row per stream), "
            f"got shape {tuple(pos.shape)}"
        )
    if not broadcasts_to(tuple(pos.shape[1:]), lead):
        raise ValueError(
            f"positions of shape {tuple(pos.shape)} do not broadcast against x.shape[:-1] = {lead}"
        )
    if seq_len is None and any(t.scaling is not None and t.scaling.length_dependent for t in spec.tables):
        if array_api_size(pos):
            seq_len = max(int(xp.floor(xp.max(pos))) + 1, 1)  # HF dynamic_rope_update, over all streams
    phi, amp = spec.pair_frequencies(seq_len)
    if adt != dtype_named(xp, "float64", device):
        phi = phi.astype(np.float32)  # the device has no float64: round once, here

    def const(values: np.ndarray, dtype: Any) -> Any:
        return xp.asarray(np.ascontiguousarray(values), dtype=dtype, device=device)

    moved = xp.permute_dims(pos, tuple(range(1, pos.ndim)) + (0,))  # (..., n_streams)
    m = xp.take(moved, const(np.asarray(spec.streams, dtype=np.int64), xp.int64), axis=-1)  # (..., n_pairs)
    theta = m * const(phi, adt)
    cos, sin = xp.cos(theta), xp.sin(theta)
    if np.any(amp != 1.0):
        cos, sin = cos * const(amp, adt), sin * const(amp, adt)
    pad = (1,) * (x.ndim - 1 - m.ndim + 1)
    cos = xp.reshape(xp.astype(cos, x.dtype), pad + tuple(cos.shape))
    sin = xp.reshape(xp.astype(sin, x.dtype), pad + tuple(sin.shape))
    a, b = spec.pair_indices()
    xa = xp.take(x, const(a.astype(np.int64), xp.int64), axis=-1)
    xb = xp.take(x, const(b.astype(np.int64), xp.int64), axis=-1)
    ya = xa * cos - xb * sin
    yb = xb * cos + xa * sin
    keep = (m == 0) & const(amp == 1.0, xp.bool)  # position 0, factor 1: the identity
    keep = xp.reshape(keep, pad + tuple(keep.shape))
    ya, yb = xp.where(keep, xa, ya), xp.where(keep, xb, yb)
    # Output channel c is column inverse[c] of [ya, yb, x[..., rotary_dim:]].
    n, rd = spec.n_pairs, spec.rotary_dim
    inverse = np.empty(spec.head_dim, dtype=np.int64)
    inverse[a], inverse[b] = np.arange(n), n + np.arange(n)
    inverse[rd:] = 2 * n + np.arange(spec.head_dim - rd)
    parts = [ya, yb] if rd == spec.head_dim else [ya, yb, x[..., rd:]]
    return xp.take(xp.concat(parts, axis=-1), const(inverse, xp.int64), axis=-1)
