"""Argument checks of the torch adapter: configs, tensors, positions, dtypes, autograd path and kernel.

Every public function of the adapter validates through these, so each message is written once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rope_ref.config import RopeConfig

__all__ = [
    "FLOAT_DTYPES",
    "AUTOGRAD_PATHS",
    "check_config",
    "check_x",
    "as_positions",
    "check_broadcast",
    "check_angle_dtype",
    "resolve_compute_dtype",
    "check_autograd",
    "KERNELS",
    "check_kernel",
]

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_ANGLE_DTYPES = (torch.float32, torch.float64)
#: The autograd paths (``autograd=``): the memory-free Function or plain autograd of the reference.
AUTOGRAD_PATHS = ("function", "native")
#: The rotation kernels (``kernel=``): eager torch ops, the fused Triton kernel (:mod:`._torch_triton`) and
#: the one-pass C++ CPU kernel (:mod:`._torch_cpp`).
KERNELS = ("torch", "triton", "cpp")


def check_config(cfg: Any) -> RopeConfig:
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    return cfg


def check_x(x: Any, head_dim: int | None, name: str = "x") -> torch.Tensor:
    """``x`` must be a floating torch tensor whose last axis is ``head_dim`` (when given)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have a real floating dtype {FLOAT_DTYPES}, got {x.dtype}")
    if x.ndim == 0 or (head_dim is not None and x.shape[-1] != head_dim):
        raise ValueError(
            f"{name}.shape[-1] must equal head_dim={head_dim}, got {name}.shape={tuple(x.shape)}"
        )
    return x


def as_positions(positions: Any, device: torch.device, name: str = "positions") -> torch.Tensor:
    """Positions as a tensor on ``device``: integer (any width) or real floating; never bool/complex.

    Real positions must be finite (checked eagerly; skipped while ``torch.compile`` traces, where a
    data-dependent check would break the graph).
    """
    if isinstance(positions, torch.Tensor):
        pos = positions
    elif isinstance(positions, (bool, np.bool_)) or positions is None or isinstance(positions, (str, bytes)):
        raise TypeError(f"{name} must be integer or real positions, got {type(positions).__name__}")
    else:
        arr = np.asarray(positions)
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"{name} must be integer or real positions, got dtype {arr.dtype}")
        pos = torch.as_tensor(arr)
    if pos.dtype == torch.bool or pos.is_complex():
        raise TypeError(f"{name} must be integer or real positions, got dtype {pos.dtype}")
    if pos.dtype.is_floating_point and not torch.compiler.is_compiling():
        if not bool(torch.isfinite(pos).all()):
            bad = pos[~torch.isfinite(pos)].flatten()[0].item()
            raise ValueError(f"{name} must be finite, got {bad}")
    return pos.to(device)


def check_broadcast(pos: torch.Tensor, lead: tuple[int, ...], name: str = "positions") -> None:
    """``pos`` must broadcast *to* ``lead`` (it may not enlarge it)."""
    try:
        shape = torch.broadcast_shapes(tuple(pos.shape), tuple(lead))
    except RuntimeError:
        shape = None
    if shape != tuple(lead):
        raise ValueError(
            f"{name} of shape {tuple(pos.shape)} does not broadcast against x.shape[:-1] = {tuple(lead)}"
        )


def check_angle_dtype(angle_dtype: Any) -> torch.dtype:
    if angle_dtype not in _ANGLE_DTYPES:
        raise ValueError(f"angle_dtype must be torch.float32 or torch.float64, got {angle_dtype!r}")
    return angle_dtype


def resolve_compute_dtype(compute_dtype: Any, x_dtype: torch.dtype) -> torch.dtype:
    """The rotation's arithmetic dtype.

    ``None`` (default): float32 for float16/bfloat16 inputs (one rounding, at the output, as the
    flash-attn and TransformerEngine kernels do), otherwise the input dtype. ``"input"``: the input
    dtype (HF's eager arithmetic). A torch dtype: that dtype.
    """
    if compute_dtype is None:
        return torch.float32 if x_dtype in (torch.float16, torch.bfloat16) else x_dtype
    if compute_dtype == "input":
        return x_dtype
    if compute_dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"compute_dtype must be None, 'input' or one of {FLOAT_DTYPES}, got {compute_dtype!r}"
        )
    return compute_dtype


def check_autograd(autograd: Any) -> str:
    """``autograd`` must name one of :data:`AUTOGRAD_PATHS`."""
    if autograd not in AUTOGRAD_PATHS:
        raise ValueError(f"autograd must be 'function' or 'native', got {autograd!r}")
    return autograd


def check_kernel(kernel: Any) -> str:
    """``kernel`` must name one of :data:`KERNELS`."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return kernel
