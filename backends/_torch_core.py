"""The torch RoPE kernels: frequency table, cos/sin, rotation and its autograd Function.

Everything per position (angles, cos/sin, the rotation) is native torch. The *frequency table*
(``rotary_dim / 2`` numbers) comes from the oracle's formulas in float64 (:func:`rope_ref.inv_freq`,
:func:`rope_ref.attention_factor`) and is then rounded once to the angle dtype, so every scaling type
(linear, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE) is exactly the oracle's.

The rotation is RoFormer (arXiv 2104.09864) eq. 34 for each channel pair (a, b):
``y_a = x_a cos - x_b sin``, ``y_b = x_b cos + x_a sin``; pairs follow the layout
(``"half"``: (i, i + rd/2), HF ``rotate_half``; ``"interleaved"``: (2i, 2i+1), GPT-J / Meta LLaMA).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import torch

import rope_ref
from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len

from ._torch_triton import check_kernel, check_triton, rotate_triton

__all__ = [
    "FLOAT_DTYPES",
    "check_config",
    "check_x",
    "as_positions",
    "check_broadcast",
    "resolve_compute_dtype",
    "check_angle_dtype",
    "seq_len_of",
    "freq_constants",
    "freq_table",
    "angle_tables",
    "expand_tables",
    "rotate_tables",
    "rotate_reference",
]

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_ANGLE_DTYPES = (torch.float32, torch.float64)
# Bytes of output per block of the CPU rotation's in-place passes. 4 MiB blocks (L3-resident) ran
# 9-25% faster than L2-sized 1 MiB blocks on the 2-core CI VM (docs/performance.md).
_BLOCK_BYTES = 1 << 22


# -- validation -----------------------------------------------------------------------------------


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


# -- frequency table and cos/sin --------------------------------------------------------------------


def seq_len_of(pos: torch.Tensor, cfg: RopeConfig, seq_len: int | None) -> int | None:
    """The length a length-dependent scaling sees (HF ``dynamic_rope_update``: max(positions) + 1).

    Reads ``pos.max()`` (a host sync) only for length-dependent scalings without an explicit
    ``seq_len``; the rule is :func:`rope_ref.frequencies.resolve_seq_len`, floor for real positions.
    """
    if seq_len is not None or cfg.scaling is None or not cfg.scaling.length_dependent or pos.numel() == 0:
        return resolve_seq_len(np.zeros(0), cfg, seq_len)
    top = pos.max().item()
    return resolve_seq_len(np.asarray([top], dtype=np.float64), cfg, None)


def _length_free(cfg: RopeConfig, seq_len: int | None) -> int | None:
    """``seq_len`` where the scaling depends on length, else ``None`` (so it never reaches a cache key)."""
    if cfg.scaling is None or not cfg.scaling.length_dependent:
        return None
    return seq_len


@torch.compiler.assume_constant_result
def freq_constants(cfg: RopeConfig, seq_len: int | None) -> tuple[tuple[float, ...], float]:
    """The oracle's float64 ``inv_freq`` and attention factor as Python floats.

    Plain floats (not arrays) so that ``torch.compile`` folds them into the graph as constants. Only
    called with a Python ``int`` (or ``None``) ``seq_len``: a symbolic one goes through
    :func:`_freq_table_op` (see :func:`freq_table`).
    """
    seq_len = _length_free(cfg, seq_len)
    freqs = rope_ref.inv_freq(cfg, seq_len)
    return tuple(float(v) for v in freqs), float(rope_ref.attention_factor(cfg, seq_len))


# -- length-dependent tables under torch.compile -----------------------------------------------------
#
# Dynamo turns an ``int`` argument that changes between calls into a symbolic integer, which
# ``assume_constant_result`` cannot take. For length-dependent scalings (dynamic NTK, LongRoPE) the
# table is a function of that runtime integer, so under ``torch.compile`` it comes from an opaque custom
# op that runs the oracle when the graph runs: no graph break, no recompile per length.

_CONFIG_KEYS: dict[RopeConfig, str] = {}
_CONFIGS: dict[str, RopeConfig] = {}


@torch.compiler.assume_constant_result
def _config_key(cfg: RopeConfig) -> str:
    """A string naming ``cfg`` for the custom op (custom ops cannot take Python objects)."""
    key = _CONFIG_KEYS.get(cfg)
    if key is None:
        key = _CONFIG_KEYS[cfg] = str(len(_CONFIG_KEYS))
        _CONFIGS[key] = cfg
    return key


@torch.library.custom_op("rope_ref::freq_table", mutates_args=())
def _freq_table_op(cfg_key: str, seq_len: int, device: torch.device) -> torch.Tensor:
    """``cat(inv_freq, [attention_factor])`` in float64 on ``device``: the oracle's values at ``seq_len``."""
    freqs, factor = freq_constants(_CONFIGS[cfg_key], seq_len)
    return torch.tensor(freqs + (factor,), dtype=torch.float64, device=device)


@_freq_table_op.register_fake
def _(cfg_key: str, seq_len: int, device: torch.device) -> torch.Tensor:
    return torch.empty(_CONFIGS[cfg_key].rotary_dim // 2 + 1, dtype=torch.float64, device=device)


def freq_table(
    cfg: RopeConfig, seq_len: int | None, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, float | torch.Tensor]:
    """``(inv_freq, attention_factor)``: the oracle's float64 table rounded once to ``dtype``.

    Under ``torch.compile`` with a length-dependent scaling and a ``seq_len``, the factor is a 0-d
    float64 tensor (it depends on a runtime length); otherwise it is a Python float.
    """
    seq_len = _length_free(cfg, seq_len)
    if seq_len is not None and torch.compiler.is_compiling():
        packed = _freq_table_op(_config_key(cfg), seq_len, torch.device(device))
        return packed[:-1].to(dtype), packed[-1]
    freqs, factor = freq_constants(cfg, seq_len)
    return torch.tensor(freqs, dtype=dtype, device=device), factor


def angle_tables(
    pos: torch.Tensor, inv_freq: torch.Tensor, factor: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``pos * inv_freq`` (shape ``pos.shape + (n,)``), times the attention factor.

    Computed in ``inv_freq.dtype`` (float32 or float64) with autocast off, so neither ``module.half()``
    nor autocast can lower the angle precision (gpt-neox #1003, transformers PR #29285). Integer
    positions convert exactly up to 2**24 in float32 and 2**53 in float64.
    """
    kind = pos.device.type
    # Devices without autocast (e.g. "meta") have nothing to turn off.
    off = torch.autocast(kind, enabled=False) if torch.amp.is_autocast_available(kind) else nullcontext()
    with off:
        theta = pos.to(inv_freq.dtype).unsqueeze(-1) * inv_freq
        cos, sin = torch.cos(theta), torch.sin(theta)
        if isinstance(factor, torch.Tensor):  # a runtime value (see freq_table): always multiply
            factor = factor.to(inv_freq.dtype)
            cos, sin = cos * factor, sin * factor
        elif factor != 1.0:
            cos = cos * factor
            sin = sin * factor
    return cos, sin


def expand_tables(cos: torch.Tensor, sin: torch.Tensor, ndim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad half-width tables with unit axes so they broadcast over an ``ndim``-d ``x``."""
    lead = ndim - cos.ndim
    if lead < 0:
        raise ValueError(f"cos/sin of shape {tuple(cos.shape)} have more axes than x ({ndim})")
    shape = (1,) * lead + tuple(cos.shape)
    return cos.reshape(shape), sin.reshape(shape)


# -- rotation -------------------------------------------------------------------------------------


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


def _rotate(x, cos, sin, layout, rd, compute, kernel: str = "torch") -> torch.Tensor:
    """The rotation by ``kernel`` (``"torch"``: eager passes; ``"triton"``: one fused Triton kernel).

    Under ``torch.compile`` both are the functional form, which inductor fuses itself.
    """
    if torch.compiler.is_compiling():
        return rotate_reference(x, cos, sin, layout, rd, compute)
    if kernel == "triton":
        return rotate_triton(x, cos, sin, layout, rd, compute)
    return _rotate_eager(x, cos, sin, layout, rd, compute)


class RotateFunction(torch.autograd.Function):
    """RoPE with a memory-free backward: only the cos/sin tables are saved, never ``x``.

    The Jacobian of eq. 34 is the (attention-factor scaled) rotation A R(theta); its transpose is
    A R(-theta), i.e. the same kernel with ``sin`` negated (flash-attn ``ApplyRotaryEmb.backward``,
    ``conjugate=True``). Gradients w.r.t. cos/sin are not produced (positions are not differentiable).
    """

    @staticmethod
    def forward(ctx, x, cos, sin, layout, rd, compute, kernel="torch"):  # type: ignore[override]
        ctx.save_for_backward(cos, sin)
        ctx.layout, ctx.rd, ctx.compute, ctx.kernel = layout, rd, compute, kernel
        return _rotate(x, cos, sin, layout, rd, compute, kernel)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        # The backward is itself a RotateFunction, so it is differentiable (double backward,
        # ``create_graph=True``, ``gradgradcheck``); without a graph to build it is the bare kernel.
        if torch.is_grad_enabled() and grad.requires_grad:
            gx = RotateFunction.apply(grad, cos, -sin, ctx.layout, ctx.rd, ctx.compute, ctx.kernel)
        else:
            gx = _rotate(grad, cos, -sin, ctx.layout, ctx.rd, ctx.compute, ctx.kernel)
        return gx, None, None, None, None, None, None


def rotate_tables(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rd: int,
    compute: torch.dtype,
    autograd: str = "function",
    kernel: str = "torch",
) -> torch.Tensor:
    """Rotate ``x`` with broadcastable half-width tables, choosing the autograd path and the kernel.

    ``autograd="function"``: :class:`RotateFunction` when a gradient is needed (saves no activations);
    ``"native"``: :func:`rotate_reference` under plain autograd (saves ``x``; the check path, which
    ``kernel`` does not affect). ``kernel``: ``"torch"`` (eager passes) or ``"triton"`` (one fused
    Triton kernel, :func:`~rope_ref.backends._torch_triton.rotate_triton`).
    """
    check_kernel(kernel)
    if kernel == "triton" and not torch.compiler.is_compiling():  # compiled: the functional form runs
        check_triton(x, compute)
    if autograd == "native":
        return rotate_reference(x, cos, sin, layout, rd, compute)
    if autograd != "function":
        raise ValueError(f"autograd must be 'function' or 'native', got {autograd!r}")
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        if cos.requires_grad or sin.requires_grad:
            # Differentiable tables (e.g. learned positions): plain autograd covers them.
            return rotate_reference(x, cos, sin, layout, rd, compute)
        return RotateFunction.apply(x, cos, sin, layout, rd, compute, kernel)
    return _rotate(x, cos, sin, layout, rd, compute, kernel)
