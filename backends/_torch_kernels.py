"""The shapes real kernels are called with (issue 16): axes, offsets, varlen, q/k pairs, packed QKV, in place.

:func:`apply` extends :func:`~rope_ref.backends._torch_module.apply` with ``axes=`` (HF-style ``(B, S)``
ids or per-token ids placed on the named axes), ``offset=`` (a KV-cache offset, scalar or per batch
row), ``cu_seqlens=`` / ``start_offsets=`` (packed ``thd`` sequences, positions restarting per
sequence), ``inverse=`` (rotation by ``-m theta``) and ``inplace=``. :func:`apply_qk` rotates q and k
with different head counts (GQA) from one table build; :func:`apply_qkv` rotates the q and k heads of
a packed ``(..., Hq + 2 Hk, D)`` projection and leaves V bit for bit untouched. Semantics are the
oracle's :func:`rope_ref.apply` with ``axes=`` / ``inverse=`` and :mod:`rope_ref.positions`.

Every input may be a non-contiguous view (transposed, sliced out of a packed buffer): the kernels index
through its strides, and in place they write only the elements of the view.

Eager CPU calls rotate with :func:`~rope_ref.backends._torch_module.rotate_blocked` (the kernel the
original ``apply`` uses too): q and k share one set of tables in the compute dtype; when they are
neighbours in one buffer (packed QKV) they are rotated as one view, and ``apply_qkv`` out of place
writes q and k straight into its output and copies V there, with no concatenation.
"""

from __future__ import annotations

from typing import Any

import torch

from rope_ref.axes import parse_axes, qk_head_axis
from rope_ref.config import RopeConfig
from rope_ref.views import View, check_disjoint

from ._torch_core import (
    angle_tables,
    as_positions,
    check_angle_dtype,
    check_config,
    check_x,
    freq_table,
    resolve_compute_dtype,
    rotate_tables,
    seq_len_of,
)
from ._torch_module import EagerTables, eager_cpu, rotate_blocked
from ._torch_module import apply as _plain_apply
from ._torch_triton import check_kernel

__all__ = ["apply", "apply_qk", "apply_qkv", "place_positions"]


# -- positions --------


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
    if _eager() and t.numel() and bool((t < 0).any()):
        raise ValueError(f"{name} must be >= 0 (a cache offset), got {int(t.min())}")
    return t


def offset_positions(offset: Any, axes: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``offset[b] + s`` (or ``offset + s``) placed on the ``b`` and ``s`` axes of ``shape``."""
    if isinstance(offset, int) and not isinstance(offset, bool):
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (a cache offset), got {offset}")
        lead = shape[:-1]
        seq_axis = axes.index("s" if "s" in axes else "t")
        placed = [1] * len(lead)
        placed[seq_axis] = lead[seq_axis]
        return (torch.arange(lead[seq_axis], device=device) + offset).reshape(placed)
    off = _check_offset(offset, "offset", device)
    lead = shape[:-1]
    seq_axis = axes.index("s" if "s" in axes else "t")
    steps = torch.arange(lead[seq_axis], device=device)
    placed = [1] * len(lead)
    placed[seq_axis] = lead[seq_axis]
    if off.ndim == 0:
        return (steps + off).reshape(placed)
    if "b" not in axes:
        raise ValueError(
            f"offset of shape {tuple(off.shape)} is per batch row but axes={axes!r} has no 'b' axis "
            "(use cu_seqlens with start_offsets for packed sequences)"
        )
    b_axis = axes.index("b")
    if off.shape[0] != lead[b_axis]:
        raise ValueError(f"offset has {off.shape[0]} entries for batch {lead[b_axis]} (axes={axes!r})")
    ids = off[:, None] + steps[None, :]
    placed[b_axis] = lead[b_axis]
    return (ids.T if b_axis > seq_axis else ids).reshape(placed)


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
        if int(cu[0]) != 0:
            raise ValueError(f"cu_seqlens must start at 0, got {cu[:4].tolist()}")
        steps = cu[1:] - cu[:-1]
        if bool((steps < 0).any()):
            j = int(torch.nonzero(steps < 0)[0, 0])
            raise ValueError(
                f"cu_seqlens must be non-decreasing, got {int(cu[j])} then {int(cu[j + 1])} at {j}"
            )
        if int(cu[-1]) != total:
            raise ValueError(
                f"cu_seqlens[-1] = {int(cu[-1])} must equal the token count x.shape[{t_axis}] = {total}"
            )
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
    given = [
        n
        for n, v in (("positions", positions), ("offset", offset), ("cu_seqlens", cu_seqlens))
        if v is not None
    ]
    if len(given) != 1:
        raise ValueError(f"give exactly one of positions, offset, cu_seqlens; got {given or 'none'}")
    if start_offsets is not None and cu_seqlens is None:
        raise ValueError("start_offsets goes with cu_seqlens (use offset= for a batch)")
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


# -- kernels --------


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


def _rotate_into(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cfg: RopeConfig,
    compute: torch.dtype,
    autograd: str,
    kernel: str,
    inplace: bool,
) -> torch.Tensor:
    """Out of place: a new contiguous tensor. In place: ``x`` itself, rotated through its strides.

    Autograd, ``torch.compile``, ``kernel="triton"``, ``autograd="native"`` and other devices go through
    :func:`~rope_ref.backends._torch_core.rotate_tables` (in place: its result copied into ``x``); the
    plain eager CPU case through :func:`~rope_ref.backends._torch_module.rotate_blocked`.
    """
    rd = cfg.rotary_dim
    if not eager_cpu(autograd, kernel, x, cos, sin):
        y = rotate_tables(x, cos, sin, cfg.layout, rd, compute, autograd, kernel)
        return x.copy_(y) if inplace else y
    out = x if inplace else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return rotate_blocked(x, out, EagerTables(cos, sin, cfg.layout, compute), rd)


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
    """Rotate ``x`` (any strides) by positions given as ids, a cache ``offset`` or ``cu_seqlens``.

    ``axes`` (``"bshd"``, ``"bhsd"``, ``"sbhd"``, ``"thd"``, ``"shd"``, ``"hsd"``) names x's axes; then
    ``positions`` may be HF-style ``(B, S)`` ids, per-token ids or a scalar. Without ``axes`` positions
    broadcast against ``x.shape[:-1]`` (the original ``apply``). ``offset``: token ``s`` of row ``b``
    is at ``offset[b] + s`` (int or ``(B,)``). ``cu_seqlens`` (``thd`` only): positions restart at each
    sequence, plus ``start_offsets[j]``. ``inverse``: rotate by ``-m theta``. ``inplace``: write into
    ``x`` (only the elements of the view) and return it. Other arguments as the original ``apply``.
    """
    if axes is None and offset is None and cu_seqlens is None and not inverse and inplace is False:
        # The original call: exactly the original code path (and its messages).
        return _plain_apply(
            x,
            positions,
            cfg,
            seq_len=seq_len,
            angle_dtype=angle_dtype,
            compute_dtype=compute_dtype,
            autograd=autograd,
            kernel=kernel,
        )
    cfg = _common(cfg, angle_dtype, kernel, inverse, inplace)
    x = check_x(x, cfg.head_dim)
    compute = resolve_compute_dtype(compute_dtype, x.dtype)
    pos = resolve_positions(x, positions, axes, offset, cu_seqlens, start_offsets)
    _check_fits(pos, tuple(x.shape[:-1]), "x")
    cos, sin = _tables(pos, cfg, seq_len, angle_dtype, x.ndim, inverse)
    return _rotate_into(x, cos, sin, cfg, compute, autograd, kernel, inplace)


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

    Positions as in :func:`apply` (``axes`` is required; positions must not vary over heads). Returns
    ``(q_rot, k_rot)``; with ``inplace`` these are ``q`` and ``k``, written through their strides (they
    may be disjoint slices of one packed buffer).
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
    if kernel == "triton" and autograd == "function" and not graph and _eager():
        from ._torch_triton import check_triton
        from ._torch_triton_qk import rotate_triton_qk

        check_triton(q, compute)
        qo, ko = rotate_triton_qk(q, k, cos, sin, cfg.layout, cfg.rotary_dim, compute)  # one launch
        return (q.copy_(qo), k.copy_(ko)) if inplace else (qo, ko)
    if not eager_cpu(autograd, kernel, q, k, cos, sin):
        return (
            _rotate_into(q, cos, sin, cfg, compute, autograd, kernel, inplace),
            _rotate_into(k, cos, sin, cfg, compute, autograd, kernel, inplace),
        )
    # Eager CPU: one table (cos/sin in the compute dtype, [cos, cos]) for both; when q and k (and their
    # outputs) are neighbours in one buffer, both are rotated as one view, in one pass of blocks.
    tables = EagerTables(cos, sin, cfg.layout, compute)
    if inplace:
        qo, ko = q, k
    elif outs is not None:
        qo, ko = outs
    else:
        qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        ko = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    both_in = _adjacent(q, k, h)
    both_out = both_in if inplace else _adjacent(qo, ko, h)
    if both_in is not None and both_out is not None:
        rotate_blocked(both_in, both_in if inplace else both_out, tables, cfg.rotary_dim)
    else:
        rotate_blocked(q, qo, tables, cfg.rotary_dim)
        rotate_blocked(k, ko, tables, cfg.rotary_dim)
    return qo, ko


def split_qkv(qkv: torch.Tensor, num_heads_q: int, num_heads_kv: int, axes: str) -> tuple[torch.Tensor, ...]:
    """Views ``(q, k, v)`` of a packed ``(..., Hq + 2 Hk, ...)`` tensor along the ``h`` axis of ``axes``."""
    axes = parse_axes(axes, qkv.ndim)
    if "h" not in axes:
        raise ValueError(f"axes={axes!r} has no head axis 'h' to split")
    for name, n in (("num_heads_q", num_heads_q), ("num_heads_kv", num_heads_kv)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    h = axes.index("h")
    if qkv.shape[h] != num_heads_q + 2 * num_heads_kv:
        raise ValueError(
            f"qkv.shape[{h}] = {qkv.shape[h]} does not split as num_heads_q + 2 * num_heads_kv = "
            f"{num_heads_q} + 2 * {num_heads_kv}"
        )
    # narrow (not split): single views, which autograd lets the in-place path write.
    return (
        qkv.narrow(h, 0, num_heads_q),
        qkv.narrow(h, num_heads_q, num_heads_kv),
        qkv.narrow(h, num_heads_q + num_heads_kv, num_heads_kv),
    )


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
    q, k, v = split_qkv(qkv, num_heads_q, num_heads_kv, axes)
    if num_heads_q % num_heads_kv:
        raise ValueError(f"num_heads_kv ({num_heads_kv}) must divide num_heads_q ({num_heads_q}) (GQA/MQA)")
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
