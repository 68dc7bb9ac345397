"""The torch adapter's rotation: RoFormer eq. 34 kernels, the kernel choice and the autograd Function.

The rotation is RoFormer (arXiv 2104.09864) eq. 34 for each channel pair (a, b):
``y_a = x_a cos - x_b sin``, ``y_b = x_b cos + x_a sin``; pairs follow the layout
(``"half"``: (i, i + rd/2), HF ``rotate_half``; ``"interleaved"``: (2i, 2i+1), GPT-J / Meta LLaMA).
It comes in four forms: the functional reference (what ``torch.compile`` fuses and plain autograd
differentiates), the eager passes (other devices), the blocked eager CPU kernel (in place or out of
place, through strides; on CPU also both directions of the autograd Function) and, with
``kernel="cpp"``, the one-pass C++ CPU kernel of :mod:`._torch_cpp` in the same places.
:func:`rotate_tables` picks one; ``_BLOCK_BYTES`` sizes the blocks of both eager kernels.

The checks and tables that used to live here are re-exported from :mod:`._torch_checks` and
:mod:`._torch_tables` (the old import path of the tests).
"""

from __future__ import annotations

import torch

# The old import path of the checks and tables (tests import them from here; they live in
# _torch_checks and _torch_tables).
from ._torch_checks import *  # noqa: F403
from ._torch_checks import check_autograd, check_kernel
from ._torch_cpp import check_cpp, rotate_cpp
from ._torch_tables import *  # noqa: F403
from ._torch_tables import _CONFIG_KEYS, _CONFIGS, _config_key, _freq_table_op, _length_free  # noqa: F401
from ._torch_triton import check_triton, rotate_triton

__all__ = [
    "rotate_reference",
    "RotateFunction",
    "EagerTables",
    "eager_cpu",
    "rotate_blocked",
    "rotate_cpu",
    "rotate_tables",
]

#: The kernels that rotate CPU tensors with :class:`EagerTables` (``kernel=``).
CPU_KERNELS = ("torch", "cpp")

# Bytes of output per block of the CPU rotation's in-place passes. 4 MiB blocks (L3-resident) ran
# 9-25% faster than L2-sized 1 MiB blocks on the 2-core CI VM (docs/performance.md).
_BLOCK_BYTES = 1 << 22


# -- the functional reference and the eager passes --------------------------------------------------------


def _pairs(t: torch.Tensor, layout: str, rd: int) -> tuple[torch.Tensor, torch.Tensor]:
    if layout == "half":
        return t[..., : rd // 2], t[..., rd // 2 : rd]
    return t[..., 0:rd:2], t[..., 1:rd:2]


def rotate_reference(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rd: int, compute: torch.dtype
) -> torch.Tensor:
    """Functional eq. 34 (no ``out=``, no views written): the form inductor fuses into one loop.

    Also the "plain autograd" path the custom Function is checked against.
    """
    c, s = cos.to(compute), sin.to(compute)
    xr = x[..., :rd].to(compute)
    a, b = _pairs(xr, layout, rd)
    ya, yb = a * c - b * s, b * c + a * s
    if layout == "half":
        y = torch.cat((ya, yb), dim=-1)
    else:
        y = torch.stack((ya, yb), dim=-1).flatten(-2)
    y = y.to(x.dtype)
    if rd == x.shape[-1]:
        return y
    return torch.cat((y, x[..., rd:]), dim=-1)


def _complex_ok(x: torch.Tensor, layout: str, compute: torch.dtype) -> bool:
    """Whether the interleaved pairs of ``x`` can be viewed as complex numbers without a copy."""
    if layout != "interleaved" or x.dtype != compute or compute not in (torch.float32, torch.float64):
        return False
    if x.stride(-1) != 1 or x.storage_offset() % 2:
        return False
    return all(st % 2 == 0 for sz, st in zip(x.shape[:-1], x.stride()[:-1], strict=True) if sz > 1)


def _rotate_eager(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rd: int, compute: torch.dtype
) -> torch.Tensor:
    """Eq. 34 with preallocated output and few passes over memory.

    Interleaved float32/float64: one complex multiply per element (pairs viewed as complex numbers,
    Meta LLaMA's ``apply_rotary_emb`` idea; RoFormer eq. 12). Otherwise: ``y = x * [cos, cos]`` in one
    pass, then ``y_a -= x_b sin`` and ``y_b += x_a sin`` in place on the two halves.
    """
    d = x.shape[-1]
    n = rd // 2
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if rd < d:
        out[..., rd:] = x[..., rd:]
    if _complex_ok(x, layout, compute):
        xc = torch.view_as_complex(x[..., :rd].unflatten(-1, (n, 2)))
        oc = torch.view_as_complex(out[..., :rd].unflatten(-1, (n, 2)))
        torch.mul(xc, torch.complex(cos.to(compute), sin.to(compute)), out=oc)
        return out
    if compute == x.dtype:
        target = out[..., :rd]
    else:
        target = torch.empty(x.shape[:-1] + (rd,), dtype=compute, device=x.device)
    c, s = cos.to(compute), sin.to(compute)
    full_cos = torch.cat((c, c), dim=-1) if layout == "half" else torch.stack((c, c), dim=-1).flatten(-2)
    if x.device.type != "cpu" or x.ndim == 1:
        _rotate_block(x, full_cos, s, target, layout, rd)
    else:
        # Blocks of about _BLOCK_BYTES along the longest leading axis keep the in-place passes in cache.
        axis = max(range(x.ndim - 1), key=lambda i: x.shape[i])
        length = x.shape[axis]
        row_bytes = max(1, target.numel() // max(length, 1)) * target.element_size()
        step = max(1, _BLOCK_BYTES // row_bytes)
        for start in range(0, length, step):
            index = (slice(None),) * axis + (slice(start, start + step),)

            def part(t: torch.Tensor, index=index) -> torch.Tensor:
                return t if t.shape[axis] == 1 else t[index]

            _rotate_block(x[index], part(full_cos), part(s), target[index], layout, rd)
    if compute != x.dtype:
        out[..., :rd] = target
    return out


def _rotate_block(
    x: torch.Tensor, full_cos: torch.Tensor, sin: torch.Tensor, target: torch.Tensor, layout: str, rd: int
) -> None:
    """``target = x * [cos, cos]``, then ``target_a -= x_b sin`` and ``target_b += x_a sin`` in place."""
    torch.mul(x[..., :rd], full_cos, out=target)
    xa, xb = _pairs(x, layout, rd)
    ta, tb = _pairs(target, layout, rd)
    ta.addcmul_(xb, sin, value=-1)
    tb.addcmul_(xa, sin)


def _rotate(x, cos, sin, layout, rd, compute, kernel: str = "torch", tables=None) -> torch.Tensor:
    """The rotation by ``kernel`` (``"torch"``: eager passes; ``"triton"``: one fused Triton kernel;
    ``"cpp"``: the one-pass C++ CPU kernel, which refuses other devices).

    On CPU the eager passes are :func:`rotate_blocked` (compute-dtype blocks: bf16 in, float32 math per
    block, bf16 out; ``tables``: an :class:`EagerTables` of ``cos``/``sin`` already built, else one is
    built). Under ``torch.compile`` all are the functional form, which inductor fuses itself.
    """
    if torch.compiler.is_compiling():
        return rotate_reference(x, cos, sin, layout, rd, compute)
    if kernel == "triton":
        return rotate_triton(x, cos, sin, layout, rd, compute)
    if kernel == "cpp" or _on_cpu(x, cos, sin):
        tables = EagerTables(cos, sin, layout, compute, kernel) if tables is None else tables
        return _rotate_new(x, tables, rd)
    return _rotate_eager(x, cos, sin, layout, rd, compute)


def _on_cpu(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" for t in tensors)


def _rotate_new(x: torch.Tensor, tables: EagerTables, rd: int) -> torch.Tensor:
    """:func:`rotate_cpu` of ``x`` into a new contiguous tensor."""
    return rotate_cpu(x, torch.empty(x.shape, dtype=x.dtype, device=x.device), tables, rd)


class RotateFunction(torch.autograd.Function):
    """RoPE with a memory-free backward: only the cos/sin tables are saved, never ``x``.

    The Jacobian of eq. 34 is the (attention-factor scaled) rotation A R(theta); its transpose is
    A R(-theta), i.e. the same kernel with ``sin`` negated (flash-attn ``ApplyRotaryEmb.backward``,
    ``conjugate=True``). Gradients w.r.t. cos/sin are not produced (positions are not differentiable).
    On CPU both directions run :func:`rotate_blocked` (``kernel="cpp"``: :func:`rotate_cpp`), and the
    backward reuses the forward's :class:`EagerTables` (``tables``: one already built for ``cos``/``sin``,
    e.g. shared by q and k).
    """

    @staticmethod
    def forward(ctx, x, cos, sin, layout, rd, compute, kernel="torch", tables=None):  # type: ignore[override]
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.rd, ctx.compute, ctx.kernel = layout, rd, compute, kernel
        compiling = torch.compiler.is_compiling()
        if tables is None and kernel in CPU_KERNELS and _on_cpu(x, cos, sin) and not compiling:
            tables = EagerTables(cos, sin, layout, compute, kernel)
        y = _rotate(x, cos, sin, layout, rd, compute, kernel, tables)
        if tables is not None:
            tables._scratch = None  # not kept alive until the backward (only the tables are)
        ctx.tables = tables
        return y

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        # The backward is itself a RotateFunction, so it is differentiable (double backward,
        # ``create_graph=True``, ``gradgradcheck``); without a graph to build it is the bare kernel.
        inverse = None if ctx.tables is None else ctx.tables.inverse()
        if torch.is_grad_enabled() and grad.requires_grad:
            gx = RotateFunction.apply(grad, cos, -sin, ctx.layout, ctx.rd, ctx.compute, ctx.kernel, inverse)
        elif inverse is not None:  # CPU (either kernel): the inverse tables already hold -sin
            gx = _rotate_new(grad, inverse, ctx.rd)
        else:
            gx = _rotate(grad, cos, -sin, ctx.layout, ctx.rd, ctx.compute, ctx.kernel)
        return gx, None, None, None, None, None, None, None


# -- the blocked eager CPU kernel (apply, rotate, the module and the kernel shapes) -------------------------


def eager_cpu(autograd: str, kernel: str, *tensors: torch.Tensor) -> bool:
    """Whether :func:`rotate_cpu` serves a call: eager, on CPU, ``kernel`` in :data:`CPU_KERNELS`,
    ``autograd="function"`` and no autograd graph to record for any of ``tensors`` (x, cos, sin).

    Everything else (autograd, ``torch.compile``, Triton, ``autograd="native"``, other devices) goes
    through :func:`~rope_ref.backends._torch_core.rotate_tables`.
    """
    if kernel not in CPU_KERNELS or autograd != "function" or torch.compiler.is_compiling():
        return False
    if any(t.device.type != "cpu" for t in tensors):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


class EagerTables:
    """Broadcastable half-width cos/sin in the compute dtype, and the forms the kernel derives from them
    (``[cos, cos]`` at full width, the complex factor ``cos + i sin``), each built at most once per call
    and shared by every tensor the call rotates (q and k). ``kernel``: the CPU kernel that rotates with
    them (one of :data:`CPU_KERNELS`; :func:`rotate_cpu` dispatches on it)."""

    def __init__(
        self, cos: torch.Tensor, sin: torch.Tensor, layout: str, compute: torch.dtype, kernel: str = "torch"
    ) -> None:
        self.cos, self.sin = cos.to(compute), sin.to(compute)
        self.layout, self.compute = layout, compute
        self.kernel = kernel
        self._full: torch.Tensor | None = None
        self._complex: torch.Tensor | None = None
        self._scratch: torch.Tensor | None = None  # work blocks of rotate_blocked, reused while alive

    def inverse(self) -> EagerTables:
        """The tables of the inverse rotation (``sin`` negated), sharing ``cos`` and ``[cos, cos]``."""
        inv = EagerTables.__new__(EagerTables)
        inv.cos, inv.sin, inv.layout, inv.compute = self.cos, -self.sin, self.layout, self.compute
        inv._full, inv._complex, inv._scratch = self._full, None, None
        inv.kernel = self.kernel
        return inv

    def full_cos(self) -> torch.Tensor:
        if self._full is None:
            c = self.cos
            pair = torch.cat((c, c), dim=-1) if self.layout == "half" else torch.stack((c, c), -1).flatten(-2)
            self._full = pair
        return self._full

    def complex_factor(self) -> torch.Tensor:
        if self._complex is None:
            self._complex = torch.complex(self.cos, self.sin)
        return self._complex


def _blocks(x: torch.Tensor, rd: int, compute: torch.dtype) -> tuple[int, list[tuple]]:
    """The block axis (longest leading axis) and index tuples of about ``_BLOCK_BYTES`` of work each.

    ``_BLOCK_BYTES`` is the one setting of both eager kernels.
    """
    if x.ndim == 1:
        return 0, [(...,)]
    axis = max(range(x.ndim - 1), key=lambda i: x.shape[i])
    length = x.shape[axis]
    itemsize = torch.empty((), dtype=compute).element_size()
    row_bytes = max(1, (x.numel() // max(x.shape[-1], 1)) * rd // max(length, 1)) * itemsize
    step = max(1, _BLOCK_BYTES // row_bytes)
    return axis, [(slice(None),) * axis + (slice(s, s + step),) for s in range(0, length, step)]


def _part(t: torch.Tensor, axis: int, index: tuple) -> torch.Tensor:
    """The block ``index`` of a table ``t`` (unchanged where it broadcasts along the block axis)."""
    return t if index == (...,) or t.shape[axis] == 1 else t[index]


def _scratch(
    first: torch.Size, count: int, dtype: torch.dtype, device: torch.device, tables: EagerTables | None = None
) -> torch.Tensor:
    """``count`` work blocks shaped like the first (largest) block: allocated once per tensor, or once
    per :class:`EagerTables` (q and k of one call reuse one buffer; a fresh one costs page faults)."""
    shape = (count,) + tuple(first)
    if tables is None:
        return torch.empty(shape, dtype=dtype, device=device)
    n = count * first.numel()
    buf = tables._scratch
    if buf is None or buf.dtype != dtype or buf.device != device or buf.numel() < n:
        buf = tables._scratch = torch.empty(n, dtype=dtype, device=device)
    return buf[:n].view(shape)


def _fit(t: torch.Tensor, axis: int, index: tuple, like: torch.Tensor) -> torch.Tensor:
    """A scratch block cut to ``like`` (the last block along ``axis`` may be shorter)."""
    return t if index == (...,) else t.narrow(axis, 0, like.shape[axis])


def rotate_blocked(x: torch.Tensor, out: torch.Tensor, tables: EagerTables, rd: int) -> torch.Tensor:
    """Eq. 34 on CPU into ``out`` (``x`` itself for in place, else any tensor of x's shape and dtype).

    Reads and writes only the elements of the two views, through their strides. Interleaved pairs in
    float32/float64 whose strides allow it: one complex multiply per pair. Otherwise, in blocks of
    about ``_BLOCK_BYTES`` along the longest leading axis (the passes reread the block from cache):

    * out of place, compute dtype = x's: ``out = x * [cos, cos]``, ``out_a -= x_b sin``, ``out_b += x_a sin``;
    * in place, same dtype: a copy of ``x_a`` (one preallocated half block), then ``x_a = x_a cos - x_b
      sin`` and ``x_b = x_b cos + saved sin``;
    * another compute dtype (float32 for float16/bfloat16): the block converted once into a preallocated
      compute-dtype block, rotated there into a second one, rounded once into ``out``. (Mixed-dtype
      ``mul``/``addcmul`` on CPU run far slower than a conversion.)

    Channels ``rd:`` are copied when out of place. The arithmetic, hence every bit of the result, is
    the same whatever the block size and whether in place or not.
    """
    layout, compute = tables.layout, tables.compute
    inplace = out is x
    if not inplace and rd < x.shape[-1]:
        out[..., rd:].copy_(x[..., rd:])
    if _complex_ok(x, layout, compute) and (inplace or _complex_ok(out, layout, compute)):
        n = rd // 2
        xc = torch.view_as_complex(x[..., :rd].unflatten(-1, (n, 2)))
        if inplace:
            xc.mul_(tables.complex_factor())
        else:
            oc = torch.view_as_complex(out[..., :rd].unflatten(-1, (n, 2)))
            torch.mul(xc, tables.complex_factor(), out=oc)
        return out
    axis, blocks = _blocks(x, rd, compute)
    if not blocks:
        return out
    convert = compute != x.dtype
    first = x[blocks[0]][..., :rd].shape
    if convert:
        xw_all, work_all = _scratch(first, 2, compute, x.device, tables)
        full = tables.full_cos()
    elif inplace:
        saved_all = _scratch(first[:-1] + (rd // 2,), 1, x.dtype, x.device, tables)[0]
    else:
        full = tables.full_cos()
    for index in blocks:
        xb, ob = x[index], out[index][..., :rd]
        s = _part(tables.sin, axis, index)
        if convert:
            xw, work = _fit(xw_all, axis, index, ob), _fit(work_all, axis, index, ob)
            xw.copy_(xb[..., :rd])
            _rotate_block(xw, _part(full, axis, index), s, work, layout, rd)
            ob.copy_(work)
        elif inplace:
            a, b = _pairs(xb, layout, rd)
            c = _part(tables.cos, axis, index)
            saved = _fit(saved_all, axis, index, a)
            saved.copy_(a)
            a.mul_(c).addcmul_(b, s, value=-1)
            b.mul_(c).addcmul_(saved, s)
        else:
            _rotate_block(xb, _part(full, axis, index), s, ob, layout, rd)
    return out


def rotate_cpu(x: torch.Tensor, out: torch.Tensor, tables: EagerTables, rd: int) -> torch.Tensor:
    """Eq. 34 of ``x`` into ``out`` (``x`` itself for in place) by the CPU kernel ``tables`` were built
    for: :func:`~rope_ref.backends._torch_cpp.rotate_cpp` (``"cpp"``: one pass, the formula's roundings)
    or :func:`rotate_blocked` (``"torch"``)."""
    if tables.kernel == "cpp":
        return rotate_cpp(x, out, tables.cos, tables.sin, tables.layout, rd)
    return rotate_blocked(x, out, tables, rd)


# -- the choice ---------------------------------------------------------------------------------------


def rotate_tables(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rd: int,
    compute: torch.dtype,
    autograd: str = "function",
    kernel: str = "torch",
    *,
    blocked: bool = False,
    inplace: bool = False,
    tables: EagerTables | None = None,
) -> torch.Tensor:
    """Rotate ``x`` with broadcastable half-width tables, choosing the autograd path and the kernel.

    ``autograd="function"``: :class:`RotateFunction` when a gradient is needed (saves no activations);
    ``"native"``: :func:`rotate_reference` under plain autograd (saves ``x``; the check path, which
    ``kernel`` does not affect). ``kernel``: ``"torch"`` (eager passes), ``"triton"`` (one fused
    Triton kernel, :func:`~rope_ref.backends._torch_triton.rotate_triton`) or ``"cpp"`` (the one-pass
    C++ CPU kernel, :func:`~rope_ref.backends._torch_cpp.rotate_cpp`, both directions under autograd;
    CPU tensors, float32/float64 arithmetic). ``blocked``: where :func:`eager_cpu` allows it,
    :func:`rotate_cpu` instead (same values, bit for bit; the public functions ask for it).
    ``inplace``: the result is written into ``x`` (only the elements of the view) and ``x`` returned;
    otherwise a new contiguous tensor. ``tables``: an :class:`EagerTables` of
    ``cos``/``sin`` in ``compute`` already built (shared by the tensors of one call), for the CPU kernels.
    """
    if blocked and eager_cpu(autograd, kernel, x, cos, sin):
        out = x if inplace else torch.empty(x.shape, dtype=x.dtype, device=x.device)
        tables = EagerTables(cos, sin, layout, compute, kernel) if tables is None else tables
        return rotate_cpu(x, out, tables, rd)
    check_kernel(kernel)
    if kernel == "triton" and not torch.compiler.is_compiling():  # compiled: the functional form runs
        check_triton(x, compute)
    if kernel == "cpp" and not torch.compiler.is_compiling():
        check_cpp(x, compute)
    if check_autograd(autograd) == "native":
        y = rotate_reference(x, cos, sin, layout, rd, compute)
    elif torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        if cos.requires_grad or sin.requires_grad:
            # Differentiable tables (e.g. learned positions): plain autograd covers them.
            y = rotate_reference(x, cos, sin, layout, rd, compute)
        else:
            y = RotateFunction.apply(x, cos, sin, layout, rd, compute, kernel, tables)
    else:
        y = _rotate(x, cos, sin, layout, rd, compute, kernel, tables)
    return x.copy_(y) if inplace else y
