"""CuPy versions of the ChatGLM-6B 2D rotary and RoFormer's decay bound, and the kernel-shape operations.

Semantics are :mod:`rope_ref.chatglm` and :func:`rope_ref.decay.relative_upper_bound`; the sources of
every rule are cited there (THUDM/chatglm-6b ``modeling_chatglm.py``; RoFormer §3.4.3).

The kernel-shape operations of issue 16 (:func:`apply_axes`, :func:`apply_qk`, :func:`apply_qkv`) validate
their arguments here and launch one ``rope_qkv_apply_*`` kernel (``rope_kernels.cu``) that reads and
writes q, k and v through their strides and forms every token's position from ids, a cache offset or
``cu_seqlens`` itself. Semantics: :func:`rope_ref.apply` with ``axes=`` / ``inverse=`` and
:mod:`rope_ref.positions`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rope_ref.chatglm import _check_base, _check_flag, _check_precision, _check_token_ids
from rope_ref.config import RopeConfig
from rope_ref.views import View, check_disjoint

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

__all__ = ["position_ids", "apply_2d", "relative_upper_bound", "apply_axes", "apply_qk", "apply_qkv"]


def _cp() -> Any:
    import cupy

    return cupy


def _device(a: Any) -> Any:
    cp = _cp()
    return a if isinstance(a, cp.ndarray) else cp.asarray(np.asarray(a))


def position_ids(
    input_ids: Any, *, bos_token_id: int, mask_token_id: int, gmask_token_id: int, position_encoding_2d: bool
) -> Any:
    """ChatGLM-6B ``get_position_ids`` (final version) for a ``(batch, seq)`` cupy batch, as int64.

    Context length = first bos index; mask position = first [gMASK] if the row has one, else first
    [MASK]; 2D overwrites positions from the context length on with the mask position (both mask
    kinds), 1D only for [MASK] rows; block ids are 0 over the context, then 1, 2, ...
    """
    cp = _cp()
    ids = _device(input_ids)
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
    from .cupy import Bf16Array, _launch_apply, _storage, _wrap_like

    cp = _cp()
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
        pos = _device(ids)
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


def relative_upper_bound(distances: Any, cfg: RopeConfig, *, max_bytes: int = 256 * 2**20) -> Any:
    """RoFormer §3.4.3 relative upper bound (1/(d/2)) sum_j |S_j(r)| in CuPy float64, shape of ``distances``.

    S_j(r) = sum_{i<j} e^{i r theta_i}; theta from the oracle's float64 frequency table; the seq_len a
    length-dependent scaling sees is max|r| + 1 (as :func:`rope_ref.decay.relative_upper_bound`).
    """
    import rope_ref
    from rope_ref.frequencies import resolve_seq_len

    cp = _cp()
    r = _device(distances)
    if r.dtype.kind not in "iuf":
        raise TypeError(f"distances must be an integer or real array, got dtype {r.dtype}")
    r = r.astype(cp.float64)
    if r.size and not bool(cp.isfinite(r).all()):
        raise ValueError("distances must be finite")
    probe = np.asarray([float(cp.abs(r).max())]) if r.size else np.empty(0)
    theta = cp.asarray(rope_ref.inv_freq(cfg, resolve_seq_len(probe, cfg, None)))
    flat = r.reshape(-1)
    out = cp.empty(flat.shape, dtype=cp.float64)
    rows = max(1, max_bytes // (2 * 8 * theta.size))
    for start in range(0, flat.size, rows):
        angle = flat[start : start + rows, None] * theta[None, :]
        re = cp.cumsum(cp.cos(angle), axis=1)
        im = cp.cumsum(cp.sin(angle), axis=1)
        out[start : start + rows] = cp.hypot(re, im).mean(axis=1)
    return out.reshape(r.shape)


# -- the shapes real kernels see (issue 16) -------------------------------------------------------------

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
    cp = _cp()
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


def _non_negative(arr: np.ndarray, name: str) -> None:
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"{name} must be >= 0 (a cache offset), got {int(arr.min())}")


class _Positions:
    """The positions of one call: the kernel's :class:`PositionPlan`, its ids (float64, or None when the
    mode reads none) and int64 table on the device, and the seq_len a length-dependent scaling sees."""

    def __init__(self, plan: PositionPlan, ids: Any, table: Any, seq_len: int | None) -> None:
        self.plan, self.ids, self.table, self.seq_len = plan, ids, table, seq_len


def _seq_len_from_max(max_position: float | None, cfg: RopeConfig, seq_len: int | None) -> int | None:
    from rope_ref.frequencies import resolve_seq_len

    probe = np.empty(0) if max_position is None else np.asarray([float(max_position)])
    return resolve_seq_len(probe, cfg, seq_len)


def _resolve_positions(
    shape: tuple[int, ...],
    axes: str,
    cfg: RopeConfig,
    *,
    positions: Any,
    offset: Any,
    cu_seqlens: Any,
    start_offsets: Any,
    max_seqlen: Any,
    seq_len: int | None,
    per_head: str,
) -> _Positions:
    """Validate the positions of a call on an x of ``shape`` named by ``axes`` and plan them.

    ``per_head`` says what to do with full-rank ids that vary over the heads: ``"fallback"`` returns
    ``None`` (the caller takes the broadcasting kernel), ``"error"`` raises.
    """
    from .cupy import _positions, _seq_len

    cp = _cp()
    given = [
        n
        for n, v in (("positions", positions), ("offset", offset), ("cu_seqlens", cu_seqlens))
        if v is not None
    ]
    if len(given) != 1:
        raise ValueError(f"give exactly one of positions, offset, cu_seqlens; got {given or 'none'}")
    if start_offsets is not None and cu_seqlens is None:
        raise ValueError("start_offsets goes with cu_seqlens (use offset= for a cache offset per batch row)")
    if max_seqlen is not None and cu_seqlens is None:
        raise ValueError("max_seqlen goes with cu_seqlens")
    if positions is not None:
        ids = _positions(positions, check=True)
        strides = element_strides(ids.strides, 8, "positions")
        p_b, p_s, heads = place_ids(ids.shape, strides, axes, shape)
        if heads:
            if per_head == "fallback":
                return None  # type: ignore[return-value]
            raise ValueError(
                f"positions of shape {tuple(ids.shape)} vary over the heads of x (axes={axes!r}); q and k "
                "share one position per token"
            )
        return _Positions(PositionPlan(POS_IDS, p_b, p_s), ids, _table_dummy(), _seq_len(ids, cfg, seq_len))
    if offset is not None:
        if "b" not in axes or "s" not in axes:
            raise ValueError(f"offset needs batch and sequence axes ('b' and 's'), got axes={axes!r}")
        batch, steps = shape[axes.index("b")], shape[axes.index("s")]
        off = _host_integers(offset, "offset")
        if off.ndim > 1:
            raise ValueError(f"offset must be a scalar or 1-D (one per batch row), got shape {off.shape}")
        _non_negative(off, "offset")
        if off.ndim == 1 and off.shape[0] != batch:
            raise ValueError(f"offset has {off.shape[0]} entries but x has batch {batch} (axes={axes!r})")
        top = (int(off.max()) if off.size else 0) + steps - 1
        if top > _EXACT_LIMIT:
            raise ValueError(f"offset + sequence length reaches {top}, beyond the exact position limit 2**53")
        if off.ndim == 0:
            plan, table = PositionPlan(POS_OFFSET, base=int(off)), _table_dummy()
        else:
            plan, table = PositionPlan(POS_OFFSET, off_at=0), cp.asarray(off)
        top_pos = top if steps > 0 and batch > 0 else None
        return _Positions(plan, None, table, _seq_len_from_max(top_pos, cfg, seq_len))
    if "t" not in axes:
        raise ValueError(f"cu_seqlens needs packed tokens ('t' in axes, e.g. 'thd'), got axes={axes!r}")
    t_axis = axes.index("t")
    total = shape[t_axis]
    cu = _host_integers(cu_seqlens, "cu_seqlens")
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-D with at least one entry, got shape {cu.shape}")
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {cu[:4].tolist()}")
    lengths = np.diff(cu)
    if np.any(lengths < 0):
        j = int(np.flatnonzero(lengths < 0)[0])
        raise ValueError(f"cu_seqlens must be non-decreasing, got {int(cu[j])} then {int(cu[j + 1])} at {j}")
    if int(cu[-1]) != total:
        raise ValueError(
            f"cu_seqlens[-1] = {int(cu[-1])} must equal the token count x.shape[{t_axis}] = {total}"
        )
    n_seq = lengths.size
    base, starts, per_seq = 0, np.zeros(n_seq, dtype=np.int64), False
    if start_offsets is not None:
        so = _host_integers(start_offsets, "start_offsets")
        _non_negative(so, "start_offsets")
        if so.ndim == 0:
            base = int(so)
            starts += base
        elif so.shape != (n_seq,):
            raise ValueError(f"start_offsets must be a scalar or have {n_seq} entries, got shape {so.shape}")
        else:
            starts, per_seq = so, True
    longest = int(lengths.max()) if n_seq else 0
    if max_seqlen is not None:
        if isinstance(max_seqlen, (bool, np.bool_)) or not isinstance(max_seqlen, (int, np.integer)):
            raise ValueError(f"max_seqlen must be an int, got {max_seqlen!r}")
        if int(max_seqlen) < longest:
            raise ValueError(
                f"max_seqlen = {int(max_seqlen)} is shorter than the longest sequence ({longest})"
            )
    used = lengths > 0
    top = int((starts[used] + lengths[used] - 1).max()) if used.any() else None
    if top is not None and top > _EXACT_LIMIT:
        raise ValueError(
            f"start_offsets + sequence length reaches {top}, beyond the exact position limit 2**53"
        )
    table = np.concatenate([cu, starts]) if per_seq else cu
    plan = PositionPlan(POS_VARLEN, n_seq=n_seq, off_at=n_seq + 1 if per_seq else -1, base=base)
    return _Positions(plan, None, cp.asarray(table), _seq_len_from_max(top, cfg, seq_len))


@functools.cache
def _table_dummy_on(_device: int) -> Any:
    return _cp().zeros((1,), dtype=np.int64)


def _table_dummy() -> Any:
    """A one-entry int64 device array for the ``table`` pointer of calls that read no table."""
    return _table_dummy_on(_cp().cuda.runtime.getDevice())


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
    from .cupy import _freq_table, _kernel

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


def _prologue(cfg: Any, axes: Any, inverse: Any, inplace: Any) -> tuple[RopeConfig, bool, bool]:
    from .cupy import _check_config

    cfg = _check_config(cfg)
    if axes is None:
        raise ValueError("axes= is required: it names the axes of x (e.g. 'bshd', 'bhsd', 'sbhd', 'thd')")
    return cfg, _flag(inverse, "inverse"), _flag(inplace, "inplace")


def _check_head_dim(xs: Any, cfg: RopeConfig, name: str) -> None:
    if xs.ndim == 0 or xs.shape[-1] != cfg.head_dim:
        raise ValueError(f"{name}.shape[-1] must equal head_dim={cfg.head_dim}, got {name}.shape={xs.shape}")


def apply_axes(
    x: Any,
    cfg: RopeConfig,
    *,
    axes: str,
    positions: Any = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    max_seqlen: int | None = None,
    inverse: bool = False,
    inplace: bool = False,
    seq_len: int | None = None,
) -> Any:
    """Rotate ``x`` (any strides) named by ``axes``; positions as ids, ``offset`` or ``cu_seqlens``."""
    from rope_ref.axes import parse_axes

    from .cupy import _launch_apply, _storage, _wrap_like

    cp = _cp()
    cfg, inverse, inplace = _prologue(cfg, axes, inverse, inplace)
    xs, dtype_name = _storage(x)
    axes = parse_axes(axes, xs.ndim)
    _check_head_dim(xs, cfg, "x")
    pos = _resolve_positions(
        xs.shape,
        axes,
        cfg,
        positions=positions,
        offset=offset,
        cu_seqlens=cu_seqlens,
        start_offsets=start_offsets,
        max_seqlen=max_seqlen,
        seq_len=seq_len,
        per_head="fallback",
    )
    if pos is None:  # full-rank ids varying over heads: the broadcasting kernel (x already in their order)
        sign = -1.0 if inverse else 1.0
        return _launch_apply(x, positions, cfg, seq_len, inplace=inplace, sign=sign, check=True)
    out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    _launch_qkv([(xs, out)], dtype_name, axes, cfg, pos, inverse=inverse, inplace=inplace)
    return x if inplace else _wrap_like(out, x)


def _pair(q: Any, k: Any, axes: Any) -> tuple[Any, Any, str, str, int]:
    """Storages of q and k, their dtype name, the parsed axes and the head axis; ValueError if they differ."""
    from rope_ref.axes import qk_head_axis

    from .cupy import _storage

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


def apply_qk(
    q: Any,
    k: Any,
    cfg: RopeConfig,
    *,
    axes: str,
    positions: Any = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    max_seqlen: int | None = None,
    inverse: bool = False,
    inplace: bool = False,
    seq_len: int | None = None,
) -> tuple[Any, Any]:
    """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (Hk divides Hq) in one launch: one angle per token
    and pair, applied to every head of both. In place they may be disjoint slices of one buffer."""
    from .cupy import _wrap_like

    cp = _cp()
    cfg, inverse, inplace = _prologue(cfg, axes, inverse, inplace)
    qs, ks, dtype_name, axes, _ = _pair(q, k, axes)
    _check_head_dim(qs, cfg, "q")
    if inplace:
        check_disjoint(_device_view(qs), _device_view(ks))
    pos = _resolve_positions(
        qs.shape,
        axes,
        cfg,
        positions=positions,
        offset=offset,
        cu_seqlens=cu_seqlens,
        start_offsets=start_offsets,
        max_seqlen=max_seqlen,
        seq_len=seq_len,
        per_head="error",
    )
    qo = qs if inplace else cp.empty(qs.shape, dtype=qs.dtype)
    ko = ks if inplace else cp.empty(ks.shape, dtype=ks.dtype)
    _launch_qkv([(qs, qo), (ks, ko)], dtype_name, axes, cfg, pos, inverse=inverse, inplace=inplace)
    if inplace:
        return q, k
    return _wrap_like(qo, q), _wrap_like(ko, k)


def apply_qkv(
    qkv: Any,
    cfg: RopeConfig,
    *,
    axes: str,
    num_heads_q: int,
    num_heads_kv: int | None = None,
    positions: Any = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    max_seqlen: int | None = None,
    inverse: bool = False,
    inplace: bool = False,
    seq_len: int | None = None,
) -> Any:
    """Rotate the q and k heads of a packed ``(.., Hq + 2 Hk, ..)`` tensor in one launch; V bit for bit.

    ``num_heads_kv`` defaults to ``num_heads_q`` (MHA). Out of place the same launch copies V into the new
    tensor; in place V is never read or written.
    """
    from rope_ref.axes import parse_axes

    from .cupy import _storage, _wrap_like

    cp = _cp()
    cfg, inverse, inplace = _prologue(cfg, axes, inverse, inplace)
    xs, dtype_name = _storage(qkv, "qkv")
    axes = parse_axes(axes, xs.ndim)
    if "h" not in axes:
        raise ValueError(f"axes={axes!r} has no head axis 'h' to split")
    num_heads_kv = num_heads_q if num_heads_kv is None else num_heads_kv
    for name, n in (("num_heads_q", num_heads_q), ("num_heads_kv", num_heads_kv)):
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    hq, hk = int(num_heads_q), int(num_heads_kv)
    h = axes.index("h")
    if xs.shape[h] != hq + 2 * hk:
        raise ValueError(
            f"qkv.shape[{h}] = {xs.shape[h]} does not split as num_heads_q + 2 * num_heads_kv = "
            f"{hq} + 2 * {hk}"
        )
    if hq % hk:
        raise ValueError(f"num_heads_kv ({hk}) must divide num_heads_q ({hq}) (GQA/MQA)")
    _check_head_dim(xs, cfg, "qkv")
    pos = _resolve_positions(
        xs.shape,
        axes,
        cfg,
        positions=positions,
        offset=offset,
        cu_seqlens=cu_seqlens,
        start_offsets=start_offsets,
        max_seqlen=max_seqlen,
        seq_len=seq_len,
        per_head="error",
    )
    out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    lead = (slice(None),) * h
    blocks = [slice(0, hq), slice(hq, hq + hk)] + ([] if inplace else [slice(hq + hk, hq + 2 * hk)])
    parts = [(xs[lead + (b,)], out[lead + (b,)]) for b in blocks]
    _launch_qkv(parts, dtype_name, axes, cfg, pos, inverse=inverse, inplace=inplace)
    return qkv if inplace else _wrap_like(out, qkv)
