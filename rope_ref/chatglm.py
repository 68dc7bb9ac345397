"""ChatGLM-6B (GLM-130B style) 2D rotary positions: position ids, incremental decoding and the rotation.

ChatGLM-6B gives every token two positions: its place in the prompt (frozen at the [MASK]/[gMASK] position
for the generated block) and its place inside the generated block (0 over the prompt, then 1, 2, 3, ...).
Each attention head is split in two halves; the first half is rotated by the first position, the second
half by the block position, each with the "half" (``rotate_half``) layout over ``head_dim / 2`` channels.

Source of every rule here: the released ``modeling_chatglm.py`` of THUDM/chatglm-6b (HF Hub code; final
version mirrored verbatim in GitHub yuanmeng1120/ChatGLM-6b-api ``modeling_chatglm.py`` @cbe6681c):
``ChatGLMPreTrainedModel.get_position_ids``, ``ChatGLMModel.forward`` (choice of mask token),
``ChatGLMForConditionalGeneration.prepare_inputs_for_generation`` (incremental decoding),
``SelfAttention.forward`` (2D split), ``RotaryEmbedding`` and ``apply_rotary_pos_emb_index``.
See ``docs/chatglm.md`` for a worked example.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _mp
from ._arrays import (
    as_float64,
    as_positions,
    check_broadcast,
    check_input_ids,
    check_int,
    check_real,
)
from ._exact_trig import cos_sin_of_product

__all__ = [
    "BOS_TOKEN_ID",
    "MASK_TOKEN_ID",
    "GMASK_TOKEN_ID",
    "PRECISIONS",
    "position_ids",
    "next_position_ids",
    "apply_2d",
    "fp16_cos_sin",
]

#: ``<sop>`` ("start of piece"), ``[MASK]`` and ``[gMASK]`` ids of the final THUDM/chatglm-6b config
#: (``configuration_chatglm.py``: ``bos_token_id=130004``, ``mask_token_id=130000``,
#: ``gmask_token_id=130001``; very early releases used 150004, 150000 and 150001).
BOS_TOKEN_ID = 130004
MASK_TOKEN_ID = 130000
GMASK_TOKEN_ID = 130001

#: ``"float64"``: the oracle. ``"chatglm-6b-fp16"``: the released model's fp16 arithmetic, emulated.
PRECISIONS = ("float64", "chatglm-6b-fp16")


# -- position ids ---------------------------------------------------------------------------------


def _check_token_ids(bos: Any, mask: Any, gmask: Any) -> tuple[int, int, int]:
    bos = check_int(bos, "bos_token_id")
    mask = check_int(mask, "mask_token_id")
    gmask = check_int(gmask, "gmask_token_id")
    if len({bos, mask, gmask}) != 3:
        raise ValueError(
            f"bos_token_id, mask_token_id and gmask_token_id must differ, got {bos}, {mask}, {gmask}"
        )
    return bos, mask, gmask


def _check_flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r:.60}")
    return bool(value)


def _first_index(row: np.ndarray, token: int) -> int | None:
    hits = np.flatnonzero(row == token)
    return int(hits[0]) if hits.size else None


def _row_layout(row: np.ndarray, i: int, bos: int, mask: int, gmask: int) -> tuple[int, int, bool]:
    """``(context_length, mask_position, use_gmask)`` of one row, as the released model derives them.

    ``context_length = seq.index(bos)`` (``get_position_ids``); the mask token is [gMASK] if the row has
    one, else [MASK], and its *first* occurrence is the mask position (``ChatGLMModel.forward``).
    Positions are absolute indices in the (possibly left-padded) row: padding is not skipped.
    """
    context_length = _first_index(row, bos)
    if context_length is None:
        raise ValueError(f"input_ids row {i} has no bos (<sop>) token {bos}; ChatGLM-6B needs one per row")
    gmask_position = _first_index(row, gmask)
    if gmask_position is not None:
        return context_length, gmask_position, True
    mask_position = _first_index(row, mask)
    if mask_position is None:
        raise ValueError(
            f"input_ids row {i} has neither a [gMASK] token {gmask} nor a [MASK] token {mask}; "
            "ChatGLM-6B needs one per row"
        )
    return context_length, mask_position, False


def position_ids(
    input_ids: Any,
    *,
    bos_token_id: int = BOS_TOKEN_ID,
    mask_token_id: int = MASK_TOKEN_ID,
    gmask_token_id: int = GMASK_TOKEN_ID,
    position_encoding_2d: bool = True,
) -> np.ndarray:
    """ChatGLM-6B position ids of a ``(batch, seq)`` batch of token ids, as int64.

    Follows the released ``get_position_ids`` (final version), row by row:

    * context length = index of the row's bos (``<sop>``) token; mask position = index of its [gMASK]
      if it has one, otherwise of its [MASK];
    * 2D (returns ``(batch, 2, seq)``): positions ``0..seq-1`` with every index from the context length
      onward set to the mask position (for [MASK] and [gMASK] alike); block positions 0 over the
      context, then ``1, 2, 3, ...``;
    * 1D (returns ``(batch, seq)``): ``0..seq-1``, overwritten from the context length onward by the
      mask position only for [MASK] rows, never for [gMASK] rows.

    Left padding is handled as the model handles it: indices are absolute in the padded row (pad tokens
    take positions 0, 1, ...). The tokenizer's ``_pad`` instead computes ids on the unpadded row and pads
    them with zeros; that shifts the first-half positions of a row uniformly, which RoPE's relative
    property makes invisible to attention between real tokens (``docs/chatglm.md``).

    Raises ``ValueError`` naming the row if a row has no bos token or no mask token.
    """
    ids = check_input_ids(input_ids)
    bos, mask, gmask = _check_token_ids(bos_token_id, mask_token_id, gmask_token_id)
    two_d = _check_flag(position_encoding_2d, "position_encoding_2d")
    batch, seq = ids.shape
    pos = np.tile(np.arange(seq, dtype=np.int64), (batch, 1))
    block = np.zeros((batch, seq), dtype=np.int64)
    for i in range(batch):
        context_length, mask_position, use_gmask = _row_layout(ids[i], i, bos, mask, gmask)
        if two_d or not use_gmask:
            pos[i, context_length:] = mask_position
        block[i, context_length:] = np.arange(1, seq - context_length + 1)
    if not two_d:
        return pos
    return np.stack([pos, block], axis=1)


def next_position_ids(
    input_ids: Any,
    *,
    bos_token_id: int = BOS_TOKEN_ID,
    mask_token_id: int = MASK_TOKEN_ID,
    gmask_token_id: int = GMASK_TOKEN_ID,
    position_encoding_2d: bool = True,
) -> np.ndarray:
    """Position ids of the *last* token of ``input_ids`` under incremental (KV-cached) decoding.

    ``input_ids`` is the whole sequence so far, the newly generated token last, as the released
    ``prepare_inputs_for_generation`` receives it. The new token gets ``[mask_position, seq_len -
    context_length]`` in 2D (shape ``(batch, 2, 1)``) and ``mask_position`` in 1D (shape ``(batch, 1)``).

    In 2D, and in 1D for [MASK] rows, this equals the last column of :func:`position_ids` over the full
    sequence. In 1D for [gMASK] rows the released code disagrees with itself: a full recompute keeps
    ``seq_len - 1`` but incremental decoding gives ``mask_position``; this function reproduces the
    released incremental rule (released checkpoints use 2D, so the 1D path is rarely exercised).
    """
    ids = check_input_ids(input_ids)
    bos, mask, gmask = _check_token_ids(bos_token_id, mask_token_id, gmask_token_id)
    two_d = _check_flag(position_encoding_2d, "position_encoding_2d")
    batch, seq = ids.shape
    out = np.empty((batch, 2 if two_d else 1, 1), dtype=np.int64)
    for i in range(batch):
        context_length, mask_position, _ = _row_layout(ids[i], i, bos, mask, gmask)
        out[i, 0, 0] = mask_position
        if two_d:
            out[i, 1, 0] = seq - context_length
    return out if two_d else out[:, 0, :]


# -- rotation --------------------------------------------------------------------------------------


def _check_precision(precision: Any) -> str:
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def _check_base(base: Any) -> float:
    base = check_real(base, "base")
    if not base > 1.0:
        raise ValueError(f"base must be a finite number > 1, got {base}")
    return base


def _table_indices(positions: Any, name: str) -> np.ndarray:
    """Positions as the integer row indices ``F.embedding`` needs (non-negative, at most 65504)."""
    pos = as_positions(positions, name)
    if pos.size and (np.any(pos != np.floor(pos)) or pos.min() < 0):
        bad = pos[(pos != np.floor(pos)) | (pos < 0)].flat[0]
        raise ValueError(
            f"{name} must be non-negative integers under precision='chatglm-6b-fp16' "
            f"(they index the model's cos/sin table), got {bad}"
        )
    if pos.size and pos.max() > 65504:
        raise ValueError(
            f"{name} must be <= 65504 (the largest float16) under 'chatglm-6b-fp16', got {pos.max()}"
        )
    return pos


def fp16_cos_sin(
    positions: Any, rotary_dim: int = 64, base: float = 10000.0
) -> tuple[np.ndarray, np.ndarray]:
    """The released ChatGLM-6B cos/sin table rows for ``positions``, as float16, shape ``(..., rotary_dim)``.

    Emulates ``RotaryEmbedding(dim, base, precision=torch.half)`` of the released ``modeling_chatglm.py``:

    1. ``inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim)`` in float32, then ``.half()``;
    2. ``t = arange(seq_len, dtype=float16)``: positions rounded to float16 (exact only up to 2048);
    3. ``freqs = einsum('i,j->ij', t, inv_freq)`` in float16: the exact product of two float16 values
       rounded once to float16;
    4. ``emb = cat(freqs, freqs)``; since ``precision`` is ``torch.half`` (not bfloat16) ``emb`` stays
       float16, and ``emb.cos()`` / ``emb.sin()`` are float16: PyTorch's half kernels evaluate in
       float32 and round to float16. Here the float32 value is emulated as the correctly rounded one
       (float64 rounded to float32), then rounded to float16. Where a platform's float32 sin/cos is not
       correctly rounded and the value lies at a float16 rounding midpoint, the two differ by one
       float16 ulp (measured against PyTorch 2.13 CPU: 10 of the 262144 cos/sin entries for positions
       0..2047, ``docs/chatglm.md``). No emulation can be bit exact on every platform there, since the
       float32 libraries themselves differ.
    """
    rotary_dim = check_int(rotary_dim, "rotary_dim", minimum=2)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even, got {rotary_dim}")
    base = _check_base(base)
    pos = _table_indices(positions, "positions")
    exponent = np.arange(0, rotary_dim, 2, dtype=np.float32) / np.float32(rotary_dim)
    inv32 = np.float32(1.0) / _pow_float32(float(np.float32(base)), exponent)
    inv16 = inv32.astype(np.float16)
    t16 = pos.astype(np.float16)
    # float16 * float16 is exact in float64 (11 + 11 significant bits); round the product once.
    freqs16 = (t16.astype(np.float64)[..., None] * inv16.astype(np.float64)).astype(np.float16)
    emb = np.concatenate([freqs16, freqs16], axis=-1).astype(np.float64)
    cos, sin = cos_sin_of_product(emb, 1.0)
    return cos.astype(np.float32).astype(np.float16), sin.astype(np.float32).astype(np.float16)


def _pow_float32(base: float, exponent: np.ndarray) -> np.ndarray:
    """``base ** exponent`` correctly rounded to float32, per entry (exact value from :mod:`rope_ref._mp`).

    PyTorch's float32 ``pow`` is within an ulp of this; a correctly rounded value is the one answer that
    does not depend on the CPU (``np.power`` in float32 does).
    """
    mp = _mp.ctx()
    ln_base = mp.log(_mp.exact(base))
    values = [_mp.to_float32(mp.exp(ln_base * _mp.exact(e))) for e in exponent.tolist()]
    return np.array(values, dtype=np.float32)


def _rotate_half_fp16(x16: np.ndarray, cos16: np.ndarray, sin16: np.ndarray) -> np.ndarray:
    """``q * cos + rotate_half(q) * sin`` in float16 (``apply_rotary_pos_emb_index``).

    Eager PyTorch semantics: each product and the sum are rounded to float16 (NumPy's float16 ufuncs
    compute in float32 and round, as PyTorch's half kernels do). A fused kernel that keeps the
    intermediates in float32 can differ by one float16 ulp; see ``docs/chatglm.md``.
    """
    half = x16.shape[-1] // 2
    rotated = np.concatenate([-x16[..., half:], x16[..., :half]], axis=-1)
    return np.add(np.multiply(x16, cos16), np.multiply(rotated, sin16))


def apply_2d(
    x: Any,
    position_ids: Any,
    block_position_ids: Any,
    *,
    base: float = 10000.0,
    precision: str = "float64",
) -> np.ndarray:
    """ChatGLM-6B 2D rotary: ``x[..., :hd/2]`` rotated by ``position_ids``, ``x[..., hd/2:]`` by block ids.

    ``x`` has shape ``(..., head_dim)`` with ``head_dim`` divisible by 4; both id arrays broadcast against
    ``x.shape[:-1]``. Each half is an independent half-layout RoPE over ``head_dim / 2`` channels
    (pairs ``(j, j + head_dim/4)`` inside the half), as ``SelfAttention.forward`` does with
    ``query.chunk(2, -1)`` and ``apply_rotary_pos_emb_index``.

    ``precision="float64"`` is the oracle (:func:`rope_ref.apply` with ``RopeConfig(head_dim // 2,
    layout="half", base=base)`` on each half; ids may be any real numbers). ``precision="chatglm-6b-fp16"``
    reproduces the released model's fp16 arithmetic for porters who must match it bit for bit: ``x`` is
    rounded to float16 (the model's activations are fp16), the table comes from :func:`fp16_cos_sin`,
    the rotation is computed in float16, and ids must be non-negative integers (they index the table).
    Both return float64 (the fp16 result holds exactly float16 values).
    """
    precision = _check_precision(precision)
    base = _check_base(base)
    x = as_float64(x, "x")
    if x.ndim == 0 or x.shape[-1] % 4 or x.shape[-1] == 0:
        raise ValueError(f"x.shape[-1] (head_dim) must be a positive multiple of 4, got x.shape={x.shape}")
    head_dim = x.shape[-1]
    half = head_dim // 2
    lead = x.shape[:-1]
    pos = as_positions(position_ids, "position_ids")
    blk = as_positions(block_position_ids, "block_position_ids")
    check_broadcast(pos, lead, "position_ids")
    check_broadcast(blk, lead, "block_position_ids")
    out = np.empty(x.shape, dtype=np.float64)
    if precision == "float64":
        # One instance of the multi-axis mechanism (rope_ref.multiaxis.chatglm_2d): stream 0 = position
        # ids on the first half-head, stream 1 = block ids on the second, half layout inside each.
        from . import multiaxis

        both = multiaxis.stack_positions(pos, blk, name="position_ids/block_position_ids")
        return multiaxis.apply(x, both, multiaxis.chatglm_2d(head_dim, base))
    x16 = x.astype(np.float16)
    halves = ((slice(0, half), pos, "position_ids"), (slice(half, None), blk, "block_position_ids"))
    for sl, ids, name in halves:
        cos16, sin16 = fp16_cos_sin(_table_indices(ids, name), half, base)
        cos16 = cos16.reshape((1,) * (len(lead) - ids.ndim) + cos16.shape)
        sin16 = sin16.reshape((1,) * (len(lead) - ids.ndim) + sin16.shape)
        out[..., sl] = _rotate_half_fp16(x16[..., sl], cos16, sin16)
    return out
