"""Positions of the torch adapter's kernel shapes: ids placed on named axes, KV-cache offsets, varlen.

:func:`resolve_positions` turns exactly one of ``positions`` (scalar, per-token, HF ``(B, S)`` or full),
``offset=`` (``offset[b] + s``) and ``cu_seqlens=`` / ``start_offsets=`` (positions restarting per
packed sequence) into positions that broadcast against ``x.shape[:-1]``; the semantics are
:mod:`rope_ref.positions`.
"""

from __future__ import annotations

from typing import Any

import torch

from rope_ref.axes import parse_axes
from rope_ref.kernel_args import check_cu_seqlens, check_non_negative, offset_placement, position_form

from ._torch_checks import as_positions

__all__ = ["place_positions", "offset_positions", "varlen_positions", "resolve_positions"]


def _eager() -> bool:
    """Whether data-dependent checks may run (not while ``torch.compile`` traces)."""
    return not torch.compiler.is_compiling()


def place_positions(
    pos: torch.Tensor, axes: str, shape: tuple[int, ...], name: str = "positions"
) -> torch.Tensor:
    """``pos`` (scalar, per-token, HF ``(B, S)`` or full) reshaped onto the ``axes`` of ``shape``."""
    lead = shape[:-1]
    seq_axis = axes.index("s" if "s" in axes else "t")

    def fits(got: int, want: int) -> bool:
        return got == want or got == 1

    if pos.ndim == 0:
        return pos
    placed = [1] * len(lead)
    if pos.ndim == 1 and fits(pos.shape[0], lead[seq_axis]):
        placed[seq_axis] = pos.shape[0]
        return pos.reshape(placed)
    if pos.ndim == 2 and "b" in axes and len(lead) > 2:
        b_axis = axes.index("b")
        if fits(pos.shape[0], lead[b_axis]) and fits(pos.shape[1], lead[seq_axis]):
            placed[b_axis], placed[seq_axis] = pos.shape
            return (pos.T if b_axis > seq_axis else pos).reshape(placed)
    if pos.ndim == len(lead) and all(fits(p, n) for p, n in zip(pos.shape, lead, strict=True)):
        return pos
    raise ValueError(
        f"{name} of shape {tuple(pos.shape)} do not fit x of shape {tuple(shape)} with axes={axes!r}: "
        f"expected a scalar, ({lead[seq_axis]},) per-token ids, HF-style (B, S) ids or a shape "
        f"broadcasting to {tuple(lead)}"
    )


def _int_tensor(obj: Any, name: str, device: torch.device) -> torch.Tensor:
    """An integer tensor (int64) from ``obj``; a ValueError naming ``name`` for anything else."""
    if isinstance(obj, bool) or obj is None:
        raise ValueError(f"{name} must be an integer or integer tensor, got {obj!r}")
    if isinstance(obj, int):
        return torch.tensor(obj, dtype=torch.int64, device=device)
    t = obj if isinstance(obj, torch.Tensor) else torch.as_tensor(obj)
    if t.dtype.is_floating_point or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integers, got dtype {t.dtype}")
    return t.to(device=device, dtype=torch.int64)


def _check_offset(obj: Any, name: str, device: torch.device) -> torch.Tensor:
    t = _int_tensor(obj, name, device)
    if t.ndim > 1:
        raise ValueError(
            f"{name} must be a scalar or 1-D (one per batch row or sequence), got {tuple(t.shape)}"
        )
    if _eager():
        check_non_negative(t.cpu().numpy(), name)
    return t


def offset_positions(offset: Any, axes: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``offset[b] + s`` (or ``offset + s``) placed on the ``b`` and ``s`` axes of ``shape``."""
    if isinstance(offset, int) and not isinstance(offset, bool):
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (a cache offset), got {offset}")
        off = None
    else:
        off = _check_offset(offset, "offset", device)
    placed, swap = offset_placement(() if off is None else tuple(off.shape), axes, shape)
    steps = torch.arange(shape[axes.index("s" if "s" in axes else "t")], device=device)
    if off is None:
        return (steps + offset).reshape(placed)
    if off.ndim == 0:
        return (steps + off).reshape(placed)
    ids = off[:, None] + steps[None, :]
    return (ids.T if swap else ids).reshape(placed)


def varlen_positions(
    cu_seqlens: Any, start_offsets: Any, axes: str, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """Per-token positions restarting at each ``cu_seqlens`` boundary (plus ``start_offsets[j]``)."""
    if "t" not in axes:
        raise ValueError(f"cu_seqlens needs packed tokens ('t' in axes), got axes={axes!r}")
    cu = _int_tensor(cu_seqlens, "cu_seqlens", device)
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-D with at least one entry, got shape {tuple(cu.shape)}")
    t_axis = axes.index("t")
    total = shape[t_axis]
    count = cu.shape[0] - 1
    if _eager():
        check_cu_seqlens(cu.cpu().numpy(), total, t_axis)
    tokens = torch.arange(total, device=device)
    seq = torch.searchsorted(cu[1:], tokens, right=True).clamp_(max=max(count - 1, 0))
    pos = tokens - cu[seq]
    if start_offsets is not None:
        off = _check_offset(start_offsets, "start_offsets", device)
        if off.ndim == 1:
            if off.shape[0] != count:
                raise ValueError(
                    f"start_offsets must be a scalar or have {count} entries, got {tuple(off.shape)}"
                )
            off = off[seq]
        pos = pos + off
    placed = [1] * (len(shape) - 1)
    placed[t_axis] = total
    return pos.reshape(placed)


def resolve_positions(
    x: torch.Tensor,
    positions: Any,
    axes: str | None,
    offset: Any,
    cu_seqlens: Any,
    start_offsets: Any,
) -> torch.Tensor:
    """Positions broadcasting against ``x.shape[:-1]`` from exactly one of ids, ``offset``, ``cu_seqlens``."""
    position_form(positions, offset, cu_seqlens, start_offsets)  # axes=None: a scalar offset may go on 't'
    shape = tuple(x.shape)
    if axes is None:
        if positions is None:
            raise ValueError("offset= and cu_seqlens= need axes= (e.g. 'bshd' or 'thd')")
        return as_positions(positions, x.device)
    axes = parse_axes(axes, x.ndim)
    if offset is not None:
        return offset_positions(offset, axes, shape, x.device)
    if cu_seqlens is not None:
        return varlen_positions(cu_seqlens, start_offsets, axes, shape, x.device)
    return place_positions(as_positions(positions, x.device), axes, shape)
