"""CuPy backend (built-in name ``cupy``): RoPE as one fused CUDA kernel per call.

``apply`` launches one kernel from ``rope_kernels.cu`` (compiled by NVRTC through ``cupy.RawModule``)
that reads ``x`` once, writes the output once, computes the angles from per-token positions on the
fly, handles both layouts and partial rotary (pass-through channels copied bit for bit), fp32 / fp16 /
bf16 activations, strided last-axis-contiguous inputs, more than 2^31 elements, and an in-place mode.

The shapes real kernels see (issue 16): :func:`apply_axes`, :func:`apply_qk` and :func:`apply_qkv` launch
one ``rope_qkv_apply_*`` kernel that takes element strides for every axis of its inputs and outputs
(transposed views, slices of a packed projection, non-unit strides: no copies), rotates q and k with
different head counts in the same launch, leaves V of a packed qkv bit for bit (in place: never written),
and forms positions from ids, a KV-cache ``offset`` (scalar or per batch row) or ``cu_seqlens`` (plus
start offsets) itself; ``inverse=True`` rotates by ``-m theta``; ``inplace=True`` writes through the views.

Precision (``docs/backends/cupy.md``): the frequency table (``rotary_dim / 2`` numbers) and the attention
factor come from the oracle's float64 formulas (:func:`rope_ref.inv_freq`), so every scaling type is the
oracle's; per position the kernel forms the angle as the float64 product ``position * inv_freq``
rounded once to float32, evaluates ``sincosf`` (2 ulp), and rotates in float32.

Importing this module never imports cupy and never touches a GPU; :func:`available` says whether the
backend can run here and why not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rope_ref.conformance.protocol import (
    Backend,
    KernelCall,
    KernelShapeCalls,
    NextPositionIdsFromFullIds,
    PrecisionPolicy,
    canonical_dtype,
)

from rope_ref.config import RopeConfig

from ._cupy_bf16 import bf16_bits_to_float32
from ._cupy_chatglm import apply_2d, position_ids
from ._cupy_decay import relative_upper_bound
from ._cupy_device import (  # noqa: F401 - the caches are cleared through this module by the host tests
    IO_DTYPES,
    KERNEL_SOURCE,
    Bf16Array,
    _check_config,
    _cupy,
    _freq_table,
    _freq_table_cached,
    _module,
    _multiaxis_module,
    _pair_tables_cached,
)
from ._cupy_kernel_shapes import rotate_axes, rotate_qk, rotate_qkv
from ._cupy_launch import _launch_apply, _launch_cos_sin, _launch_multiaxis

__all__ = [
    "Bf16Array",
    "CupyBackend",
    "apply",
    "apply_vjp",
    "apply_axes",
    "apply_qk",
    "apply_qkv",
    "cos_sin",
    "multiaxis_apply",
    "multiaxis_apply_vjp",
    "available",
    "make_backend",
    "KERNEL_SOURCE",
]


def available(**_: Any) -> tuple[bool, str]:
    """``(True, "")`` if cupy imports and sees a CUDA device, else ``(False, reason)``; never raises."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install failing at import
        return False, f"cupy is not importable ({type(exc).__name__}: {exc}); install rope-ref[cupy]"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        return (
            False,
            f"cupy {cupy.__version__} found no usable CUDA driver/device ({type(exc).__name__}: {exc})",
        )
    if count < 1:
        return False, f"cupy {cupy.__version__} sees no CUDA device"
    return True, ""


def apply(
    x: Any,
    positions: Any,
    cfg: RopeConfig,
    *,
    seq_len: int | None = None,
    inplace: bool = False,
    check: bool = True,
) -> Any:
    """Rotate ``x`` (``(..., head_dim)``, cupy float32/float16 or :class:`Bf16Array`) by ``positions``.

    ``positions`` (integer or real, NumPy or CuPy) broadcast against ``x.shape[:-1]``. Same semantics as
    :func:`rope_ref.apply` (RoFormer eq. 34, HF attention factor), computed in float32 and returned in
    x's dtype. ``inplace=True`` overwrites ``x`` and returns it. ``check=False`` skips the device-side
    checks of the positions (finite, within 2**53), which each cost a synchronisation.
    """
    return _launch_apply(x, positions, cfg, seq_len, inplace=inplace, sign=1.0, check=check)


def apply_vjp(
    grad_out: Any, positions: Any, cfg: RopeConfig, *, seq_len: int | None = None, check: bool = True
) -> Any:
    """Gradient of :func:`apply` w.r.t. ``x``: ``A R^T g``, the same kernel with the sine negated."""
    return _launch_apply(grad_out, positions, cfg, seq_len, inplace=False, sign=-1.0, check=check)


def cos_sin(
    positions: Any, cfg: RopeConfig, *, seq_len: int | None = None, check: bool = True
) -> tuple[Any, Any]:
    """``(cos, sin)`` float32 of shape ``positions.shape + (rotary_dim // 2,)``, attention factor included."""
    return _launch_cos_sin(positions, cfg, seq_len, check)


# -- multi-axis RoPE (M-RoPE, 2D vision RoPE, ChatGLM-6B 2D) ----------------------------------------


def multiaxis_apply(
    x: Any,
    positions: Any,
    spec: Any,
    *,
    seq_len: int | None = None,
    inplace: bool = False,
    check: bool = True,
) -> Any:
    """Multi-axis RoPE (:func:`rope_ref.multiaxis.apply`) as one fused kernel: one read and one write of x.

    ``spec`` is a :class:`rope_ref.multiaxis.MultiAxisRope` (M-RoPE presets of :mod:`rope_ref.mrope`,
    :mod:`rope_ref.vision_rope`, :func:`rope_ref.multiaxis.chatglm_2d`); ``positions`` has shape
    ``(n_streams, ...)``, each stream broadcasting against ``x.shape[:-1]``. The kernel looks up each
    pair's stream, frequency and attention factor in three small per-pair tables (built once per spec
    from the oracle's float64 formulas); angle, precision, ``inplace`` and ``check`` as :func:`apply`.
    """
    return _launch_multiaxis(x, positions, spec, seq_len, inplace=inplace, sign=1.0, check=check)


def multiaxis_apply_vjp(
    grad_out: Any, positions: Any, spec: Any, *, seq_len: int | None = None, check: bool = True
) -> Any:
    """Gradient of :func:`multiaxis_apply` w.r.t. ``x``: ``A R^T g``, the kernel with the sine negated."""
    return _launch_multiaxis(grad_out, positions, spec, seq_len, inplace=False, sign=-1.0, check=check)


# -- the shapes real kernels see (issue 16) ----------------------------------------------------------


def apply_axes(x: Any, cfg: RopeConfig, *, axes: str, **kwargs: Any) -> Any:
    """Rotate ``x`` (any strides) whose axes ``axes`` names (``"bshd"``, ``"bhsd"``, ``"sbhd"``, ``"thd"``).

    Positions in exactly one form: ``positions=`` (HF ``(B, S)`` ids, per-token ids, a scalar or one
    entry per leading axis), ``offset=`` (an int or one per batch row: token ``s`` of row ``b`` is at
    ``offset[b] + s``) or ``cu_seqlens=`` (``thd``; positions restart per sequence, plus
    ``start_offsets``, an int or one per sequence; ``max_seqlen`` optional). ``inverse=True`` rotates by
    ``-m theta`` (a length-dependent scaling sees the forward positions); ``inplace=True`` writes into
    ``x``'s own elements and returns ``x``; ``seq_len`` as :func:`apply`.
    """
    return rotate_axes(x, cfg, KernelCall(axes, **kwargs))


def apply_qk(q: Any, k: Any, cfg: RopeConfig, *, axes: str, **kwargs: Any) -> tuple[Any, Any]:
    """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (``Hk`` divides ``Hq``) in one launch.

    Options as :func:`apply_axes` (positions must not vary over heads). Returns ``(q_rot, k_rot)``; in
    place ``(q, k)`` themselves, which may be disjoint slices of one packed buffer.
    """
    return rotate_qk(q, k, cfg, KernelCall(axes, **kwargs))


def apply_qkv(
    qkv: Any, cfg: RopeConfig, *, axes: str, num_heads_q: int, num_heads_kv: int | None = None, **kwargs: Any
) -> Any:
    """Rotate the q and k heads of a packed ``(.., Hq + 2 Hk, ..)`` tensor in one launch; V bit for bit.

    ``num_heads_kv`` defaults to ``num_heads_q``; other options as :func:`apply_axes`. Out of place a new
    tensor (V copied exactly by the same launch); in place ``qkv`` itself (V never written).
    """
    return rotate_qkv(qkv, cfg, num_heads_q, num_heads_kv, KernelCall(axes, **kwargs))


# -- the conformance backend -----------------------------------------------------------------------


class CupyBackend(KernelShapeCalls, NextPositionIdsFromFullIds, Backend):
    """The fused CuPy kernels behind the conformance protocol (see the module docstring)."""

    name = "cupy"
    #: issue 16: the kernel-shape operations write through the handed views when asked
    inplace_ops = frozenset({"apply_axes", "apply_qk", "apply_qkv"})

    def __init__(self, io_dtype: str = "float32", inplace: bool = False) -> None:
        cp = _cupy()
        if io_dtype not in IO_DTYPES:
            raise ValueError(f"the cupy backend supports precision fp32, fp16 or bf16, got {io_dtype!r}")
        self.precision = PrecisionPolicy(io_dtype, "float32", "float32")
        self.inplace = bool(inplace)
        self.version = str(cp.__version__)
        dev = cp.cuda.runtime.getDevice()
        props = cp.cuda.runtime.getDeviceProperties(dev)
        gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        try:
            driver = cp.cuda.runtime.driverGetVersion()
            driver_text = f", CUDA driver API {driver // 1000}.{driver % 1000 // 10}"
        except Exception:  # a stand-in runtime without the query
            driver_text = ""
        self.device = f"cuda:{dev} ({gpu}{driver_text})"

    # -- conversion --------------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        cp = _cupy()
        array = np.asarray(array)
        if dtype is None:
            return cp.asarray(array)
        dtype = canonical_dtype(dtype)
        if dtype == "bfloat16":
            return Bf16Array.from_numpy(array)
        return cp.asarray(array.astype(dtype))

    def to_numpy(self, array: Any) -> np.ndarray:
        if isinstance(array, Bf16Array):
            return array.to_numpy()
        cp = _cupy()
        if isinstance(array, cp.ndarray):
            if array.dtype.name == "bfloat16":
                return bf16_bits_to_float32(cp.asnumpy(array.view(cp.uint16)))
            return cp.asnumpy(array)
        return np.asarray(array)

    # -- operations --------------------------------------------------------------------------------
    def inv_freq(self, cfg, seq_len=None):
        return _freq_table(_check_config(cfg), seq_len)[0].copy()

    def attention_factor(self, cfg, seq_len=None):
        return _freq_table(_check_config(cfg), seq_len)[1]

    def cos_sin(self, positions, cfg, seq_len=None):
        return cos_sin(positions, cfg, seq_len=seq_len)

    def apply(self, x, positions, cfg, seq_len=None):
        return apply(x, positions, cfg, seq_len=seq_len, inplace=self.inplace)

    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        return apply_vjp(grad_out, positions, cfg, seq_len=seq_len)

    def chatglm_position_ids(self, input_ids, **tokens):
        return position_ids(input_ids, **tokens)

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        return apply_2d(x, position_ids, block_position_ids, base=base, precision=precision)

    def multiaxis_apply(self, x, positions, spec):
        """Issue 20: the fused multi-axis kernel (the id builders and the MLA scale stay unsupported)."""
        return multiaxis_apply(x, positions, spec, inplace=self.inplace)

    # -- the shapes real kernels see (issue 16): one rope_qkv_apply_* launch each --------------------
    def permute(self, array, order):
        return array.transpose(tuple(order))

    def _axes_call(self, x, cfg, call):
        return rotate_axes(x, cfg, call)

    def _qk_call(self, q, k, cfg, call):
        return rotate_qk(q, k, cfg, call)

    def _qkv_call(self, qkv, cfg, num_heads_q, num_heads_kv, call):
        return rotate_qkv(qkv, cfg, num_heads_q, num_heads_kv, call)

    def decay_upper_bound(self, distances, cfg):
        return relative_upper_bound(distances, cfg)


def make_backend(precision: str | None = None, inplace: bool = False) -> CupyBackend:
    """The ``cupy`` conformance backend; ``precision`` is fp32 (default), fp16 or bf16."""
    io = "float32" if precision is None else canonical_dtype(precision, "precision")
    if io not in IO_DTYPES:
        raise ValueError(f"the cupy backend supports precision fp32, fp16 or bf16, got {precision!r}")
    return CupyBackend(io, inplace=inplace)
