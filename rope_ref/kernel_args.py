"""Host-side checks of a kernel-style call's arguments, shared by the oracle and every adapter.

A kernel-shape call (``apply_axes`` / ``apply_qk`` / ``apply_qkv`` of the backend protocol) takes its
positions in exactly one of three forms: ids, a KV-cache ``offset``, or packed ``cu_seqlens`` (with
``start_offsets`` and ``max_seqlen``); a packed ``qkv`` also names its head counts. The checks here work on
host data only (Python ints and NumPy integer arrays): each adapter converts its few small index arrays to
the host first (or passes shapes), so the oracle, torch, CuPy, the Array API backend and the peers raise the
same ``ValueError`` with the same words for the same bad call. Converting the values to integers (which
dtypes and Python scalars are accepted, exactness limits) stays with each adapter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .axes import qkv_heads

__all__ = [
    "position_form",
    "check_cu_seqlens",
    "check_start_offsets",
    "check_max_seqlen",
    "check_offset",
    "check_non_negative",
    "offset_placement",
    "qkv_heads",
]

_FORMS = ("positions", "offset", "cu_seqlens")


def position_form(
    positions: Any,
    offset: Any,
    cu_seqlens: Any,
    start_offsets: Any = None,
    max_seqlen: Any = None,
    *,
    axes: str | None = None,
) -> str:
    """Which form (``"positions"``, ``"offset"`` or ``"cu_seqlens"``) a call gives its positions in.

    Exactly one of ``positions``, ``offset``, ``cu_seqlens`` must be given; ``start_offsets`` and
    ``max_seqlen`` only with ``cu_seqlens`` (pass ``max_seqlen=None`` to leave it unchecked). With ``axes``
    (parsed), ``offset`` needs axes ``b`` and ``s`` and ``cu_seqlens`` needs ``t``.
    """
    given = [n for n, v in zip(_FORMS, (positions, offset, cu_seqlens), strict=True) if v is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of positions, offset, cu_seqlens; got {given or 'none'}")
    if start_offsets is not None and cu_seqlens is None:
        raise ValueError("start_offsets goes with cu_seqlens (use offset= for a cache offset per batch row)")
    if max_seqlen is not None and cu_seqlens is None:
        raise ValueError("max_seqlen goes with cu_seqlens")
    form = given[0]
    if axes is not None and form == "offset" and ("b" not in axes or "s" not in axes):
        raise ValueError(f"offset needs batch and sequence axes ('b' and 's'), got axes={axes!r}")
    if axes is not None and form == "cu_seqlens" and "t" not in axes:
        raise ValueError(f"cu_seqlens needs packed tokens ('t' in axes, e.g. 'thd'), got axes={axes!r}")
    return form


def check_cu_seqlens(cu: np.ndarray, tokens: int | None = None, t_axis: int = 0) -> np.ndarray:
    """The sequence lengths of host integer ``cu_seqlens``: 1-D, at least one entry, starting at 0,
    non-decreasing (empty sequences allowed) and, when ``tokens`` is given, ending at the token count
    (``x.shape[t_axis]``)."""
    cu = np.asarray(cu)
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-D with at least one entry, got shape {tuple(cu.shape)}")
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {cu[:4].tolist()}")
    lengths = np.diff(cu)
    if np.any(lengths < 0):
        j = int(np.flatnonzero(lengths < 0)[0])
        raise ValueError(f"cu_seqlens must be non-decreasing, got {int(cu[j])} then {int(cu[j + 1])} at {j}")
    if tokens is not None and int(cu[-1]) != tokens:
        raise ValueError(
            f"cu_seqlens[-1] = {int(cu[-1])} must equal the token count x.shape[{t_axis}] = {tokens}"
        )
    return lengths


def check_non_negative(arr: np.ndarray, name: str) -> None:
    """A cache offset (``offset`` / ``start_offsets``) of host integers is never negative."""
    arr = np.asarray(arr)
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"{name} must be >= 0 (a cache offset), got {int(arr.min())}")


def check_start_offsets(starts: np.ndarray, count: int) -> np.ndarray:
    """Host integer ``start_offsets`` (a scalar or one per sequence, never negative) as ``(count,)`` int64."""
    starts = np.asarray(starts)
    if starts.ndim != 0 and starts.shape != (count,):
        raise ValueError(
            f"start_offsets must be a scalar or have {count} entries, got shape {tuple(starts.shape)}"
        )
    check_non_negative(starts, "start_offsets")
    return np.full(count, int(starts), dtype=np.int64) if starts.ndim == 0 else starts.astype(np.int64)


def check_max_seqlen(max_seqlen: Any, lengths: np.ndarray) -> None:
    """``max_seqlen`` (None, or an int at least the longest sequence of ``lengths``)."""
    if max_seqlen is None:
        return
    if isinstance(max_seqlen, (bool, np.bool_)) or not isinstance(max_seqlen, (int, np.integer)):
        raise ValueError(f"max_seqlen must be an int, got {max_seqlen!r}")
    longest = int(np.max(lengths)) if np.size(lengths) else 0
    if int(max_seqlen) < longest:
        raise ValueError(f"max_seqlen = {int(max_seqlen)} is shorter than the longest sequence ({longest})")


def check_offset(offset: np.ndarray, batch: int, axes: str) -> None:
    """Host integer ``offset``: a scalar or one per batch row (``batch`` of them), never negative."""
    offset = np.asarray(offset)
    if offset.ndim > 1:
        raise ValueError(f"offset must be a scalar or 1-D (one per batch row), got shape {offset.shape}")
    check_non_negative(offset, "offset")
    if offset.ndim == 1:
        _check_rows(offset.shape[0], batch, axes)


def _check_rows(entries: int, batch: int, axes: str) -> None:
    if entries != batch:
        raise ValueError(f"offset has {entries} entries but x has batch {batch} (axes={axes!r})")


def offset_placement(offset_shape: tuple[int, ...], axes: str, shape: tuple[int, ...]) -> tuple[tuple, bool]:
    """Where the ids ``offset[b] + s`` of an ``offset`` of ``offset_shape`` go on an x of ``shape``.

    Returns ``(placed, swap)``: reshape the ``(S,)`` ids of a scalar offset, or the ``(B, S)`` ids of a
    per-row offset (transposed first when ``swap``: the batch axis comes after the sequence axis, as in
    ``sbhd``), to ``placed``, which has one axis per leading axis of x. The sequence axis is ``s`` (else
    ``t``, where a scalar offset is allowed). A per-row offset needs a ``b`` axis with as many rows.
    """
    lead = shape[:-1]
    seq_axis = axes.index("s" if "s" in axes else "t")
    placed = [1] * len(lead)
    placed[seq_axis] = lead[seq_axis]
    if len(offset_shape) == 0:
        return tuple(placed), False
    if "b" not in axes:
        raise ValueError(
            f"offset of shape {tuple(offset_shape)} is per batch row but axes={axes!r} has no 'b' axis "
            "(use cu_seqlens with start_offsets for packed sequences)"
        )
    b_axis = axes.index("b")
    if offset_shape[0] != lead[b_axis]:
        raise ValueError(
            f"offset has {offset_shape[0]} entries but x has batch {lead[b_axis]} (axes={axes!r})"
        )
    placed[b_axis] = lead[b_axis]
    return tuple(placed), b_axis > seq_axis
