"""The glue shared by the peers' kernel-shape operations (issue 16: ``apply_axes``, ``apply_qk``,
``apply_qkv``): the positions of a call in the kernels' terms (an id grid, ``cu_seqlens`` and start
offsets, or an offset), the argument checks, and helpers for libraries that build positions as
``offset + arange`` or take one sequence per call. Used by the CPU peers and :mod:`gpu_peers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import KernelCall, KernelShapeCalls

from rope_ref.axes import qk_head_axis, qkv_heads
from rope_ref.kernel_args import (
    check_cu_seqlens,
    check_max_seqlen,
    check_offset,
    check_start_offsets,
    position_form,
)

from ._glue import Unsupported, integer_positions

__all__ = ["KernelShapes", "offset_rows", "runs"]

_AXES = ("bshd", "bhsd", "sbhd", "thd")


def _host(value: Any) -> Any:
    """A positions argument as NumPy (a Python int stays an int; torch tensors are read back)."""
    if value is None or isinstance(value, (int, np.integer)):
        return value
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


@dataclass
class _Positions:
    """A case's positions: ``grid`` the ids over ``(B, S)`` (axes with b and s) or ``(T,)`` (thd); ``cu``
    and ``starts`` when given as ``cu_seqlens`` (thd), ``offset`` (int or ``(B,)``) when given as an offset;
    ``seq_len`` what a length-dependent scaling resolves from the forward ids."""

    grid: np.ndarray
    cu: np.ndarray | None = None
    starts: Any = None
    offset: Any = None
    max_seqlen: int | None = None
    seq_len: int | None = None


def _positions(axes: str, shape: tuple[int, ...], cfg, peer: str, call: KernelCall) -> _Positions:
    from rope_ref.frequencies import resolve_seq_len

    position_form(call.positions, call.offset, call.cu_seqlens, call.start_offsets, axes=axes)
    positions, offset, cu_seqlens, start_offsets = map(
        _host, (call.positions, call.offset, call.cu_seqlens, call.start_offsets)
    )
    p = _Positions(np.zeros(0))
    if axes == "thd":
        n_tok = shape[0]
        if positions is not None:
            p.grid = np.asarray(positions).reshape(n_tok)
        else:
            lengths = check_cu_seqlens(np.asarray(cu_seqlens), n_tok)
            check_max_seqlen(call.max_seqlen, lengths)
            cu = integer_positions(cu_seqlens, peer)
            n_seq = cu.size - 1
            starts = 0 if start_offsets is None else start_offsets
            starts = check_start_offsets(integer_positions(starts, peer), n_seq)
            p.grid = np.repeat(starts - cu[:-1], lengths) + np.arange(n_tok)
            p.cu = cu
            p.max_seqlen = int(call.max_seqlen if call.max_seqlen is not None else lengths.max(initial=0))
            p.starts = (
                int(start_offsets) if np.ndim(start_offsets) == 0 and start_offsets is not None else starts
            )
    else:
        b, s = shape[axes.index("b")], shape[axes.index("s")]
        if positions is not None:
            p.grid = np.broadcast_to(np.asarray(positions), (b, s))
        else:
            off = integer_positions(offset, peer)
            check_offset(off, b, axes)
            p.grid = np.broadcast_to(off, (b,))[:, None] + np.arange(s)
            p.offset = int(offset) if np.ndim(offset) == 0 else off
    p.seq_len = resolve_seq_len(np.asarray(p.grid, dtype=np.float64), cfg, call.seq_len)
    return p


class KernelShapes(KernelShapeCalls):
    """Issue 16's ``apply_axes`` / ``apply_qk`` / ``apply_qkv`` for a peer, CPU or GPU.

    Checks the arguments, reads the positions (:func:`_positions`: a ``(B, S)`` or ``(T,)`` id grid, the
    offset, ``cu_seqlens`` and start offsets as given) and hands them to the library hooks
    ``_rotate_axes``, ``_rotate_qk`` and ``_rotate_qkv``. The CPU peers rotate out of place and implement
    ``_k_axes(x, cfg, axes, p, inverse)`` (and optionally ``_k_qk``); ``kernel_cannot`` maps an operation
    the library has no call for to the reason (reported unsupported, reason "operation"). A peer that
    runs operations in place lists them in ``inplace_ops`` and overrides ``_no_call`` and
    ``_not_in_place`` for its own wording (:class:`gpu_peers.GpuPeer`).
    """

    kernel_cannot: dict[str, str] = {}

    def _no_call(self, op: str) -> str | None:
        """Why the library has no call for ``op`` (None when it has one)."""
        default = f"{self.peer} has no packed-qkv call" if op == "apply_qkv" else None
        return self.kernel_cannot.get(op, default)

    def _not_in_place(self, op: str) -> str:
        return f"{self.peer} rotates out of place"

    def _kernel(self, op: str, main, cfg, call: KernelCall) -> _Positions:
        """Checks shared by the three operations; the case's positions in the kernel's terms."""
        reason = self._no_call(op)
        if reason is not None:
            raise Unsupported(reason, "operation")
        if call.inplace and op not in self.inplace_ops:
            raise Unsupported(self._not_in_place(op), "operation")
        axes = call.axes
        if axes not in _AXES or len(axes) != len(main.shape):
            raise ValueError(f"axes must be one of {_AXES} matching x.ndim={len(main.shape)}, got {axes!r}")
        if main.shape[-1] != cfg.head_dim:
            raise ValueError(f"last axis {main.shape[-1]} is not head_dim {cfg.head_dim}")
        return _positions(axes, tuple(main.shape), cfg, self.peer, call)

    def _axes_call(self, x, cfg, call: KernelCall):
        p = self._kernel("apply_axes", x, cfg, call)
        return self._rotate_axes(x, cfg, call.axes, p, bool(call.inverse), bool(call.inplace))

    def _qk_call(self, q, k, cfg, call: KernelCall):
        p = self._kernel("apply_qk", q, cfg, call)
        qk_head_axis(tuple(q.shape), tuple(k.shape), call.axes)
        return self._rotate_qk(q, k, cfg, call.axes, p, bool(call.inverse), bool(call.inplace))

    def _qkv_call(self, qkv, cfg, num_heads_q, num_heads_kv, call: KernelCall):
        p = self._kernel("apply_qkv", qkv, cfg, call)
        _, hq, hk = qkv_heads(tuple(qkv.shape), call.axes, num_heads_q, num_heads_kv)
        return self._rotate_qkv(qkv, cfg, call.axes, hq, hk, p, bool(call.inverse), bool(call.inplace))

    # -- library hooks (the CPU peers' defaults: out of place, through _k_axes / _k_qk) ------------------
    def _rotate_axes(self, x, cfg, axes, p, inverse, inplace):
        return self._k_axes(x, cfg, axes, p, inverse)

    def _rotate_qk(self, q, k, cfg, axes, p, inverse, inplace):
        return self._k_qk(q, k, cfg, axes, p, inverse)

    def _rotate_qkv(self, qkv, cfg, axes, hq, hk, p, inverse, inplace):
        raise Unsupported(f"{self.peer} has no packed-qkv call", "operation")

    def _k_qk(self, q, k, cfg, axes, p, inverse):
        return self._k_axes(q, cfg, axes, p, inverse), self._k_axes(k, cfg, axes, p, inverse)

    def _k_axes(self, x, cfg, axes, p, inverse):
        raise Unsupported(f"{self.peer} has no call for this shape", "operation")


def offset_rows(grid: np.ndarray, peer: str) -> np.ndarray:
    """The start of each row of a ``(B, S)`` id grid whose rows are ``start + arange(S)`` (an offset per
    row), as int64; :class:`Unsupported` for other ids (a library that builds ``offset + arange`` itself)."""
    b, s = grid.shape
    if b and s and not np.array_equal(grid - grid[:, :1], np.broadcast_to(np.arange(s), grid.shape)):
        raise Unsupported(
            f"{peer} builds positions as offset + arange(seq_len): these ids are not an offset per row"
        )
    return integer_positions(grid[:, 0] if s else np.zeros(b), peer)


def runs(p, peer: str) -> list[tuple[int, int, int]]:
    """``(start_token, end_token, first_position)`` of each run of consecutive positions of a ``thd`` case
    (one per ``cu_seqlens`` sequence; per-token ids split where they stop counting up by one)."""
    if p.cu is not None:
        cu = p.cu
        starts = np.broadcast_to(np.asarray(p.starts), (cu.size - 1,))
    else:
        g = integer_positions(p.grid, peer)
        breaks = np.flatnonzero(np.diff(g) != 1) + 1
        cu = np.concatenate([[0], breaks, [g.size]]).astype(np.int64) if g.size else np.zeros(1, np.int64)
        starts = g[cu[:-1]]
    return [(int(a), int(b), int(st)) for a, b, st in zip(cu[:-1], cu[1:], starts, strict=True) if b > a]


# -- torch views: a case's axes to the layout a library takes, and back ----------------------------------


def _ident(t):
    return t


def _swap01(t):
    return t.permute(1, 0, 2, 3)


def _swap12(t):
    return t.permute(0, 2, 1, 3)


def _thd_in(t):
    return t.unsqueeze(0)


def _thd_out(t):
    return t[0]


#: axes -> (to a view HF's apply_rotary_pos_emb takes (bshd or bhsd), back to the case's axes)
_TO_BSHD_OR_BHSD = {
    "bshd": (_ident, _ident),
    "bhsd": (_ident, _ident),
    "sbhd": (_swap01, _swap01),
    "thd": (_thd_in, _thd_out),
}

#: axes -> (to a bshd view, back)
_TO_BSHD = {**_TO_BSHD_OR_BHSD, "bhsd": (_swap12, _swap12)}
