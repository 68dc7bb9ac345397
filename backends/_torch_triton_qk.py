"""q and k in one Triton launch (``apply_qk(..., kernel="triton")`` without autograd; issue 16).

Each tensor is laid out by :func:`~rope_ref.backends._torch_triton.operand_layout` (rows merged where
strides allow, up to four row axes); the launch gets ``ceil(q_rows / ROWS) +
ceil(k_rows / ROWS)`` programs and the kernel picks q or k by program id.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from ._torch_triton import LAUNCH_OPTIONS, kernel_meta, operand_layout

__all__ = ["rotate_triton_qk"]


@functools.cache
def _kernel():
    import triton

    from ._triton_qk_kernels import rope_rows_qk

    return triton, rope_rows_qk


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
    qx, qc, qs, q_rows, q_sizes, q_strides = operand_layout(q, cos, sin, qo, n)
    kx, kc, ks, k_rows, k_sizes, k_strides = operand_layout(k, cos, sin, ko, n)
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
