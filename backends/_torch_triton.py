"""A fused Triton kernel for the torch adapter's rotation (``kernel="triton"``).

One pass over memory: each program loads a tile of rows of ``x``, the matching rows of the half-width
cos/sin tables, rotates every channel pair by RoFormer (arXiv 2104.09864) eq. 34
(``y_a = x_a cos - x_b sin``, ``y_b = x_b cos + x_a sin``) in float32 or float64, rounds once to the
output dtype and stores; channels ``rotary_dim:`` are copied unchanged. Pairs follow the layout
(``"half"``: (i, i + rd/2) as HF ``rotate_half``; ``"interleaved"``: (2i, 2i+1) as GPT-J). This is the
structure of flash-attn's ``rotary_kernel`` (Dao-AILab/flash-attention, ``flash_attn/ops/triton/rotary.py``)
and vLLM's rotary kernels; the code is ours.

``triton`` is imported only when the kernel is first used. On CUDA tensors the kernel is compiled; on
CPU tensors it runs under Triton's interpreter, which Triton enables with ``TRITON_INTERPRET=1`` in the
environment before ``triton`` is imported (how the tests check the kernel on machines without a GPU).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
from typing import Any

import torch

__all__ = [
    "LAUNCH_OPTIONS",
    "TILE_PAIRS",
    "check_triton",
    "kernel_meta",
    "triton_status",
    "operand_layout",
    "rotate_triton",
]

# Leading (row) axes the kernel indexes after merging; more are merged by a copy (see _row_axes).
_MAX_ROW_AXES = 4
_COMPUTE_DTYPES = (torch.float32, torch.float64)


@functools.cache
def _have_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_status(device: torch.device) -> tuple[bool, str]:
    """``(True, "")`` if the Triton kernel can run on ``device`` here, else ``(False, reason)``."""
    if not _have_triton():
        return False, "kernel='triton' needs the triton package (pip install 'rope-ref[triton]')"
    if device.type == "cuda":
        return True, ""
    if device.type == "cpu":
        if _interpreting():
            return True, ""
        return False, (
            "kernel='triton' runs on CUDA tensors; x is on the CPU (for tests, TRITON_INTERPRET=1 set "
            "before triton is imported runs Triton's interpreter on CPU tensors)"
        )
    return False, f"kernel='triton' runs on CUDA tensors, x is on {device.type}"


def check_triton(x: torch.Tensor, compute: torch.dtype) -> None:
    """Raise (naming the reason) unless the Triton kernel can rotate ``x`` in ``compute`` here."""
    ok, reason = triton_status(x.device)
    if not ok:
        raise RuntimeError(reason)
    if compute not in _COMPUTE_DTYPES:
        raise ValueError(
            f"kernel='triton' computes in float32 or float64, got compute_dtype={compute} "
            "(use kernel='torch' for arithmetic in the input's half precision)"
        )
    if x.dtype == torch.bfloat16 and compute == torch.float64:
        raise ValueError(
            "kernel='triton' does not round float64 arithmetic to bfloat16 (it would round twice); "
            "use compute_dtype=torch.float32 or kernel='torch'"
        )


@functools.cache
def _interpreting() -> bool:
    """Whether ``triton.jit`` makes interpreted functions (``TRITON_INTERPRET=1``; fixed per process,
    as the kernel is decorated once)."""
    try:
        from triton import knobs  # triton >= 3.4 reads the variable here
    except ImportError:  # older triton reads the environment variable directly
        return os.environ.get("TRITON_INTERPRET", "0") == "1"
    return bool(knobs.runtime.interpret)


@functools.cache
def _kernel():
    """The jitted kernel, imported on first use (so importing the adapter never imports triton)."""
    import triton

    from ._triton_kernels import rope_rows

    return triton, rope_rows


#: Compile options of every launch. No FMA contraction: ``a*c - b*s`` is rounded as written, so the
#: compiled kernel gives the bits of Triton's interpreter (the formula evaluated op by op).
LAUNCH_OPTIONS = {"num_warps": 4, "enable_fp_fusion": False}


#: Pairs per program tile. Compiled: about 1024 (H100, bf16 q+k (1, 4096, 32/8, 128), rope_rows_qk alone:
#: 16 rows x 64 pairs ran at 100% of the device-to-device copy of the same bytes, the former 64 rows at 88%,
#: 128 rows at 53%; docs/performance.md "GPU (H100)"). Interpreted: about 4096 (fewer, larger programs run
#: faster under Triton's interpreter). The tile changes no result: every element is computed alone.
TILE_PAIRS = {"compiled": 1024, "interpreted": 4096}


def kernel_meta(layout: str, rd: int, head_dim: int, compute: torch.dtype) -> dict[str, Any]:
    """The kernel's compile-time constants for one configuration."""
    n = rd // 2
    block_n = 1 << max(0, (n - 1).bit_length())
    block_p = 0 if rd == head_dim else 1 << max(0, (head_dim - rd - 1).bit_length())
    tile = TILE_PAIRS["interpreted" if _interpreting() else "compiled"]
    return {
        "INTERLEAVED": layout == "interleaved",
        "FP64": compute == torch.float64,
        # rows per program: tiles of about TILE_PAIRS pairs
        "ROWS": max(1, min(64, tile // max(block_n, block_p))),
        "BLOCK_N": block_n,
        "BLOCK_P": block_p,
    }


def _row_axes(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[list[int], list[list[int]]]:
    """Drop unit axes and merge neighbours that are one strided run in *every* tensor."""
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for axis, size in enumerate(shape):
        if size == 1:
            continue
        if sizes and all(m[-1] == st[axis] * size for m, st in zip(merged, strides, strict=True)):
            sizes[-1] *= size
            for m, st in zip(merged, strides, strict=True):
                m[-1] = st[axis]
            continue
        sizes.append(size)
        for m, st in zip(merged, strides, strict=True):
            m.append(st[axis])
    return sizes, merged


def operand_layout(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor, n: int) -> tuple:
    """``(x, cos, sin, n_rows, sizes[1:], strides)``: one tensor's arguments of a launch.

    Row axes merged where the strides of x, cos, sin and out allow (:func:`_row_axes`), padded to four;
    ``strides`` flat in the kernel's order (x's four and its channel stride, cos's, sin's, out's four).
    """
    lead = tuple(x.shape[:-1])
    cos, sin = torch.broadcast_to(cos, lead + (n,)), torch.broadcast_to(sin, lead + (n,))
    sizes, strides = _row_axes(lead, [t.stride()[:-1] for t in (x, cos, sin, out)])
    if len(sizes) > _MAX_ROW_AXES:  # rare (5+ unmergeable axes): make every operand one flat run
        x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
        sizes, strides = _row_axes(lead, [t.stride()[:-1] for t in (x, cos, sin, out)])
    pad = _MAX_ROW_AXES - len(sizes)
    sizes = [1] * pad + sizes
    strides = [[0] * pad + s for s in strides]
    flat = (
        *strides[0], x.stride(-1), *strides[1], cos.stride(-1), *strides[2], sin.stride(-1), *strides[3]
    )  # fmt: skip
    return x, cos, sin, math.prod(lead), sizes[1:], flat


def rotate_triton(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rd: int, compute: torch.dtype
) -> torch.Tensor:
    """Eq. 34 in one fused pass; same contract as the eager ``_rotate_eager`` (new contiguous output).

    ``cos``/``sin`` are half-width tables broadcastable to ``x.shape[:-1] + (rd // 2,)``. The
    arithmetic runs in ``compute`` (float32 or float64); each output element is rounded once.
    The caller has passed ``x`` and ``compute`` through :func:`check_triton` (``rotate_tables`` does).
    """
    for name, table in (("cos", cos), ("sin", sin)):
        if table.device != x.device:
            raise ValueError(f"{name} is on {table.device} but x is on {x.device}")
        if not table.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating tensor, got {table.dtype}")
    n = rd // 2
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    x_, cos, sin, n_rows, sizes, strides = operand_layout(x, cos, sin, out, n)
    meta = kernel_meta(layout, rd, x.shape[-1], compute)
    triton, kernel = _kernel()
    grid = (triton.cdiv(n_rows, meta["ROWS"]),)
    # Triton launches on the current CUDA device: make it x's (x may live on cuda:1).
    guard = torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()
    with guard:
        kernel[grid](
            x_, cos, sin, out, n_rows, *sizes, *strides, n, x.shape[-1] - rd, 0, **meta, **LAUNCH_OPTIONS
        )  # fmt: skip
    return out
