"""The torch adapter's functional API in the shapes real kernels are called with (issue 16).

:func:`apply` rotates by positions broadcast against ``x.shape[:-1]`` (the original call) or, with
``axes=``, by HF-style ``(B, S)`` ids or per-token ids placed on the named axes, ``offset=`` (a KV-cache
offset, scalar or per batch row), ``cu_seqlens=`` / ``start_offsets=`` (packed ``thd`` sequences,
positions restarting per sequence; :mod:`._torch_positions`), ``inverse=`` (rotation by ``-m theta``)
and ``inplace=``. :func:`apply_qk` rotates q and k
with different head counts (GQA) from one table build; :func:`apply_qkv` rotates the q and k heads of
a packed ``(..., Hq + 2 Hk, D)`` projection and leaves V bit for bit untouched. Semantics are the
oracle's :func:`rope_ref.apply` with ``axes=`` / ``inverse=`` and :mod:`rope_ref.positions`.

Every input may be a non-contiguous view (transposed, sliced out of a packed buffer): the kernels index
through its strides, and in place they write only the elements of the view.

Eager CPU calls rotate with :func:`~rope_ref.backends._torch_core.rotate_blocked` (the kernel of the
module and of :func:`~rope_ref.backends._torch_module.rotate` too), or with ``kernel="cpp"`` the
one-pass C++ kernel (:mod:`._torch_cpp`): q and k share one set of tables in the compute dtype;
when they are neighbours in one buffer (packed QKV) they are rotated as one view, and ``apply_qkv``
out of place writes q and k straight into its output and copies V there, with no concatenation.
"""

from __future__ import annotations

from typing import Any

import torch

from rope_ref.axes import qk_head_axis, qkv_heads
from rope_ref.config import RopeConfig
from rope_ref.views import View, check_disjoint

from ._torch_checks import (
    as_positions,
    check_angle_dtype,
    check_broadcast,
    check_config,
    check_kernel,
    check_x,
    resolve_compute_dtype,
)
from ._torch_core import CPU_KERNELS, EagerTables, eager_cpu, rotate_cpu, rotate_tables
from ._torch_positions import resolve_positions
from ._torch_tables import angle_tables, expand_tables, freq_table, seq_len_of

__all__ = ["apply", "apply_qk", "apply_qkv", "split_qkv"]


def _tables(
    pos: torch.Tensor,
    cfg: RopeConfig,
    seq_len: int | None,
    angle_dtype: torch.dtype,
    ndim: int,
    inverse: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Half-width cos/sin for ``pos`` left-padded to ``ndim - 1`` leading axes; ``sin`` negated if inverse."""
    pos = pos.reshape((1,) * (ndim - 1 - pos.ndim) + tuple(pos.shape))
    inv, factor = freq_table(cfg, seq_len_of(pos, cfg, seq_len), angle_dtype, pos.device)
    cos, sin = angle_tables(pos, inv, factor)
    return cos, (-sin if inverse else sin)


def _check_fits(pos: torch.Tensor, lead: tuple[int, ...], name: str) -> None:
    lead_pos = (1,) * (len(lead) - pos.ndim) + tuple(pos.shape) if pos.ndim <= len(lead) else None
    if lead_pos is None or any(p not in (1, n) for p, n in zip(lead_pos, lead, strict=True)):
        raise ValueError(
            f"positions of shape {tuple(pos.shape)} do not broadcast against {name}.shape[:-1] = {lead}"
        )


def _common(cfg: Any, angle_dtype: Any, kernel: Any, inverse: Any, inplace: Any) -> RopeConfig:
    check_kernel(kernel)
    check_angle_dtype(angle_dtype)
    for name, flag in (("inverse", inverse), ("inplace", inplace)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    return check_config(cfg)


def apply(
    x: torch.Tensor,
    positions: Any = None,
    cfg: RopeConfig | None = None,
    *,
    axes: str | None = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    inverse: bool = False,
    inplace: bool = False,
    seq_len: int | None = None,
    angle_dtype: torch.dtype = torch.float32,
    compute_dtype: Any = None,
    autograd: str = "function",
    kernel: str = "torch",
) -> torch.Tensor:
    """Rotate ``x`` (``(..., head_dim)``, any float dtype, any strides) by positions given as ids, a cache
    ``offset`` or ``cu_seqlens``.

    Without ``axes``, ``positions`` (integer or real) broadcast against ``x.shape[:-1]`` after
    left-padding, e.g. ``(S, 1)`` for ``(B, S, H, D)`` or ``(B, 1, S)`` per row for ``(B, H, S, D)``.
    ``axes`` (``"bshd"``, ``"bhsd"``, ``"sbhd"``, ``"thd"``, ``"shd"``, ``"hsd"``) names x's axes; then
    ``positions`` may be HF-style ``(B, S)`` ids, per-token ids or a scalar. ``offset``: token ``s`` of
    row ``b`` is at ``offset[b] + s`` (int or ``(B,)``). ``cu_seqlens`` (``thd`` only): positions restart
    at each sequence, plus ``start_offsets[j]``. ``inverse``: rotate by ``-m theta``. ``inplace``: write
    into ``x`` (only the elements of the view) and return it; otherwise a new contiguous tensor.

    Each row gets the angles ``position * inv_freq`` in ``angle_dtype``; the rotation runs in
    ``compute_dtype`` (see :func:`~rope_ref.backends._torch_checks.resolve_compute_dtype`); the result
    has ``x.dtype``. Semantics are :func:`rope_ref.apply` (HF ``apply_rotary_pos_emb`` with the attention
    factor in cos/sin; channels ``rotary_dim:`` pass through). Length-dependent scalings see ``seq_len``
    or, if ``None``, ``max(positions) + 1`` (a host sync; pass ``seq_len`` to avoid it). ``kernel``:
    ``"torch"`` (eager torch ops, any device), ``"triton"`` (one fused Triton kernel; CUDA tensors,
    rotation in float32/float64) or ``"cpp"`` (one fused C++ pass per element, built on first use;
    CPU tensors, rotation in float32/float64, forward and backward); see ``docs/backends/torch.md``.
    """
    if axes is None and offset is None and cu_seqlens is None and not inverse and inplace is False:
        # The original call: exactly the original code path (and its messages).
        cfg = check_config(cfg)
        x = check_x(x, cfg.head_dim)
        angle_dtype = check_angle_dtype(angle_dtype)
        compute = resolve_compute_dtype(compute_dtype, x.dtype)
        pos = as_positions(positions, x.device)
        check_broadcast(pos, tuple(x.shape[:-1]))
        inv, factor = freq_table(cfg, seq_len_of(pos, cfg, seq_len), angle_dtype, x.device)
        cos, sin = expand_tables(*angle_tables(pos, inv, factor), x.ndim)
        return rotate_tables(x, cos, sin, cfg.layout, cfg.rotary_dim, compute, autograd, kernel, blocked=True)
    cfg = _common(cfg, angle_dtype, kernel, inverse, inplace)
    x = check_x(x, cfg.head_dim)
    compute = resolve_compute_dtype(compute_dtype, x.dtype)
    pos = resolve_positions(x, positions, axes, offset, cu_seqlens, start_offsets)
    _check_fits(pos, tuple(x.shape[:-1]), "x")
    cos, sin = _tables(pos, cfg, seq_len, angle_dtype, x.ndim, inverse)
    layout, rd = cfg.layout, cfg.rotary_dim
    return rotate_tables(x, cos, sin, layout, rd, compute, autograd, kernel, blocked=True, inplace=inplace)


def _view(t: torch.Tensor) -> View:
    """``t``'s memory as a :class:`rope_ref.views.View` (address, shape, byte strides, item size)."""
    size = t.element_size()
    return View(t.data_ptr(), tuple(t.shape), tuple(st * size for st in t.stride()), size)


def _check_pair(q: torch.Tensor, k: torch.Tensor, axes: str | None) -> int:
    """The head axis of q/k (same shape except heads; Hq a multiple of Hk), or a ValueError."""
    if axes is None:
        raise ValueError("apply_qk needs axes= naming the head axis (e.g. 'bshd', 'bhsd', 'thd')")
    return qk_head_axis(tuple(q.shape), tuple(k.shape), axes)


def apply_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: Any = None,
    cfg: RopeConfig | None = None,
    *,
    axes: str | None = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    inverse: bool = False,
    inplace: bool = False,
    seq_len: int | None = None,
    angle_dtype: torch.dtype = torch.float32,
    compute_dtype: Any = None,
    autograd: str = "function",
    kernel: str = "torch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (``Hk`` divides ``Hq``) with one table build.

    Positions and options (``kernel`` included) as in :func:`apply` (``axes`` is required; positions
    must not vary over heads). Returns ``(q_rot, k_rot)``; with ``inplace`` these are ``q`` and ``k``,
    written through their strides (they may be disjoint slices of one packed buffer).
    """
    return _apply_qk(
        q,
        k,
        positions,
        cfg,
        axes=axes,
        offset=offset,
        cu_seqlens=cu_seqlens,
        start_offsets=start_offsets,
        inverse=inverse,
        inplace=inplace,
        seq_len=seq_len,
        angle_dtype=angle_dtype,
        compute_dtype=compute_dtype,
        autograd=autograd,
        kernel=kernel,
    )


def _adjacent(a: torch.Tensor, b: torch.Tensor, h: int) -> torch.Tensor | None:
    """One view of ``a`` then ``b`` along axis ``h`` when ``b`` starts right where ``a`` ends there (same
    storage, dtype and strides: q and k of one packed buffer), else ``None``. Its elements are exactly
    those of ``a`` and ``b``."""
    if a.dtype != b.dtype or a.stride() != b.stride() or a.shape[h] < 1 or a.stride(h) < 1:
        return None
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return None
    if b.storage_offset() != a.storage_offset() + a.shape[h] * a.stride(h):
        return None
    shape = list(a.shape)
    shape[h] += b.shape[h]
    return a.as_strided(shape, a.stride(), a.storage_offset())


def _apply_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: Any,
    cfg: Any,
    *,
    axes: str | None,
    offset: Any,
    cu_seqlens: Any,
    start_offsets: Any,
    inverse: bool,
    inplace: bool,
    seq_len: int | None,
    angle_dtype: torch.dtype,
    compute_dtype: Any,
    autograd: str,
    kernel: str,
    outs: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`apply_qk`; ``outs`` (eager CPU, out of place only): views to write q's and k's results into."""
    cfg = _common(cfg, angle_dtype, kernel, inverse, inplace)
    q, k = check_x(q, cfg.head_dim, "q"), check_x(k, cfg.head_dim, "k")
    if k.dtype != q.dtype or k.device != q.device:
        raise ValueError(
            f"q and k must share dtype and device, got {q.dtype}/{q.device} and {k.dtype}/{k.device}"
        )
    h = _check_pair(q, k, axes)
    if inplace and not torch.compiler.is_compiling():  # a traced tensor has no address to compare
        check_disjoint(_view(q), _view(k))
    compute = resolve_compute_dtype(compute_dtype, q.dtype)
    pos = resolve_positions(q, positions, axes, offset, cu_seqlens, start_offsets)
    lead = tuple(1 if i == h else n for i, n in enumerate(q.shape[:-1]))
    _check_fits(pos, lead, "q (heads excluded)")
    cos, sin = _tables(pos, cfg, seq_len, angle_dtype, q.ndim, inverse)
    graph = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
    if kernel == "triton" and autograd == "function" and not graph and not torch.compiler.is_compiling():
        from ._torch_triton import check_triton
        from ._torch_triton_qk import rotate_triton_qk

        check_triton(q, compute)
        qo, ko = rotate_triton_qk(q, k, cos, sin, cfg.layout, cfg.rotary_dim, compute)  # one launch
        return (q.copy_(qo), k.copy_(ko)) if inplace else (qo, ko)
    # On CPU one table (cos/sin in the compute dtype, [cos, cos]) serves q and k, forward and backward.
    cpu = kernel in CPU_KERNELS and q.device.type == "cpu" and not torch.compiler.is_compiling()
    tables = EagerTables(cos, sin, cfg.layout, compute, kernel) if cpu else None
    if not eager_cpu(autograd, kernel, q, k, cos, sin):
        layout, rd = cfg.layout, cfg.rotary_dim
        return tuple(
            rotate_tables(t, cos, sin, layout, rd, compute, autograd, kernel, inplace=inplace, tables=tables)
            for t in (q, k)
        )
    # Eager CPU: when q and k (and their outputs) are neighbours in one buffer, both are rotated as one
    # view, in one pass of blocks.
    if inplace:
        qo, ko = q, k
    elif outs is not None:
        qo, ko = outs
    else:
        qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        ko = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    both_in = _adjacent(q, k, h)
    both_out = both_in if inplace else _adjacent(qo, ko, h)
    # rotate_cpu runs the kernel the tables were built for (tables.kernel).
    if both_in is not None and both_out is not None:
        rotate_cpu(both_in, both_in if inplace else both_out, tables, cfg.rotary_dim)
    else:
        rotate_cpu(q, qo, tables, cfg.rotary_dim)
        rotate_cpu(k, ko, tables, cfg.rotary_dim)
    return qo, ko


def split_qkv(qkv: torch.Tensor, num_heads_q: int, num_heads_kv: int, axes: str) -> tuple[torch.Tensor, ...]:
    """Views ``(q, k, v)`` of a packed ``(..., Hq + 2 Hk, ...)`` tensor along the ``h`` axis of ``axes``."""
    h, hq, hk = qkv_heads(tuple(qkv.shape), axes, num_heads_q, num_heads_kv)
    # narrow (not split): single views, which autograd lets the in-place path write.
    return qkv.narrow(h, 0, hq), qkv.narrow(h, hq, hk), qkv.narrow(h, hq + hk, hk)


def apply_qkv(
    qkv: torch.Tensor,
    positions: Any = None,
    cfg: RopeConfig | None = None,
    *,
    num_heads_q: int,
    num_heads_kv: int | None = None,
    axes: str | None = None,
    offset: Any = None,
    cu_seqlens: Any = None,
    start_offsets: Any = None,
    inverse: bool = False,
    inplace: bool = False,
    seq_len: int | None = None,
    angle_dtype: torch.dtype = torch.float32,
    compute_dtype: Any = None,
    autograd: str = "function",
    kernel: str = "torch",
) -> torch.Tensor:
    """Rotate the q and k heads of a packed ``(..., Hq + 2 Hk, D)`` tensor; V stays bit for bit as it was.

    ``num_heads_kv`` defaults to ``num_heads_q`` (MHA). Positions and options as :func:`apply_qk`.
    Out of place: a new tensor (V copied exactly); in place: ``qkv`` itself (V never written).
    """
    if axes is None:
        raise ValueError("apply_qkv needs axes= naming the head axis (e.g. 'bshd', 'thd')")
    qkv = check_x(qkv, None, "qkv")
    num_heads_kv = num_heads_q if num_heads_kv is None else num_heads_kv
    q, k, v = split_qkv(qkv, num_heads_q, num_heads_kv, axes)  # also: Hk divides Hq
    opts = dict(
        axes=axes,
        offset=offset,
        cu_seqlens=cu_seqlens,
        start_offsets=start_offsets,
        inverse=inverse,
        inplace=inplace,
        seq_len=seq_len,
        angle_dtype=angle_dtype,
        compute_dtype=compute_dtype,
        autograd=autograd,
        kernel=kernel,
    )
    if inplace:
        _apply_qk(q, k, positions, cfg, **opts)  # q and k are neighbours: one pass; V is never written
        return qkv
    h = axes.index("h")
    if eager_cpu(autograd, kernel, qkv):
        # Straight into the output: q and k rotated as one view, V copied bit for bit; no concatenation.
        out = torch.empty(qkv.shape, dtype=qkv.dtype, device=qkv.device)
        qo, ko, vo = split_qkv(out, num_heads_q, num_heads_kv, axes)
        _apply_qk(q, k, positions, cfg, outs=(qo, ko), **opts)
        vo.copy_(v)
        return out
    qr, kr = _apply_qk(q, k, positions, cfg, **opts)
    return torch.cat((qr, kr, v), dim=h)
