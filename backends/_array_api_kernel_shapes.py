"""The shapes real kernels see (issue 16) on any Array API namespace: axes, offsets, varlen, q/k, packed QKV.

:class:`KernelShapes` gives :class:`~rope_ref.backends.array_api.ArrayAPIBackend` the protocol operations
``apply_axes``, ``apply_qk`` and ``apply_qkv`` (see ``conformance/protocol.py``), written with standard
functions of the input's namespace only, so array-api-strict runs them too:

* positions come as ids (HF-style ``(B, S)``, per-token ``(S,)`` / ``(T,)``, a scalar, or one entry per
  leading axis), as a KV-cache ``offset`` (token ``s`` of row ``b`` at ``offset[b] + s``) or as varlen
  ``cu_seqlens`` (positions restart per sequence, plus ``start_offsets``); the sequence of each packed
  token is one ``searchsorted`` of the token index in ``cu_seqlens[1:]``;
* the tables and the rotation are the backend's own (``_rotation`` / ``_rotate_with``), so the precision
  policy is the one of ``apply``; ``inverse`` negates the angle after the sequence length of a
  length-dependent scaling was resolved from the forward positions (:func:`rope_ref.apply` semantics);
* views (transposed, sliced out of a packed buffer, non-unit strides) are read through standard
  indexing and arithmetic, which honour them; results of the out-of-place path are new arrays;
* in place (only namespaces whose arrays are mutable and whose slices and permutations are views, as
  :func:`mutable_namespace` probes: NumPy, PyTorch, CuPy, array-api-strict; not JAX) writes the rotated
  channels with ``x[..., :rotary_dim] = result``, touching only the elements of the given view;
* packed ``qkv`` is split along the head axis by basic slicing; V is never rotated (out of place it is
  carried over by ``concat``, bit for bit; in place it is never written).

Bad input raises ``ValueError`` naming the argument, checked on the host before anything is indexed
(the checks read back a few scalars: ``cu_seqlens[0]``, its last entry, whether any step is negative).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rope_ref.conformance.protocol import KernelCall, KernelShapeCalls, Unsupported

from rope_ref._arrays import to_numpy
from rope_ref.axes import parse_axes, qk_head_axis, qkv_heads
from rope_ref.kernel_args import (
    check_cu_seqlens,
    check_max_seqlen,
    check_non_negative,
    check_start_offsets,
    offset_placement,
    position_form,
)

__all__ = [
    "KERNEL_OPS",
    "KernelShapes",
    "mutable_namespace",
    "offset_positions",
    "place_positions",
    "resolve_positions",
    "split_qkv",
    "varlen_positions",
]

#: The kernel-shape operations of the protocol.
KERNEL_OPS = frozenset({"apply_axes", "apply_qk", "apply_qkv"})


def mutable_namespace(xp: Any, device: Any = None) -> bool:
    """Whether arrays of ``xp`` take ``__setitem__`` and writes through a slice or a ``permute_dims`` view
    reach the array they came from: what running in place on the runner's views needs.

    The standard leaves both open (JAX arrays are immutable; a library may copy on slicing), so this is
    probed once on a tiny array rather than assumed: True for NumPy, PyTorch, CuPy and array-api-strict
    (NumPy views underneath), False for JAX.
    """
    try:
        base = xp.zeros((2, 3), device=device)
        view = xp.permute_dims(base[:, 1:], (1, 0))  # (2, 2): base[:, 1:] transposed
        view[..., :1] = xp.ones((2, 1), device=device)
        return bool(xp.all(base[0, 1:] == 1)) and not bool(xp.any(base[1, ...] != 0))
    except Exception:  # immutable arrays raise (TypeError for JAX); anything else: not in place
        return False


def _as_array(xp: Any, device: Any, obj: Any, name: str) -> Any:
    """``obj`` as an array of ``xp`` (unchanged when it already is one; else converted on the host)."""
    import array_api_compat

    if obj is None or isinstance(obj, bool):
        raise ValueError(f"{name} must be an integer or an integer array, got {obj!r}")
    if array_api_compat.is_array_api_obj(obj):
        try:
            if array_api_compat.array_namespace(obj) is xp:
                return obj
        except TypeError:
            pass
    return xp.asarray(np.asarray(to_numpy(obj, name), order="C"), device=device)


def _integers(xp: Any, device: Any, obj: Any, name: str) -> Any:
    """An int64 array of ``obj``; a ValueError naming ``name`` for a non-integer dtype."""
    arr = _as_array(xp, device, obj, name)
    if not xp.isdtype(arr.dtype, "integral"):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    return xp.astype(arr, xp.int64)


def _cache_offset(xp: Any, device: Any, obj: Any, name: str) -> Any:
    """A validated cache offset: a 0-d or 1-D int64 array of non-negative integers (checked on the host)."""
    if isinstance(obj, int) and not isinstance(obj, bool):
        check_non_negative(np.asarray(obj), name)
        return xp.asarray(obj, dtype=xp.int64, device=device)
    off = _integers(xp, device, obj, name)
    if off.ndim > 1:
        raise ValueError(
            f"{name} must be a scalar or 1-D (one per batch row or sequence), got shape {tuple(off.shape)}"
        )
    check_non_negative(to_numpy(off, name), name)
    return off


def _seq_axis(axes: str) -> int:
    return axes.index("s" if "s" in axes else "t")


def place_positions(xp: Any, pos: Any, axes: str, shape: tuple[int, ...], name: str = "positions") -> Any:
    """``pos`` on the axes of ``x`` (shape ``shape``, axes ``axes``): one axis per leading axis of x.

    The rules of :func:`rope_ref.axes.positions_for_axes`: a scalar; ``(S,)`` / ``(T,)`` per-token ids on
    the position axis; HF-style ``(B, S)`` ids on the batch and position axes whatever their order; or an
    array with one entry (or 1) per leading axis of x.
    """
    lead = shape[:-1]
    seq_axis = _seq_axis(axes)

    def fits(got: int, want: int) -> bool:
        return got == want or got == 1

    def fail(expect: str) -> ValueError:
        return ValueError(
            f"{name} of shape {tuple(pos.shape)} do not fit x of shape {tuple(shape)} with axes={axes!r}: "
            f"expected {expect}"
        )

    placed = [1] * len(lead)
    if pos.ndim == 0:
        return xp.reshape(pos, tuple(placed))
    if pos.ndim == 1:
        if not fits(pos.shape[0], lead[seq_axis]):
            raise fail(f"({lead[seq_axis]},) per-token ids on axis {axes[seq_axis]!r}")
        placed[seq_axis] = pos.shape[0]
        return xp.reshape(pos, tuple(placed))
    if pos.ndim == 2 and "b" in axes:
        b_axis = axes.index("b")
        if not (fits(pos.shape[0], lead[b_axis]) and fits(pos.shape[1], lead[seq_axis])):
            raise fail(f"HF-style (B, S) = {(lead[b_axis], lead[seq_axis])} ids")
        placed[b_axis], placed[seq_axis] = pos.shape
        if b_axis > seq_axis:  # sbhd: the ids' (B, S) order is the reverse of x's
            pos = xp.permute_dims(pos, (1, 0))
        return xp.reshape(pos, tuple(placed))
    if pos.ndim == len(lead) and all(fits(p, n) for p, n in zip(pos.shape, lead, strict=True)):
        return pos
    raise fail(
        f"a scalar, ({lead[seq_axis]},) per-token ids, HF-style (B, S) ids or a shape broadcasting to {lead}"
    )


def offset_positions(xp: Any, device: Any, offset: Any, axes: str, shape: tuple[int, ...]) -> Any:
    """``offset[b] + s`` (or ``offset + s``) placed on the batch and position axes of ``shape``."""
    off = _cache_offset(xp, device, offset, "offset")
    placed, swap = offset_placement(tuple(off.shape), axes, shape)
    steps = xp.arange(shape[_seq_axis(axes)], dtype=xp.int64, device=device)
    if off.ndim == 0:
        return xp.reshape(steps + off, placed)
    ids = off[:, None] + steps[None, :]
    return xp.reshape(xp.permute_dims(ids, (1, 0)) if swap else ids, placed)


def varlen_positions(
    xp: Any,
    device: Any,
    cu_seqlens: Any,
    start_offsets: Any,
    max_seqlen: Any,
    axes: str,
    shape: tuple[int, ...],
) -> Any:
    """Per-token positions restarting at each ``cu_seqlens`` boundary, plus ``start_offsets[j]``.

    ``cu_seqlens`` is checked on the host first (starts at 0, non-decreasing, last entry the token count;
    ``max_seqlen``, when given, at least the longest sequence), so the ``take`` below never leaves it.
    Token ``t`` belongs to sequence ``searchsorted(cu_seqlens[1:], t, side="right")`` (empty sequences
    are skipped: their boundary repeats), and sits at ``t - cu_seqlens[j]`` within it.
    """
    if "t" not in axes:
        raise ValueError(f"cu_seqlens needs packed tokens ('t' in axes), got axes={axes!r}")
    cu = _integers(xp, device, cu_seqlens, "cu_seqlens")
    t_axis = axes.index("t")
    total = shape[t_axis]
    lengths = check_cu_seqlens(to_numpy(cu, "cu_seqlens"), total, t_axis)
    count = lengths.size
    check_max_seqlen(max_seqlen, lengths)
    tokens = xp.arange(total, dtype=xp.int64, device=device)
    seq = xp.searchsorted(cu[1:], tokens, side="right")
    pos = tokens - xp.take(cu, seq, axis=0)
    if start_offsets is not None:
        off = _cache_offset(xp, device, start_offsets, "start_offsets")
        check_start_offsets(to_numpy(off, "start_offsets"), count)
        pos = pos + (xp.take(off, seq, axis=0) if off.ndim == 1 else off)
    placed = [1] * (len(shape) - 1)
    placed[t_axis] = total
    return xp.reshape(pos, tuple(placed))


def resolve_positions(
    xp: Any,
    device: Any,
    axes: str,
    shape: tuple[int, ...],
    *,
    positions: Any = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    max_seqlen: Any = None,
) -> Any:
    """Positions with one axis per leading axis of ``shape`` from exactly one of ids, offset, cu_seqlens.

    ``max_seqlen`` is read only with ``cu_seqlens`` (the protocol passes it along for kernels needing it).
    """
    position_form(positions, offset, cu_seqlens, start_offsets)
    if offset is not None:
        return offset_positions(xp, device, offset, axes, shape)
    if cu_seqlens is not None:
        return varlen_positions(xp, device, cu_seqlens, start_offsets, max_seqlen, axes, shape)
    if isinstance(positions, bool):
        raise ValueError(f"positions must be numbers, got {positions!r}")
    pos = positions if isinstance(positions, (int, float)) else _as_array(xp, device, positions, "positions")
    if isinstance(pos, (int, float)):
        pos = xp.asarray(pos, device=device)
    return place_positions(xp, pos, axes, shape)


def _check_x(xp: Any, x: Any, cfg: Any, axes: Any, name: str) -> str:
    """``axes`` validated against ``x.ndim``; x real floating with ``head_dim`` channels."""
    axes = parse_axes(axes, x.ndim)
    if x.shape[-1] != cfg.head_dim:
        raise ValueError(
            f"{name}.shape[-1] must equal head_dim={cfg.head_dim}, got {name}.shape={tuple(x.shape)}"
        )
    if not xp.isdtype(x.dtype, "real floating"):
        raise ValueError(f"{name} must have a real floating dtype, got {x.dtype}")
    return axes


def _check_pair(q: Any, k: Any, axes: str) -> int:
    """The head axis of q and k (same shape but the heads; Hk divides Hq), or a ValueError."""
    return qk_head_axis(tuple(q.shape), tuple(k.shape), axes)


def _head_slice(h: int, start: int, stop: int) -> tuple:
    """Heads ``start:stop`` of axis ``h`` (the trailing ellipsis: the standard wants every axis indexed)."""
    return (slice(None),) * h + (slice(start, stop), ...)


def split_qkv(qkv: Any, num_heads_q: Any, num_heads_kv: Any, axes: Any) -> tuple[Any, Any, Any, int]:
    """Views ``(q, k, v)`` of a packed ``(.., Hq + 2 Hk, ..)`` array along the ``h`` axis, and that axis."""
    h, hq, hk = qkv_heads(tuple(qkv.shape), axes, num_heads_q, num_heads_kv)
    return (
        qkv[_head_slice(h, 0, hq)],
        qkv[_head_slice(h, hq, hq + hk)],
        qkv[_head_slice(h, hq + hk, hq + 2 * hk)],
        h,
    )


class KernelShapes(KernelShapeCalls):
    """Mixin: the issue-16 operations on top of the backend's ``_ns``, ``_angle_positions``, ``_seq_len``,
    ``_rotation`` and ``_rotate_with`` (see :class:`~rope_ref.backends.array_api.ArrayAPIBackend`)."""

    inplace_ops: frozenset[str] = frozenset()

    def _kernel_flags(self, op: str, inverse: Any, inplace: Any, **arrays: Any) -> None:
        """Type checks of the flags; in place only for ``inplace_ops`` and writeable arrays."""
        import array_api_compat

        for name, flag in (("inverse", inverse), ("inplace", inplace)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if not inplace:
            return
        if op not in self.inplace_ops:
            raise Unsupported(
                f"{self.name}: {op} in place needs mutable arrays whose slices are views "
                "(NumPy, PyTorch, CuPy, array-api-strict); this namespace's are not",
                reason="operation",
            )
        for name, arr in arrays.items():
            if not array_api_compat.is_writeable_array(arr):
                raise ValueError(f"inplace=True needs a writeable array, but {name} is read-only")

    def _kernel_tables(self, xp: Any, device: Any, pos: Any, cfg: Any, seq_len: Any, inverse: bool, x: Any):
        """Tables of the backend's precision policy; ``seq_len`` resolved from the forward positions."""
        apos = self._angle_positions(xp, pos, device)
        seq_len = self._seq_len(xp, apos, cfg, seq_len)
        return self._rotation(xp, device, apos, cfg, seq_len, inverse, x.dtype, x.ndim)

    def _write(self, xp: Any, x: Any, tables: Any, cfg: Any, inplace: bool) -> Any:
        """Out of place: a new array. In place: the rotated channels written into the view ``x``."""
        if not inplace:
            return self._rotate_with(xp, x, tables, cfg)
        x[..., : cfg.rotary_dim] = self._rotate_with(xp, x, tables, cfg, whole=False)
        return x

    def _axes_call(self, x: Any, cfg: Any, call: KernelCall) -> Any:
        """Rotate ``x`` whose axes ``call.axes`` names (any view); see ``Backend.apply_axes``."""
        self._kernel_flags("apply_axes", call.inverse, call.inplace, x=x)
        xp, device = self._ns(x)
        axes = _check_x(xp, x, cfg, call.axes, "x")
        pos = resolve_positions(xp, device, axes, tuple(x.shape), **call.where())
        tables = self._kernel_tables(xp, device, pos, cfg, call.seq_len, call.inverse, x)
        return self._write(xp, x, tables, cfg, call.inplace)

    def _qk_call(self, q: Any, k: Any, cfg: Any, call: KernelCall) -> tuple[Any, Any]:
        """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (Hk divides Hq) from one table build."""
        self._kernel_flags("apply_qk", call.inverse, call.inplace, q=q, k=k)
        return self._qk(q, k, cfg, call)

    def _qk(self, q: Any, k: Any, cfg: Any, call: KernelCall) -> tuple[Any, Any]:
        """:meth:`_qk_call` after the flag checks."""
        import array_api_compat

        axes, inverse, inplace = call.axes, call.inverse, call.inplace
        xp, device = self._ns(q, k)
        if k.ndim != q.ndim:
            raise ValueError(f"k has {k.ndim} axes but q has {q.ndim} (axes={axes!r})")
        axes = _check_x(xp, q, cfg, axes, "q")
        _check_x(xp, k, cfg, axes, "k")
        if k.dtype != q.dtype or array_api_compat.device(k) != device:
            raise ValueError(
                f"q and k must share dtype and device, got {q.dtype}/{device} and "
                f"{k.dtype}/{array_api_compat.device(k)}"
            )
        h = _check_pair(q, k, axes)
        pos = resolve_positions(xp, device, axes, tuple(q.shape), **call.where())
        if pos.shape[h] != 1:
            raise ValueError(
                f"positions of shape {tuple(pos.shape)} vary over the heads axis {h} (axes={axes!r}); "
                "q and k heads share one position per token"
            )
        tables = self._kernel_tables(xp, device, pos, cfg, call.seq_len, inverse, q)  # one build for q, k
        if not inplace:
            return self._rotate_with(xp, q, tables, cfg), self._rotate_with(xp, k, tables, cfg)
        q_rot = self._rotate_with(xp, q, tables, cfg, whole=False)
        k_rot = self._rotate_with(xp, k, tables, cfg, whole=False)
        rd = cfg.rotary_dim
        q[..., :rd] = q_rot
        k[..., :rd] = k_rot
        return q, k

    def _qkv_call(self, qkv: Any, cfg: Any, num_heads_q: Any, num_heads_kv: Any, call: KernelCall) -> Any:
        """Rotate the q and k heads of packed ``qkv`` (Hq + 2 Hk heads: q, k, v); V comes back as given."""
        self._kernel_flags("apply_qkv", call.inverse, call.inplace, qkv=qkv)
        q, k, v, h = split_qkv(qkv, num_heads_q, num_heads_kv, call.axes)
        if call.inplace:
            self._qk(q, k, cfg, call)  # through the views; V never written
            return qkv
        q_rot, k_rot = self._qk(q, k, cfg, call)
        xp, _ = self._ns(qkv)
        return xp.concat([q_rot, k_rot, v], axis=h)
