"""The shapes real kernels see (issue 16) on CuPy: ``apply_axes``, ``apply_qk``, ``apply_qkv`` in one launch.

Each validates its arguments on the host (the shared checks of :mod:`rope_ref.kernel_args`) and launches
one ``rope_qkv_apply_*`` kernel (``rope_kernels.cu``) that reads and writes q, k and v through their
strides and forms every token's position from ids, a cache offset or ``cu_seqlens`` itself. Semantics:
:func:`rope_ref.apply` with ``axes=`` / ``inverse=`` and :mod:`rope_ref.positions`. The public functions
with their documentation are in :mod:`rope_ref.backends.cupy`; here each takes its keywords as one
:class:`~rope_ref.conformance.protocol.KernelCall`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import KernelCall

from rope_ref.axes import parse_axes, qk_head_axis, qkv_heads
from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len
from rope_ref.kernel_args import (
    check_cu_seqlens,
    check_max_seqlen,
    check_offset,
    check_start_offsets,
    position_form,
)
from rope_ref.views import View, check_disjoint

from ._cupy_device import (
    _check_config,
    _cupy,
    _freq_table,
    _kernel,
    _positions,
    _seq_len,
    _storage,
    _wrap_like,
)
from ._cupy_launch import _launch_apply
from ._cupy_plan import (
    POS_IDS,
    POS_OFFSET,
    POS_VARLEN,
    PositionPlan,
    QkvPart,
    canonical_axes,
    element_strides,
    pack_qkv_shape,
    place_ids,
    plan_qkv,
)

__all__ = ["rotate_axes", "rotate_qk", "rotate_qkv"]

#: Positions the kernel forms from integers are exact in float64 up to here.
_EXACT_LIMIT = 2**53


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _host_integers(obj: Any, name: str) -> np.ndarray:
    """``obj`` (a Python or NumPy integer, a NumPy or CuPy integer array) as host int64; else ValueError."""
    if obj is None or isinstance(obj, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer or an integer array, got {obj!r}")
    if isinstance(obj, (int, np.integer)):
        if abs(int(obj)) > _EXACT_LIMIT:
            raise ValueError(f"{name} = {int(obj)} is beyond the exact position limit 2**53")
        return np.asarray(int(obj), dtype=np.int64)
    cp = _cupy()
    if isinstance(obj, cp.ndarray):
        arr = cp.asnumpy(obj)
    elif isinstance(obj, np.ndarray):
        arr = obj
    elif isinstance(obj, (list, tuple)):
        arr = np.asarray(obj)
    else:
        raise ValueError(f"{name} must be an integer or an integer array, got {type(obj).__name__}")
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _EXACT_LIMIT:
        raise ValueError(f"{name} holds {int(arr.max())}, beyond the exact position limit 2**53")
    return arr.astype(np.int64)


class _Positions:
    """The positions of one call: the kernel's :class:`PositionPlan`, its ids (float64, or None when the
    mode reads none) and int64 table on the device, and the seq_len a length-dependent scaling sees."""

    def __init__(self, plan: PositionPlan, ids: Any, table: Any, seq_len: int | None) -> None:
        self.plan, self.ids, self.table, self.seq_len = plan, ids, table, seq_len


def _seq_len_from_max(max_position: float | None, cfg: RopeConfig, seq_len: int | None) -> int | None:
    probe = np.empty(0) if max_position is None else np.asarray([float(max_position)])
    return resolve_seq_len(probe, cfg, seq_len)


def _resolve_positions(shape: tuple[int, ...], axes: str, cfg: RopeConfig, call: KernelCall, per_head: str):
    """Validate the positions of a call on an x of ``shape`` named by ``axes`` and plan them.

    ``per_head`` says what to do with full-rank ids that vary over the heads: ``"fallback"`` returns
    ``None`` (the caller takes the broadcasting kernel), ``"error"`` raises.
    """
    form = position_form(
        call.positions, call.offset, call.cu_seqlens, call.start_offsets, call.max_seqlen, axes=axes
    )
    if form == "positions":
        return _id_positions(shape, axes, cfg, call, per_head)
    if form == "offset":
        return _offset_positions(shape, axes, cfg, call)
    return _varlen_positions(shape, axes, cfg, call)


def _id_positions(shape: tuple[int, ...], axes: str, cfg: RopeConfig, call: KernelCall, per_head: str):
    ids = _positions(call.positions, check=True)
    strides = element_strides(ids.strides, 8, "positions")
    p_b, p_s, heads = place_ids(ids.shape, strides, axes, shape)
    if heads:
        if per_head == "fallback":
            return None
        raise ValueError(
            f"positions of shape {tuple(ids.shape)} vary over the heads of x (axes={axes!r}); q and k "
            "share one position per token"
        )
    return _Positions(PositionPlan(POS_IDS, p_b, p_s), ids, _table_dummy(), _seq_len(ids, cfg, call.seq_len))


def _offset_positions(shape: tuple[int, ...], axes: str, cfg: RopeConfig, call: KernelCall) -> _Positions:
    batch, steps = shape[axes.index("b")], shape[axes.index("s")]
    off = _host_integers(call.offset, "offset")
    check_offset(off, batch, axes)
    top = (int(off.max()) if off.size else 0) + steps - 1
    if top > _EXACT_LIMIT:
        raise ValueError(f"offset + sequence length reaches {top}, beyond the exact position limit 2**53")
    if off.ndim == 0:
        plan, table = PositionPlan(POS_OFFSET, base=int(off)), _table_dummy()
    else:
        plan, table = PositionPlan(POS_OFFSET, off_at=0), _cupy().asarray(off)
    top_pos = top if steps > 0 and batch > 0 else None
    return _Positions(plan, None, table, _seq_len_from_max(top_pos, cfg, call.seq_len))


def _varlen_positions(shape: tuple[int, ...], axes: str, cfg: RopeConfig, call: KernelCall) -> _Positions:
    t_axis = axes.index("t")
    cu = _host_integers(call.cu_seqlens, "cu_seqlens")
    lengths = check_cu_seqlens(cu, shape[t_axis], t_axis)
    n_seq = lengths.size
    base, starts, per_seq = 0, np.zeros(n_seq, dtype=np.int64), False
    if call.start_offsets is not None:
        so = _host_integers(call.start_offsets, "start_offsets")
        starts, per_seq = check_start_offsets(so, n_seq), so.ndim == 1
        base = 0 if per_seq else int(so)
    check_max_seqlen(call.max_seqlen, lengths)
    used = lengths > 0
    top = int((starts[used] + lengths[used] - 1).max()) if used.any() else None
    if top is not None and top > _EXACT_LIMIT:
        raise ValueError(
            f"start_offsets + sequence length reaches {top}, beyond the exact position limit 2**53"
        )
    table = np.concatenate([cu, starts]) if per_seq else cu
    plan = PositionPlan(POS_VARLEN, n_seq=n_seq, off_at=n_seq + 1 if per_seq else -1, base=base)
    return _Positions(plan, None, _cupy().asarray(table), _seq_len_from_max(top, cfg, call.seq_len))


@functools.cache
def _table_dummy_on(_device: int) -> Any:
    return _cupy().zeros((1,), dtype=np.int64)


def _table_dummy() -> Any:
    """A one-entry int64 device array for the ``table`` pointer of calls that read no table."""
    return _table_dummy_on(_cupy().cuda.runtime.getDevice())


def _part(xs: Any, out: Any, axes: str) -> QkvPart:
    itemsize = xs.dtype.itemsize
    sizes, x_st = canonical_axes(axes, xs.shape, element_strides(xs.strides, itemsize, "x"))
    _, o_st = canonical_axes(axes, out.shape, element_strides(out.strides, itemsize, "out"))
    return QkvPart(sizes, x_st, o_st)


def _launch_qkv(
    parts: list[tuple[Any, Any]],
    dtype_name: str,
    axes: str,
    cfg: RopeConfig,
    pos: _Positions,
    *,
    inverse: bool,
    inplace: bool,
) -> None:
    """One ``rope_qkv_apply_*`` launch over ``parts`` ((input, output) storage pairs: q, then k, then v)."""
    inv_freq, factor = _freq_table(cfg, pos.seq_len)
    plan = plan_qkv(
        dtype_name=dtype_name,
        parts=[_part(x, o, axes) for x, o in parts],
        head_dim=cfg.head_dim,
        rotary_dim=cfg.rotary_dim,
        layout=cfg.layout,
        inplace=inplace,
    )
    if plan.n_rows == 0 or sum(plan.heads) == 0:
        return
    arrays = list(parts) + [parts[0]] * (3 - len(parts))  # unused parts: never read (0 heads)
    args = (
        arrays[0][0],
        arrays[0][1],
        arrays[1][0],
        arrays[1][1],
        arrays[2][0],
        arrays[2][1],
        inv_freq if pos.ids is None else pos.ids,  # a float64 array the kernel does not read
        pos.table,
        inv_freq,
        pack_qkv_shape(plan, pos.plan),
        np.int32(plan.n_pairs),
        np.int32(plan.n_pass),
        np.int32(plan.half_layout),
        np.int32(plan.copy_pass),
        np.float32(factor),
        np.float32(-1.0 if inverse else 1.0),
    )
    _kernel(plan.kernel)(plan.grid, plan.block, args)


def _prologue(cfg: Any, call: KernelCall) -> tuple[RopeConfig, bool, bool]:
    cfg = _check_config(cfg)
    if call.axes is None:
        raise ValueError("axes= is required: it names the axes of x (e.g. 'bshd', 'bhsd', 'sbhd', 'thd')")
    return cfg, _flag(call.inverse, "inverse"), _flag(call.inplace, "inplace")


def _check_head_dim(xs: Any, cfg: RopeConfig, name: str) -> None:
    if xs.ndim == 0 or xs.shape[-1] != cfg.head_dim:
        raise ValueError(f"{name}.shape[-1] must equal head_dim={cfg.head_dim}, got {name}.shape={xs.shape}")


def rotate_axes(x: Any, cfg: RopeConfig, call: KernelCall) -> Any:
    """Rotate ``x`` (any strides) named by ``call.axes``; positions as ids, ``offset`` or ``cu_seqlens``."""
    cp = _cupy()
    cfg, inverse, inplace = _prologue(cfg, call)
    xs, dtype_name = _storage(x)
    axes = parse_axes(call.axes, xs.ndim)
    _check_head_dim(xs, cfg, "x")
    pos = _resolve_positions(xs.shape, axes, cfg, call, "fallback")
    if pos is None:  # full-rank ids varying over heads: the broadcasting kernel (x already in their order)
        sign = -1.0 if inverse else 1.0
        return _launch_apply(x, call.positions, cfg, call.seq_len, inplace=inplace, sign=sign, check=True)
    out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    _launch_qkv([(xs, out)], dtype_name, axes, cfg, pos, inverse=inverse, inplace=inplace)
    return x if inplace else _wrap_like(out, x)


def _pair(q: Any, k: Any, axes: Any) -> tuple[Any, Any, str, str, int]:
    """Storages of q and k, their dtype name, the parsed axes and the head axis; ValueError if they differ."""
    qs, q_dtype = _storage(q, "q")
    ks, k_dtype = _storage(k, "k")
    if q_dtype != k_dtype:
        raise ValueError(f"q and k must share a dtype, got {q_dtype} and {k_dtype}")
    h = qk_head_axis(tuple(qs.shape), tuple(ks.shape), axes)
    return qs, ks, q_dtype, axes, h


def _device_view(xs: Any) -> View:
    """A CuPy array's memory as a :class:`rope_ref.views.View` (device address, byte strides)."""
    ptr = getattr(xs.data, "ptr", None)  # CuPy's MemoryPointer; the CPU host shim hands NumPy arrays
    address = ptr if ptr is not None else xs.__array_interface__["data"][0]
    return View(int(address), tuple(xs.shape), tuple(xs.strides), int(xs.itemsize))


def rotate_qk(q: Any, k: Any, cfg: RopeConfig, call: KernelCall) -> tuple[Any, Any]:
    """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (Hk divides Hq) in one launch: one angle per token
    and pair, applied to every head of both. In place they may be disjoint slices of one buffer."""
    cp = _cupy()
    cfg, inverse, inplace = _prologue(cfg, call)
    qs, ks, dtype_name, axes, _ = _pair(q, k, call.axes)
    _check_head_dim(qs, cfg, "q")
    if inplace:
        check_disjoint(_device_view(qs), _device_view(ks))
    pos = _resolve_positions(qs.shape, axes, cfg, call, "error")
    qo = qs if inplace else cp.empty(qs.shape, dtype=qs.dtype)
    ko = ks if inplace else cp.empty(ks.shape, dtype=ks.dtype)
    _launch_qkv([(qs, qo), (ks, ko)], dtype_name, axes, cfg, pos, inverse=inverse, inplace=inplace)
    if inplace:
        return q, k
    return _wrap_like(qo, q), _wrap_like(ko, k)


def rotate_qkv(qkv: Any, cfg: RopeConfig, num_heads_q: Any, num_heads_kv: Any, call: KernelCall) -> Any:
    """Rotate the q and k heads of a packed ``(.., Hq + 2 Hk, ..)`` tensor in one launch; V bit for bit.

    ``num_heads_kv=None`` means ``num_heads_q`` (MHA). Out of place the same launch copies V into the new
    tensor; in place V is never read or written.
    """
    cp = _cupy()
    cfg, inverse, inplace = _prologue(cfg, call)
    xs, dtype_name = _storage(qkv, "qkv")
    num_heads_kv = num_heads_q if num_heads_kv is None else num_heads_kv
    h, hq, hk = qkv_heads(xs.shape, call.axes, num_heads_q, num_heads_kv)
    axes = parse_axes(call.axes, xs.ndim)
    _check_head_dim(xs, cfg, "qkv")
    pos = _resolve_positions(xs.shape, axes, cfg, call, "error")
    out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    lead = (slice(None),) * h
    blocks = [slice(0, hq), slice(hq, hq + hk)] + ([] if inplace else [slice(hq + hk, hq + 2 * hk)])
    parts = [(xs[lead + (b,)], out[lead + (b,)]) for b in blocks]
    _launch_qkv(parts, dtype_name, axes, cfg, pos, inverse=inverse, inplace=inplace)
    return qkv if inplace else _wrap_like(out, qkv)
