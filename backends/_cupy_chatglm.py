"""CuPy version of the ChatGLM-6B 2D rotary and of its position ids (the backend's ``chatglm_*`` operations).

Semantics are :mod:`rope_ref.chatglm`, where the source of every rule is cited (THUDM/chatglm-6b
``modeling_chatglm.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rope_ref.chatglm import _check_base, _check_flag, _check_precision, _check_token_ids
from rope_ref.config import RopeConfig

from ._cupy_device import Bf16Array, _cupy, _storage, _to_device, _wrap_like
from ._cupy_launch import _launch_apply

__all__ = ["position_ids", "apply_2d"]


def position_ids(
    input_ids: Any, *, bos_token_id: int, mask_token_id: int, gmask_token_id: int, position_encoding_2d: bool
) -> Any:
    """ChatGLM-6B ``get_position_ids`` (final version) for a ``(batch, seq)`` cupy batch, as int64.

    Context length = first bos index; mask position = first [gMASK] if the row has one, else first
    [MASK]; 2D overwrites positions from the context length on with the mask position (both mask
    kinds), 1D only for [MASK] rows; block ids are 0 over the context, then 1, 2, ...
    """
    cp = _cupy()
    ids = _to_device(input_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"input_ids must be an integer array of token ids, got dtype {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq), got shape {ids.shape}")
    bos, mask, gmask = _check_token_ids(bos_token_id, mask_token_id, gmask_token_id)
    two_d = _check_flag(position_encoding_2d, "position_encoding_2d")
    ids = ids.astype(cp.int64)
    batch, seq = ids.shape
    is_bos, is_mask, is_gmask = ids == bos, ids == mask, ids == gmask
    has_bos, has_mask, has_gmask = is_bos.any(axis=1), is_mask.any(axis=1), is_gmask.any(axis=1)
    bad_bos = cp.asnumpy(~has_bos)
    if bad_bos.any():
        row = int(np.flatnonzero(bad_bos)[0])
        raise ValueError(f"input_ids row {row} has no bos (<sop>) token {bos}; ChatGLM-6B needs one per row")
    bad_mask = cp.asnumpy(~(has_mask | has_gmask))
    if bad_mask.any():
        row = int(np.flatnonzero(bad_mask)[0])
        raise ValueError(
            f"input_ids row {row} has neither a [gMASK] token {gmask} nor a [MASK] token {mask}; "
            "ChatGLM-6B needs one per row"
        )
    context = cp.argmax(is_bos, axis=1)[:, None]
    mask_pos = cp.where(has_gmask, cp.argmax(is_gmask, axis=1), cp.argmax(is_mask, axis=1))[:, None]
    ar = cp.arange(seq, dtype=cp.int64)[None, :]
    after = ar >= context
    overwrite = after & (True if two_d else ~has_gmask[:, None])
    pos = cp.where(overwrite, mask_pos, ar)
    if not two_d:
        return pos
    block = cp.where(after, ar - context + 1, 0)
    return cp.stack([pos, block], axis=1)


def apply_2d(x: Any, position_ids: Any, block_position_ids: Any, *, base: float, precision: str) -> Any:
    """ChatGLM-6B 2D rotary: first half of each head by ``position_ids``, second half by block ids.

    ``precision="float64"`` (the oracle's semantics) runs the fused kernel on each half (views, no
    copies), float32 arithmetic. ``"chatglm-6b-fp16"`` reproduces the released model's fp16 chain in
    CuPy float16 arithmetic: fp32 inv_freq rounded to fp16, fp16 positions, fp16 angle products,
    cos/sin rounded to fp16, each product and sum of ``q*cos + rotate_half(q)*sin`` rounded to fp16.
    """
    cp = _cupy()
    precision = _check_precision(precision)
    base = _check_base(base)
    xs, _ = _storage(x)
    if xs.ndim == 0 or xs.shape[-1] % 4 or xs.shape[-1] == 0:
        raise ValueError(f"x.shape[-1] (head_dim) must be a positive multiple of 4, got x.shape={xs.shape}")
    half = xs.shape[-1] // 2
    if precision == "float64":
        cfg = RopeConfig(half, layout="half", base=base)
        out = cp.empty(xs.shape, dtype=xs.dtype)
        for sl, ids in ((slice(0, half), position_ids), (slice(half, None), block_position_ids)):
            x_half = _wrap_like(xs[..., sl], x)
            _launch_apply(x_half, ids, cfg, None, inplace=False, sign=1.0, check=True, out=out[..., sl])
        return _wrap_like(out, x)
    x16 = (x.to_float32() if isinstance(x, Bf16Array) else xs).astype(cp.float16)
    lead = xs.shape[:-1]
    out = cp.empty(xs.shape, dtype=cp.float16)
    quarter = half // 2
    exponent = cp.arange(0, half, 2, dtype=cp.float32) / cp.float32(half)
    inv16 = (cp.float32(1.0) / cp.power(cp.float32(base), exponent)).astype(cp.float16)
    halves = (
        (slice(0, half), position_ids, "position_ids"),
        (slice(half, None), block_position_ids, "block_position_ids"),
    )
    for sl, ids, name in halves:
        pos = _to_device(ids)
        if pos.dtype.kind not in "iuf":
            raise TypeError(f"{name} must be an integer or real array, got dtype {pos.dtype}")
        if pos.size and bool(((pos < 0) | (pos != cp.floor(pos)) | (pos > 65504)).any()):
            raise ValueError(f"{name} must be integers in 0..65504 under precision='chatglm-6b-fp16'")
        freqs = pos.astype(cp.float16)[..., None] * inv16  # fp16 x fp16, rounded to fp16
        emb = cp.concatenate([freqs, freqs], axis=-1)
        cos16, sin16 = cp.cos(emb), cp.sin(emb)  # float16 in, float16 out
        cos16 = cos16.reshape((1,) * (len(lead) - pos.ndim) + cos16.shape)
        sin16 = sin16.reshape((1,) * (len(lead) - pos.ndim) + sin16.shape)
        q = x16[..., sl]
        rotated = cp.concatenate([-q[..., quarter:], q[..., :quarter]], axis=-1)
        out[..., sl] = q * cos16 + rotated * sin16
    return out
