"""Position ids as real kernels receive them: packed varlen sequences and KV-cache offsets.

flash-attn's varlen ``apply_rotary_emb`` (``flash_attn/layers/rotary.py``, ``cu_seqlens`` and
``seqlen_offsets``) and TransformerEngine's ``thd`` format take tokens of several sequences packed along
one axis, with the boundaries in ``cu_seqlens = [0, len_0, len_0 + len_1, ..., total]``; positions restart
at each sequence, plus an optional start offset per sequence (a cached prefix). Decoding kernels and
MLX / keras-hub / torchtune / onnxruntime take a scalar or per-batch ``offset`` instead of ids: token
``s`` of batch row ``b`` is at position ``offset[b] + s``. These helpers return the float64 ids the
oracle needs, so a packed or offset call can be checked with :func:`rope_ref.apply`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import POSITION_LIMIT, check_int, to_numpy
from .axes import parse_axes
from .kernel_args import check_cu_seqlens, check_offset, check_start_offsets, position_form

__all__ = ["positions_from_cu_seqlens", "positions_from_offset", "kernel_positions"]


def _integers(obj: Any, name: str, *, ndim: int | None = None) -> np.ndarray:
    arr = to_numpy(obj, name)
    if arr.dtype.kind == "f":
        if not (np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))):
            bad = arr[~(np.isfinite(arr) & (arr == np.round(arr)))].flat[0]
            raise ValueError(f"{name} must hold integers, got {bad}")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.size and (int(arr.max()) > POSITION_LIMIT or int(arr.min()) < -POSITION_LIMIT):
        raise ValueError(f"{name} must lie within +-2**40, got {int(arr.min())}..{int(arr.max())}")
    return arr.astype(np.int64)


def positions_from_cu_seqlens(cu_seqlens: Any, start_offsets: Any = None) -> np.ndarray:
    """Per-token positions ``(total,)`` for packed sequences: ``start_offsets[j] + 0, 1, ..., len_j - 1``.

    ``cu_seqlens``: 1-D integers starting at 0, non-decreasing (empty sequences allowed), ending at the
    token count. ``start_offsets``: None (all 0), a non-negative int, or one non-negative int per
    sequence (flash-attn's ``seqlen_offsets``). Returns float64 ids for :func:`rope_ref.apply` with
    ``axes="thd"``.
    """
    cu = _integers(cu_seqlens, "cu_seqlens", ndim=1)
    lengths = check_cu_seqlens(cu)
    count = lengths.size
    if start_offsets is None:
        offsets = np.zeros(count, dtype=np.int64)
    else:
        offsets = check_start_offsets(_integers(start_offsets, "start_offsets"), count)
    total = int(cu[-1])
    sequence = np.repeat(np.arange(count), lengths)
    within = np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lengths)
    return (offsets[sequence] + within).astype(np.float64)


def positions_from_offset(offset: Any, seq_len: int, *, batch: int | None = None) -> np.ndarray:
    """Positions ``(B, S)`` (or ``(S,)`` for a scalar offset without ``batch``): ``offset[b] + s``.

    ``offset`` is a non-negative integer (a KV-cache length) or one per batch row. Use with
    ``axes="bshd"``/``"bhsd"`` in :func:`rope_ref.apply`.
    """
    seq_len = check_int(seq_len, "seq_len", minimum=0)
    off = _integers(offset, "offset")
    if np.any(off < 0):
        raise ValueError(f"offset must be >= 0 (a cache offset), got {int(off.min())}")
    steps = np.arange(seq_len, dtype=np.int64)
    if off.ndim == 0:
        ids = int(off) + steps
        if batch is not None:
            ids = np.broadcast_to(ids, (check_int(batch, "batch", minimum=1), seq_len)).copy()
    elif off.ndim == 1:
        if batch is not None and off.shape[0] != batch:
            raise ValueError(f"offset has {off.shape[0]} entries for batch={batch}")
        ids = off[:, None] + steps[None, :]
    else:
        raise ValueError(f"offset must be a scalar or 1-D (one per batch row), got shape {off.shape}")
    if ids.size and int(ids.max()) > POSITION_LIMIT:
        raise ValueError(f"offset + seq_len reaches {int(ids.max())}, beyond the position limit 2**40")
    return ids.astype(np.float64)


def kernel_positions(
    x_shape: tuple[int, ...],
    axes: str,
    *,
    positions: Any = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
) -> np.ndarray:
    """The ids of a kernel-style call, in exactly one of three forms, checked against ``x_shape``.

    ``positions``: ids as :func:`rope_ref.apply` takes them with ``axes``. ``offset`` (axes with ``b`` and
    ``s``): :func:`positions_from_offset` for the ``(B, S)`` of ``x_shape``. ``cu_seqlens`` (``thd``):
    :func:`positions_from_cu_seqlens`, whose last entry must equal the token count ``T``. Returns float64
    ids for ``rope_ref.apply(x, ids, cfg, axes=axes)``; ``ValueError`` naming the argument otherwise.
    """
    axes = parse_axes(axes, len(x_shape))
    form = position_form(positions, offset, cu_seqlens, start_offsets, axes=axes)
    if form == "positions":
        return np.asarray(to_numpy(positions, "positions"), dtype=np.float64)
    if form == "offset":
        b, s = x_shape[axes.index("b")], x_shape[axes.index("s")]
        off = _integers(offset, "offset")
        check_offset(off, b, axes)
        return positions_from_offset(off, s, batch=b)
    ids = positions_from_cu_seqlens(cu_seqlens, start_offsets)
    tokens = x_shape[axes.index("t")]
    if ids.shape[0] != tokens:
        raise ValueError(
            f"cu_seqlens ends at {ids.shape[0]} but x has {tokens} tokens (axis 't' of {tuple(x_shape)})"
        )
    return ids
