"""The rotation itself: elementwise, complex and explicit-matrix forms, and the layout permutation.

RoFormer (arXiv 2104.09864) eq. 13 defines f(x, m) = R_{Theta,m} x with R block-diagonal, one 2x2
rotation by m*theta_i per channel pair; eq. 34 gives the elementwise form used here:
    y_a = x_a cos - x_b sin,   y_b = x_b cos + x_a sin
for each pair (a, b). The layout decides the pairs (see :data:`rope_ref.config.LAYOUTS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_float64, as_positions, check_broadcast
from .config import RopeConfig
from .frequencies import _check_config, angles, attention_factor, cos_sin, resolve_seq_len

__all__ = [
    "apply",
    "apply_complex",
    "rotation_matrix",
    "layout_permutation",
    "inverse_layout_permutation",
    "pair_indices",
]

# Rows of float64 processed per block: temporaries stay in cache, so apply costs about one pass.
_BLOCK_ELEMENTS = 1 << 16


def pair_indices(cfg: RopeConfig) -> tuple[np.ndarray, np.ndarray]:
    """Channel indices ``(a, b)`` of the rotated pairs: pair i rotates channels ``a[i]`` and ``b[i]``."""
    cfg = _check_config(cfg)
    half = cfg.rotary_dim // 2
    if cfg.layout == "half":
        a = np.arange(half)
        return a, a + half
    a = np.arange(0, cfg.rotary_dim, 2)
    return a, a + 1


def _validated(x: Any, positions: Any, cfg: RopeConfig, seq_len: int | None):
    """Checked inputs of a rotation: ``(cfg, x as float64, positions as float64, resolved seq_len)``."""
    cfg = _check_config(cfg)
    x = as_float64(x, "x")
    if x.ndim == 0 or x.shape[-1] != cfg.head_dim:
        raise ValueError(f"x.shape[-1] must equal head_dim={cfg.head_dim}, got x.shape={x.shape}")
    pos = as_positions(positions)
    check_broadcast(pos, x.shape[:-1])
    return cfg, x, pos, resolve_seq_len(pos, cfg, seq_len)


def _prepare(x: Any, positions: Any, cfg: RopeConfig, seq_len: int | None):
    cfg, x, pos, seq_len = _validated(x, positions, cfg, seq_len)
    cos, sin = cos_sin(pos, cfg, seq_len=seq_len)
    # Left-pad the table to x.ndim so it broadcasts over the leading axes of x.
    lead = (1,) * (x.ndim - 1 - pos.ndim)
    cos = cos.reshape(lead + cos.shape)
    sin = sin.reshape(lead + sin.shape)
    zero = (pos == 0).reshape(lead + pos.shape + (1,))
    identity_at_zero = attention_factor(cfg, seq_len) == 1.0
    return cfg, x, cos, sin, zero if identity_at_zero else None


def _rotate_half_block(out, x, cos_full, sin_signed, rd: int, scratch: np.ndarray) -> None:
    """Half layout on one block in three ufunc calls, with exactly the formula's roundings.

    ``cos_full = [c, c]`` and ``sin_signed = [s, -s]``: after ``out = x * cos_full`` and
    ``tmp = x * sin_signed = [x1 s, -(x2 s)]``, adding ``tmp`` with its halves swapped gives
    ``x1 c + (-(x2 s)) = x1 c - x2 s`` and ``x2 c + x1 s`` (negation is exact, so this is bitwise the
    elementwise form).
    """
    h = rd // 2
    np.multiply(x[..., :rd], cos_full, out=out[..., :rd])
    tmp = np.multiply(x[..., :rd], sin_signed, out=scratch)
    # Splitting the (unit-stride) last axis into (2, h) is always a view, never a copy.
    out4 = out[..., :rd].reshape(out.shape[:-1] + (2, h))
    np.add(out4, tmp.reshape(out4.shape)[..., ::-1, :], out=out4)


def _rotate_interleaved_block(
    out, x, cos_pairs, i_sin, rd: int, scratch: np.ndarray, caller_err: dict
) -> None:
    """Interleaved layout on one block in three ufunc calls, with exactly the formula's roundings.

    ``cos_pairs = [c0, c0, c1, c1, ...]`` and ``i_sin = 1j * s``. With each pair viewed as the complex
    number ``z = x_a + 1j x_b``, ``z * (1j s)`` is ``(x_a*0 - x_b*s) + 1j (x_a*s + x_b*0)``: for finite
    x that is exactly ``(-(x_b s), x_a s)`` whether or not NumPy fuses a multiply and an add, because
    the other product is an exact zero. Adding it to ``x * cos_pairs`` gives ``x_a c - x_b s`` and
    ``x_b c + x_a s`` rounded exactly as written. Runs under ``errstate(invalid="raise")``: an infinite
    input (``0 * inf``) raises, and that block is recomputed with the plain elementwise formula under
    the caller's error state, so the result is the same formula either way (quiet NaNs raise nothing
    and propagate as in the formula).
    """
    xr, orr = x[..., :rd], out[..., :rd]
    try:
        np.multiply(xr, cos_pairs, out=orr)
        np.multiply(xr.view(np.complex128), i_sin, out=scratch.view(np.complex128))
        np.add(orr, scratch, out=orr)
    except FloatingPointError:
        with np.errstate(**caller_err):
            x1, x2, o1, o2 = xr[..., 0::2], xr[..., 1::2], orr[..., 0::2], orr[..., 1::2]
            c, s = cos_pairs[..., 0::2], i_sin.imag
            np.subtract(x1 * c, x2 * s, out=o1)
            np.add(x2 * c, x1 * s, out=o2)


def apply(x: Any, positions: Any, cfg: RopeConfig, *, seq_len: int | None = None) -> np.ndarray:
    """Rotate ``x`` (shape ``(..., head_dim)``) by ``positions`` (broadcast against ``x.shape[:-1]``).

    RoFormer eq. 34 in float64: for each pair (a, b) of the layout, ``y_a = x_a cos - x_b sin`` and
    ``y_b = x_b cos + x_a sin``, with cos and sin of m*theta_i multiplied by the attention factor (HF
    ``apply_rotary_pos_emb`` semantics). Channels ``rotary_dim:`` are copied unchanged. Positions may
    be negative or fractional. Returns a new float64 array with ``x.shape``.
    """
    cfg, x, cos, sin, zero = _prepare(x, positions, cfg, seq_len)
    out = np.empty(x.shape, dtype=np.float64)
    rd = cfg.rotary_dim
    out[..., rd:] = x[..., rd:]
    if x.size == 0:
        return out
    if cfg.layout == "half":
        tables = (np.concatenate([cos, cos], axis=-1), np.concatenate([sin, -sin], axis=-1))
    else:
        if x.strides[-1] != x.itemsize:
            x = np.ascontiguousarray(x)
        i_sin = np.zeros(sin.shape, dtype=np.complex128)
        i_sin.imag = sin
        tables = (np.repeat(cos, 2, axis=-1), i_sin)
    if x.ndim == 1:  # give a single vector a leading axis to block over
        x, out_view, tables = x[None], out[None], tuple(t[None] for t in tables)
        zero = None if zero is None else zero[None]
    else:
        out_view = out
    # Block over the longest leading axis so temporaries stay cache-sized.
    axis = int(np.argmax(x.shape[:-1]))
    row_elements = x.size // x.shape[axis]
    step = max(1, _BLOCK_ELEMENTS // max(row_elements, 1))
    first = x[(slice(None),) * axis + (slice(0, step),)]
    scratch_full = np.empty(first.shape[:-1] + (rd,), dtype=np.float64)
    caller_err = np.geterr()
    for start in range(0, x.shape[axis], step):
        sl = (slice(None),) * axis + (slice(start, start + step),)
        parts = [t if t.shape[axis] == 1 else t[sl] for t in tables]
        xb = x[sl]
        scratch = scratch_full[(slice(None),) * axis + (slice(0, xb.shape[axis]),)]
        if cfg.layout == "half":
            _rotate_half_block(out_view[sl], xb, parts[0], parts[1], rd, scratch)
        else:
            with np.errstate(invalid="raise"):
                _rotate_interleaved_block(out_view[sl], xb, parts[0], parts[1], rd, scratch, caller_err)
        if zero is not None:
            z = zero if zero.shape[axis] == 1 else zero[sl]
            if z.any():
                # Position 0 is the identity bit for bit, signed zeros included (x - 0*y can flip -0.0).
                np.copyto(out_view[sl][..., :rd], x[sl][..., :rd], where=z)
    return out


def apply_complex(x: Any, positions: Any, cfg: RopeConfig, *, seq_len: int | None = None) -> np.ndarray:
    """The same rotation as :func:`apply`, computed as complex multiplication.

    Each pair (a, b) is the complex number x_a + i x_b, multiplied by A e^{i m theta}, A the attention
    factor; this is Meta LLaMA's ``precompute_freqs_cis`` / ``apply_rotary_emb`` view
    (meta-llama/llama ``llama/model.py``) generalised to both layouts. RoFormer eq. 12.
    """
    cfg, x, pos, seq_len = _validated(x, positions, cfg, seq_len)
    theta = angles(pos, cfg, seq_len=seq_len)
    theta = theta.reshape((1,) * (x.ndim - 1 - pos.ndim) + theta.shape)
    rot = attention_factor(cfg, seq_len) * np.exp(1j * theta)
    a, b = pair_indices(cfg)
    z = (x[..., a] + 1j * x[..., b]) * rot
    out = x.copy()
    out[..., a] = z.real
    out[..., b] = z.imag
    return out


def rotation_matrix(position: float, cfg: RopeConfig, *, seq_len: int | None = None) -> np.ndarray:
    """The explicit block-diagonal R_{Theta,m} of RoFormer eq. 13, shape ``(head_dim, head_dim)``.

    Pairs follow the layout; pass-through channels get the identity. ``apply(x, m, cfg)`` equals
    ``R @ x`` (times the attention factor on the rotated block, which R includes).
    """
    cfg = _check_config(cfg)
    pos = as_positions(position, "position")
    if pos.ndim != 0:
        raise ValueError(f"position must be a scalar, got shape {pos.shape}")
    cos, sin = cos_sin(pos, cfg, seq_len=seq_len)
    r = np.eye(cfg.head_dim)
    a, b = pair_indices(cfg)
    r[a, a] = cos
    r[a, b] = -sin
    r[b, a] = sin
    r[b, b] = cos
    return r


def layout_permutation(cfg: RopeConfig) -> np.ndarray:
    """Permutation P with ``apply(x[..., P], half) == apply(x, interleaved)[..., P]``.

    P lists the even channels of the rotated block, then the odd ones, then the pass-through channels
    in order. Per head it is the row order HF's ``convert_llama_weights_to_hf.py`` ``permute`` gives
    the q/k projections, which is why Meta (interleaved) checkpoints run under ``rotate_half``.
    """
    cfg = _check_config(cfg)
    rd = cfg.rotary_dim
    return np.concatenate([np.arange(0, rd, 2), np.arange(1, rd, 2), np.arange(rd, cfg.head_dim)])


def inverse_layout_permutation(cfg: RopeConfig) -> np.ndarray:
    """The inverse of :func:`layout_permutation`: ``x[..., P][..., inverse] == x``."""
    perm = layout_permutation(cfg)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    return inv
