"""ChatGLM-6B cases shared by the backends' ChatGLM tests, written out by hand from the released
``get_position_ids`` and ``RotaryEmbedding`` (THUDM/chatglm-6b ``modeling_chatglm.py``)."""

from __future__ import annotations

import math

import numpy as np

BOS, MASK, GMASK = 130004, 130000, 130001
TOKENS = dict(bos_token_id=BOS, mask_token_id=MASK, gmask_token_id=GMASK)

# Row 0: [MASK] only, two bos (the first counts). Row 1: [MASK] before the first of two [gMASK]s (the
# [gMASK] wins), bos later. Row 2: [gMASK] at 0, bos at 1 (context of length 1).
ROWS = [
    [5, MASK, 7, BOS, 11, BOS, 12],
    [MASK, GMASK, 6, GMASK, BOS, 9, 9],
    [GMASK, BOS, 3, 4, MASK, 6, 7],
]
# 2D: positions frozen at the mask index from the first bos on; block ids 0 before it, then 1, 2, ...
ROWS_2D = [
    [[0, 1, 2, 1, 1, 1, 1], [0, 0, 0, 1, 2, 3, 4]],
    [[0, 1, 2, 3, 1, 1, 1], [0, 0, 0, 0, 1, 2, 3]],
    [[0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6]],
]
# 1D: only [MASK]-only rows are frozen
ROWS_1D = [[0, 1, 2, 1, 1, 1, 1], list(range(7)), list(range(7))]
# (rows, error) pairs: a row without bos, a row without either mask, each after a good row
BAD_ROWS = [
    ([[5, MASK, BOS, 1], [5, MASK, 7, 1]], "row 1 has no bos"),
    ([[5, MASK, BOS, 1], [5, 6, BOS, 1]], r"row 1 has neither a \[gMASK\]"),
    ([[5, 6, BOS, 1], [5, MASK, BOS, 1]], "row 0 has neither"),
]


def loop_2d(x: np.ndarray, pos: np.ndarray, blk: np.ndarray, base: float) -> np.ndarray:
    """Each half head a half-layout RoPE over D/2 channels (pairs (i, i + D/4)), first half by ``pos``,
    second by ``blk``; x is (rows, D), pos and blk are (rows,). RoFormer eq. 34, one pair at a time."""
    out = np.array(x, dtype=np.float64, copy=True)
    half = x.shape[-1] // 2
    for r in range(x.shape[0]):
        for start, m in ((0, pos[r]), (half, blk[r])):
            for i in range(half // 2):
                theta = float(m) * math.pow(base, -2.0 * i / half)
                a, b = start + i, start + i + half // 2
                xa, xb = float(x[r, a]), float(x[r, b])
                out[r, a] = xa * math.cos(theta) - xb * math.sin(theta)
                out[r, b] = xb * math.cos(theta) + xa * math.sin(theta)
    return out


def released_fp16(x: np.ndarray, pos: np.ndarray, blk: np.ndarray, base: float) -> np.ndarray:
    """The released model's fp16 RotaryEmbedding and apply, every op rounded to float16 (NumPy): inv_freq
    in float32 then ``.half()``, fp16 angles, cos/sin rounded to fp16, ``q cos + rotate_half(q) sin``."""
    x16 = x.astype(np.float16)
    half = x.shape[-1] // 2
    q = half // 2
    parts = []
    for sl, ids in ((slice(0, half), pos), (slice(half, None), blk)):
        exponent = np.arange(0, half, 2, dtype=np.float32) / np.float32(half)
        inv = (np.float32(1.0) / np.power(np.float32(base), exponent)).astype(np.float16)
        freqs = ids.astype(np.float16)[..., None] * inv
        cos = np.cos(freqs.astype(np.float32)).astype(np.float16)
        sin = np.sin(freqs.astype(np.float32)).astype(np.float16)
        cos, sin = np.concatenate((cos, cos), -1), np.concatenate((sin, sin), -1)
        part = x16[..., sl]
        rotated = np.concatenate((-part[..., q:], part[..., :q]), -1)
        parts.append(part * cos + rotated * sin)
    return np.concatenate(parts, -1)


def fp16_tolerance(want: np.ndarray) -> float:
    """cos/sin of an fp16 angle may differ by one fp16 ulp between libms: 2 ulps of the largest output."""
    return 2 * 2.0**-10 * float(np.abs(want).max())
