"""q and k in one Triton launch (``apply_qk(..., kernel="triton")`` without autograd; issue 16).

Each tensor is laid out as :func:`~rope_ref.backends._torch_triton.rotate_triton` lays out one (rows
merged where strides allow, up to four row axes); the launch gets ``ceil(q_rows / ROWS) +
ceil(k_rows / ROWS)`` programs and the kernel picks q or k by program id.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch

from ._torch_triton import _MAX_ROW_AXES, LAUNCH_OPTIONS, _row_axes, kernel_meta

__all__ = ["rotate_triton_qk"]


@functools.cache
def _kernel():
    import triton

    from ._triton_qk_kernels import rope_rows_qk

    return triton, rope_rows_qk


def _layout(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, n: int) -> tuple:
    """``(x, cos, sin, n_rows, sizes[1:], per-tensor strides)`` for one operand of the launch."""
    lead = tuple(x.shape[:-1])
    cos, sin = torch.broadcast_to(cos, lead + (n,)), torch.broadcast_to(sin, lead + (n,))
    sizes, strides = _row_axes(lead, [t.stride()[:-1] for t in (x, cos, sin, out)])
    if len(sizes) > _MAX_ROW_AXES:
        x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
        sizes, strides = _row_axes(lead, [t.stride()[:-1] for t in (x, cos, sin, out)])
    pad = _MAX_ROW_AXES - len(sizes)
    sizes = [1] * pad + sizes
    strides = [[0] * pad + s for s in strides]
    flat = (
        *strides[0], x.stride(-1), *strides[1], cos.stride(-1), *strides[2], sin.stride(-1), *strides[3]
    )  # fmt: skip
    return x, cos, sin, math.prod(lead), sizes[1:], flat


def rotate_triton_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rd: int,
    compute: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New contiguous ``(q_rot, k_rot)`` from one launch; tables broadcast against both (heads axis 1).

    The caller has checked both tensors with :func:`~rope_ref.backends._torch_triton.check_triton`.
    """
    n = rd // 2
    qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    ko = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if qo.numel() == 0 and ko.numel() == 0:
        return qo, ko
    qx, qc, qs, q_rows, q_sizes, q_strides = _layout(q, cos, sin, qo, n)
    kx, kc, ks, k_rows, k_sizes, k_strides = _layout(k, cos, sin, ko, n)
    meta = kernel_meta(layout, rd, q.shape[-1], compute)
    triton, kernel = _kernel()
    programs_q = triton.cdiv(q_rows, meta["ROWS"])
    grid = (programs_q + triton.cdiv(k_rows, meta["ROWS"]),)
    guard = torch.cuda.device(q.device) if q.device.type == "cuda" else contextlib.nullcontext()
    with guard:
        kernel[grid](
            qx, qc, qs, qo, q_rows, *q_sizes, *q_strides,
            kx, kc, ks, ko, k_rows, *k_sizes, *k_strides,
            n, q.shape[-1] - rd, programs_q,
            **meta, **LAUNCH_OPTIONS,
        )  # fmt: skip
    return qo, ko
