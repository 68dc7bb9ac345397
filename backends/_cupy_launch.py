"""Launches of the CuPy backend's element-wise kernels: apply (and its VJP), cos/sin, and multi-axis apply.

Each validates its inputs, plans the launch on the host (:mod:`._cupy_plan`: collapsed axes, strides in
elements, grid and block) and launches one kernel of ``rope_kernels.cu`` that reads ``x`` once and writes
the output once. The public functions with their documentation are in :mod:`rope_ref.backends.cupy`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rope_ref.config import RopeConfig

from ._cupy_device import (
    _check_config,
    _cupy,
    _freq_table,
    _kernel,
    _multiaxis_module,
    _pair_tables_cached,
    _positions,
    _seq_len,
    _storage,
    _wrap_like,
)
from ._cupy_plan import (
    MULTIAXIS_KERNEL_FOR_DTYPE,
    ApplyPlan,
    cos_sin_launch,
    element_strides,
    pack_shape,
    plan_apply,
)


def _inputs(x: Any, positions: Any, inplace: Any, check: bool) -> tuple[Any, str, Any]:
    """``(storage of x, its dtype name, positions on the device as float64)``; ``inplace`` must be a bool."""
    xs, dtype_name = _storage(x)
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace must be a bool, got {type(inplace).__name__}")
    return xs, dtype_name, _positions(positions, check)


def _plan(
    xs: Any, out: Any, dtype_name: str, pos_shape: Any, pos_strides: Any, rope: Any, inplace: bool
) -> ApplyPlan:
    """The launch plan of an apply-like kernel over ``xs`` into ``out``; ``rope`` has the channel layout
    (``head_dim``, ``rotary_dim``, ``layout``: a RopeConfig or a MultiAxisRope)."""
    itemsize = xs.dtype.itemsize
    return plan_apply(
        dtype_name=dtype_name,
        x_shape=xs.shape,
        x_strides=element_strides(xs.strides, itemsize, "x"),
        out_strides=element_strides(out.strides, itemsize, "out"),
        pos_shape=pos_shape,
        pos_strides=pos_strides,
        head_dim=rope.head_dim,
        rotary_dim=rope.rotary_dim,
        layout=rope.layout,
        inplace=inplace,
    )


def _shape_args(plan: ApplyPlan) -> tuple[Any, ...]:
    """The kernel arguments every apply-like launch passes after its tables: shape, pairs, layout."""
    return pack_shape(plan), np.int32(plan.n_pairs), np.int32(plan.n_pass), np.int32(plan.half_layout)


def _launch_apply(
    x: Any,
    positions: Any,
    cfg: RopeConfig,
    seq_len: int | None,
    *,
    inplace: bool,
    sign: float,
    check: bool,
    out: Any = None,
) -> Any:
    """Validate, plan and launch one apply kernel; ``out`` (internal) is a preallocated destination view."""
    cp = _cupy()
    cfg = _check_config(cfg)
    xs, dtype_name, pos = _inputs(x, positions, inplace, check)
    seq_len = _seq_len(pos, cfg, seq_len)
    inv_freq, factor = _freq_table(cfg, seq_len)
    if out is None:
        out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    elif inplace or out.shape != xs.shape or out.dtype != xs.dtype:
        raise ValueError(f"out must match x (shape {xs.shape}, dtype {xs.dtype}) and inplace must be False")
    pos_strides = element_strides(pos.strides, 8, "positions")
    plan = _plan(xs, out, dtype_name, pos.shape, pos_strides, cfg, inplace)
    if xs.size == 0:
        return _wrap_like(out, x)
    args = (xs, out, pos, inv_freq, *_shape_args(plan), np.int32(plan.copy_pass))
    _kernel(plan.kernel)(plan.grid, plan.block, args + (np.float32(factor), np.float32(sign)))
    return _wrap_like(out, x)


def _launch_cos_sin(positions: Any, cfg: RopeConfig, seq_len: int | None, check: bool) -> tuple[Any, Any]:
    """``(cos, sin)`` float32 of shape ``positions.shape + (rotary_dim // 2,)`` from one kernel."""
    cp = _cupy()
    cfg = _check_config(cfg)
    pos = cp.ascontiguousarray(_positions(positions, check))
    seq_len = _seq_len(pos, cfg, seq_len)
    inv_freq, factor = _freq_table(cfg, seq_len)
    n = cfg.rotary_dim // 2
    cos = cp.empty(pos.shape + (n,), dtype=cp.float32)
    sin = cp.empty(pos.shape + (n,), dtype=cp.float32)
    if pos.size:
        grid, block = cos_sin_launch(pos.size, n)
        args = (pos, inv_freq, np.int64(pos.size), np.int32(n), np.float32(factor), cos, sin)
        _kernel("rope_cos_sin_f32")(grid, block, args)
    return cos, sin


def _launch_multiaxis(
    x: Any, positions: Any, spec: Any, seq_len: int | None, *, inplace: bool, sign: float, check: bool
) -> Any:
    """Validate, plan and launch one multi-axis kernel (one read and one write of ``x``)."""
    from rope_ref.multiaxis import MultiAxisRope

    cp = _cupy()
    if not isinstance(spec, MultiAxisRope):
        raise TypeError(f"spec must be a rope_ref.multiaxis.MultiAxisRope, got {type(spec).__name__}")
    xs, dtype_name, pos = _inputs(x, positions, inplace, check)
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(
            f"positions must have a leading axis of n_streams={spec.n_streams} (one row per stream), "
            f"got shape {tuple(pos.shape)}"
        )
    lengths = {_seq_len(pos, t, seq_len) for t in spec.tables} - {None}  # the oracle's one length
    streams, phi, amp = _pair_tables_cached(
        spec, max(lengths) if lengths else seq_len, cp.cuda.runtime.getDevice()
    )
    out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    pos_strides = element_strides(pos.strides, 8, "positions")
    plan = _plan(xs, out, dtype_name, pos.shape[1:], pos_strides[1:], spec, inplace)
    if xs.size == 0:
        return _wrap_like(out, x)
    args = (xs, out, pos, np.int64(pos_strides[0]), streams, phi, amp, *_shape_args(plan))
    args += (np.int32(spec.blocks), np.int32(plan.copy_pass), np.float32(sign))
    kernel = _multiaxis_module().get_function(MULTIAXIS_KERNEL_FOR_DTYPE[dtype_name])
    kernel(plan.grid, plan.block, args)
    return _wrap_like(out, x)
