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

import functools
from pathlib import Path
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import (
    Backend,
    NextPositionIdsFromFullIds,
    PrecisionPolicy,
    canonical_dtype,
)

import rope_ref
from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len

from ._cupy_bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from ._cupy_plan import (
    MULTIAXIS_DEFINE,
    MULTIAXIS_KERNEL_FOR_DTYPE,
    cos_sin_launch,
    element_strides,
    pack_shape,
    plan_apply,
)

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

#: The CUDA source of every kernel (shipped as package data).
KERNEL_SOURCE = Path(__file__).with_name("rope_kernels.cu")

_IO_DTYPES = ("float32", "float16", "bfloat16")


def _cupy() -> Any:
    import cupy

    return cupy


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


@functools.cache
def _module() -> Any:
    cp = _cupy()
    return cp.RawModule(code=KERNEL_SOURCE.read_text(encoding="utf-8"), options=("--std=c++14",))


def _kernel(name: str) -> Any:
    return _module().get_function(name)


@functools.cache
def _multiaxis_module() -> Any:
    """The same source compiled with its multi-axis kernels (``rope_multiaxis_apply_*``) enabled."""
    cp = _cupy()
    return cp.RawModule(
        code=KERNEL_SOURCE.read_text(encoding="utf-8"), options=("--std=c++14", MULTIAXIS_DEFINE)
    )


# -- bfloat16 arrays -------------------------------------------------------------------------------


class Bf16Array:
    """A bfloat16 CuPy array, stored as its uint16 bit patterns (CuPy has no bfloat16 dtype).

    ``bits`` is a ``cupy.ndarray`` of dtype uint16; the kernels read and write it as bfloat16.
    """

    dtype_name = "bfloat16"

    def __init__(self, bits: Any) -> None:
        cp = _cupy()
        if not isinstance(bits, cp.ndarray) or bits.dtype != cp.uint16:
            raise TypeError(f"Bf16Array needs a cupy uint16 array of bit patterns, got {type(bits).__name__}")
        self.bits = bits

    @classmethod
    def from_numpy(cls, values: np.ndarray) -> Bf16Array:
        """Round float values to bfloat16 (nearest even) on the host and upload the bits."""
        return cls(_cupy().asarray(float32_to_bf16_bits(np.asarray(values, dtype=np.float32))))

    @classmethod
    def from_float32(cls, values: Any) -> Bf16Array:
        """Round a cupy float32 array to bfloat16 (nearest even) on the device."""
        cp = _cupy()
        u = cp.ascontiguousarray(values, dtype=cp.float32).view(cp.uint32)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return cls(cp.where(nan, (u >> 16) | 0x40, rounded).astype(cp.uint16))

    def to_float32(self) -> Any:
        """The values as a cupy float32 array (exact)."""
        cp = _cupy()
        return (cp.ascontiguousarray(self.bits).astype(cp.uint32) << 16).view(cp.float32)

    def to_numpy(self) -> np.ndarray:
        return bf16_bits_to_float32(_cupy().asnumpy(self.bits))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.bits.shape

    @property
    def ndim(self) -> int:
        return self.bits.ndim

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte strides (2 bytes per element), as ``cupy.ndarray.strides``."""
        return self.bits.strides

    def transpose(self, *axes: Any) -> Bf16Array:
        """A view with the axes permuted (``cupy.ndarray.transpose`` semantics)."""
        return Bf16Array(self.bits.transpose(*axes))

    def __getitem__(self, key: Any) -> Bf16Array:
        return Bf16Array(self.bits[key])

    def __repr__(self) -> str:
        return f"Bf16Array(shape={self.shape})"


def _storage(x: Any, name: str = "x") -> tuple[Any, str]:
    """``(array the kernel reads, dtype name)`` for a cupy float32/float16 array or a :class:`Bf16Array`."""
    if isinstance(x, Bf16Array):
        return x.bits, "bfloat16"
    cp = _cupy()
    if not isinstance(x, cp.ndarray):
        raise TypeError(
            f"{name} must be a cupy.ndarray or rope_ref.backends.cupy.Bf16Array, got {type(x).__name__}"
        )
    dtype_name = x.dtype.name
    if dtype_name == "bfloat16":  # a CuPy build with an ml_dtypes bfloat16 dtype
        return x.view(cp.uint16), dtype_name
    if dtype_name not in _IO_DTYPES:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16, got {dtype_name}")
    return x, dtype_name


def _wrap_like(storage: Any, template: Any) -> Any:
    if isinstance(template, Bf16Array):
        return Bf16Array(storage)
    if template.dtype.name == "bfloat16":
        return storage.view(template.dtype)
    return storage


# -- positions and frequency table -----------------------------------------------------------------


def _positions(positions: Any, check: bool, name: str = "positions") -> Any:
    """Positions as a cupy float64 array; with ``check``, reject NaN/inf and integers beyond 2**53."""
    cp = _cupy()
    pos = positions if isinstance(positions, cp.ndarray) else cp.asarray(np.asarray(positions))
    if pos.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be an integer or real floating-point array, got dtype {pos.dtype}")
    if check and pos.size:
        if pos.dtype.kind == "f" and not bool(cp.isfinite(pos).all()):
            raise ValueError(f"{name} must be finite")
        if pos.dtype.kind in "iu" and pos.dtype.itemsize == 8 and int(cp.abs(pos).max()) > 2**53:
            raise ValueError(f"{name} has integers beyond +-2**53, which float64 cannot hold exactly")
    return pos.astype(cp.float64, copy=False)


def _check_config(cfg: Any) -> RopeConfig:
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    return cfg


def _seq_len(pos: Any, cfg: RopeConfig, seq_len: int | None) -> int | None:
    """HF's rule (``resolve_seq_len``) with the maximum taken on the device only when it matters."""
    if seq_len is not None or cfg.scaling is None or not cfg.scaling.length_dependent or pos.size == 0:
        return resolve_seq_len(np.empty(0), cfg, seq_len)
    return resolve_seq_len(np.asarray([float(pos.max())]), cfg, None)


def _freq_table(cfg: RopeConfig, seq_len: int | None) -> tuple[Any, float]:
    """``(inv_freq on the device as float64, attention factor)`` from the oracle's float64 formulas."""
    return _freq_table_cached(cfg, seq_len, _cupy().cuda.runtime.getDevice())


@functools.lru_cache(maxsize=64)
def _freq_table_cached(cfg: RopeConfig, seq_len: int | None, _device: int) -> tuple[Any, float]:
    cp = _cupy()
    table = cp.asarray(np.ascontiguousarray(rope_ref.inv_freq(cfg, seq_len), dtype=np.float64))
    return table, float(rope_ref.attention_factor(cfg, seq_len))


# -- operations ------------------------------------------------------------------------------------


def _launch_apply(
    x: Any,
    positions: Any,
    cfg: RopeConfig,
    seq_len: int | None,
    *,
    inplace: bool,
    sign: float,
    check: bool,
    out: Any = None,
) -> Any:
    """Validate, plan and launch one apply kernel; ``out`` (internal) is a preallocated destination view."""
    cp = _cupy()
    cfg = _check_config(cfg)
    xs, dtype_name = _storage(x)
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace must be a bool, got {type(inplace).__name__}")
    pos = _positions(positions, check)
    seq_len = _seq_len(pos, cfg, seq_len)
    inv_freq, factor = _freq_table(cfg, seq_len)
    if out is None:
        out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    elif inplace or out.shape != xs.shape or out.dtype != xs.dtype:
        raise ValueError(f"out must match x (shape {xs.shape}, dtype {xs.dtype}) and inplace must be False")
    itemsize = xs.dtype.itemsize
    plan = plan_apply(
        dtype_name=dtype_name,
        x_shape=xs.shape,
        x_strides=element_strides(xs.strides, itemsize, "x"),
        out_strides=element_strides(out.strides, itemsize, "out"),
        pos_shape=pos.shape,
        pos_strides=element_strides(pos.strides, 8, "positions"),
        head_dim=cfg.head_dim,
        rotary_dim=cfg.rotary_dim,
        layout=cfg.layout,
        inplace=inplace,
    )
    if xs.size == 0:
        return _wrap_like(out, x)
    args = (
        xs,
        out,
        pos,
        inv_freq,
        pack_shape(plan),
        np.int32(plan.n_pairs),
        np.int32(plan.n_pass),
        np.int32(plan.half_layout),
        np.int32(plan.copy_pass),
        np.float32(factor),
        np.float32(sign),
    )
    _kernel(plan.kernel)(plan.grid, plan.block, args)
    return _wrap_like(out, x)


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
    cp = _cupy()
    cfg = _check_config(cfg)
    pos = cp.ascontiguousarray(_positions(positions, check))
    seq_len = _seq_len(pos, cfg, seq_len)
    inv_freq, factor = _freq_table(cfg, seq_len)
    n = cfg.rotary_dim // 2
    cos = cp.empty(pos.shape + (n,), dtype=cp.float32)
    sin = cp.empty(pos.shape + (n,), dtype=cp.float32)
    if pos.size:
        grid, block = cos_sin_launch(pos.size, n)
        args = (pos, inv_freq, np.int64(pos.size), np.int32(n), np.float32(factor), cos, sin)
        _kernel("rope_cos_sin_f32")(grid, block, args)
    return cos, sin


# -- multi-axis RoPE (M-RoPE, 2D vision RoPE, ChatGLM-6B 2D) ----------------------------------------


@functools.lru_cache(maxsize=64)
def _pair_tables_cached(spec: Any, seq_len: int | None, _device: int) -> tuple[Any, Any, Any]:
    """Per pair: stream (int32), frequency (float64) and attention factor (float32), on the device."""
    cp = _cupy()
    phi, amp = spec.pair_frequencies(seq_len)
    return (
        cp.asarray(np.asarray(spec.streams, dtype=np.int32)),
        cp.asarray(np.ascontiguousarray(phi, dtype=np.float64)),
        cp.asarray(np.ascontiguousarray(amp, dtype=np.float32)),
    )


def _launch_multiaxis(
    x: Any, positions: Any, spec: Any, seq_len: int | None, *, inplace: bool, sign: float, check: bool
) -> Any:
    """Validate, plan and launch one multi-axis kernel (one read and one write of ``x``)."""
    from rope_ref.multiaxis import MultiAxisRope

    cp = _cupy()
    if not isinstance(spec, MultiAxisRope):
        raise TypeError(f"spec must be a rope_ref.multiaxis.MultiAxisRope, got {type(spec).__name__}")
    xs, dtype_name = _storage(x)
    if not isinstance(inplace, bool):
        raise TypeError(f"inplace must be a bool, got {type(inplace).__name__}")
    pos = _positions(positions, check)
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(
            f"positions must have a leading axis of n_streams={spec.n_streams} (one row per stream), "
            f"got shape {tuple(pos.shape)}"
        )
    lengths = {_seq_len(pos, t, seq_len) for t in spec.tables} - {None}  # the oracle's one length
    streams, phi, amp = _pair_tables_cached(
        spec, max(lengths) if lengths else seq_len, cp.cuda.runtime.getDevice()
    )
    out = xs if inplace else cp.empty(xs.shape, dtype=xs.dtype)
    itemsize = xs.dtype.itemsize
    pos_strides = element_strides(pos.strides, 8, "positions")
    plan = plan_apply(
        dtype_name=dtype_name,
        x_shape=xs.shape,
        x_strides=element_strides(xs.strides, itemsize, "x"),
        out_strides=element_strides(out.strides, itemsize, "out"),
        pos_shape=pos.shape[1:],
        pos_strides=pos_strides[1:],
        head_dim=spec.head_dim,
        rotary_dim=spec.rotary_dim,
        layout=spec.layout,
        inplace=inplace,
    )
    if xs.size == 0:
        return _wrap_like(out, x)
    args = (
        xs,
        out,
        pos,
        np.int64(pos_strides[0]),
        streams,
        phi,
        amp,
        pack_shape(plan),
        np.int32(plan.n_pairs),
        np.int32(plan.n_pass),
        np.int32(plan.half_layout),
        np.int32(spec.blocks),
        np.int32(plan.copy_pass),
        np.float32(sign),
    )
    kernel = _multiaxis_module().get_function(MULTIAXIS_KERNEL_FOR_DTYPE[dtype_name])
    kernel(plan.grid, plan.block, args)
    return _wrap_like(out, x)


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
    from ._cupy_extras import apply_axes as _apply_axes

    return _apply_axes(x, cfg, axes=axes, **kwargs)


def apply_qk(q: Any, k: Any, cfg: RopeConfig, *, axes: str, **kwargs: Any) -> tuple[Any, Any]:
    """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (``Hk`` divides ``Hq``) in one launch.

    Options as :func:`apply_axes` (positions must not vary over heads). Returns ``(q_rot, k_rot)``; in
    place ``(q, k)`` themselves, which may be disjoint slices of one packed buffer.
    """
    from ._cupy_extras import apply_qk as _apply_qk

    return _apply_qk(q, k, cfg, axes=axes, **kwargs)


def apply_qkv(qkv: Any, cfg: RopeConfig, *, axes: str, num_heads_q: int, **kwargs: Any) -> Any:
    """Rotate the q and k heads of a packed ``(.., Hq + 2 Hk, ..)`` tensor in one launch; V bit for bit.

    ``num_heads_kv`` defaults to ``num_heads_q``; other options as :func:`apply_axes`. Out of place a new
    tensor (V copied exactly by the same launch); in place ``qkv`` itself (V never written).
    """
    from ._cupy_extras import apply_qkv as _apply_qkv

    return _apply_qkv(qkv, cfg, axes=axes, num_heads_q=num_heads_q, **kwargs)


# -- the conformance backend -----------------------------------------------------------------------


class CupyBackend(NextPositionIdsFromFullIds, Backend):
    """The fused CuPy kernels behind the conformance protocol (see the module docstring)."""

    name = "cupy"
    #: issue 16: the kernel-shape operations write through the handed views when asked
    inplace_ops = frozenset({"apply_axes", "apply_qk", "apply_qkv"})

    def __init__(self, io_dtype: str = "float32", inplace: bool = False) -> None:
        cp = _cupy()
        if io_dtype not in _IO_DTYPES:
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

    def chatglm_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        from ._cupy_extras import position_ids

        return position_ids(
            input_ids,
            bos_token_id=bos_token_id,
            mask_token_id=mask_token_id,
            gmask_token_id=gmask_token_id,
            position_encoding_2d=position_encoding_2d,
        )

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        from ._cupy_extras import apply_2d

        return apply_2d(x, position_ids, block_position_ids, base=base, precision=precision)

    def multiaxis_apply(self, x, positions, spec):
        """Issue 20: the fused multi-axis kernel (the id builders and the MLA scale stay unsupported)."""
        return multiaxis_apply(x, positions, spec, inplace=self.inplace)

    # -- the shapes real kernels see (issue 16): one rope_qkv_apply_* launch each --------------------
    def permute(self, array, order):
        return array.transpose(tuple(order))

    def apply_axes(
        self,
        x,
        cfg,
        *,
        axes,
        positions=None,
        offset=None,
        cu_seqlens=None,
        start_offsets=None,
        max_seqlen=None,
        inverse=False,
        inplace=False,
        seq_len=None,
    ):
        return apply_axes(
            x,
            cfg,
            axes=axes,
            positions=positions,
            offset=offset,
            cu_seqlens=cu_seqlens,
            start_offsets=start_offsets,
            max_seqlen=max_seqlen,
            inverse=inverse,
            inplace=inplace,
            seq_len=seq_len,
        )

    def apply_qk(
        self,
        q,
        k,
        cfg,
        *,
        axes,
        positions=None,
        offset=None,
        cu_seqlens=None,
        start_offsets=None,
        max_seqlen=None,
        inverse=False,
        inplace=False,
        seq_len=None,
    ):
        return apply_qk(
            q,
            k,
            cfg,
            axes=axes,
            positions=positions,
            offset=offset,
            cu_seqlens=cu_seqlens,
            start_offsets=start_offsets,
            max_seqlen=max_seqlen,
            inverse=inverse,
            inplace=inplace,
            seq_len=seq_len,
        )

    def apply_qkv(
        self,
        qkv,
        cfg,
        *,
        axes,
        num_heads_q,
        num_heads_kv,
        positions=None,
        offset=None,
        cu_seqlens=None,
        start_offsets=None,
        max_seqlen=None,
        inverse=False,
        inplace=False,
        seq_len=None,
    ):
        return apply_qkv(
            qkv,
            cfg,
            axes=axes,
            num_heads_q=num_heads_q,
            num_heads_kv=num_heads_kv,
            positions=positions,
            offset=offset,
            cu_seqlens=cu_seqlens,
            start_offsets=start_offsets,
            max_seqlen=max_seqlen,
            inverse=inverse,
            inplace=inplace,
            seq_len=seq_len,
        )

    def decay_upper_bound(self, distances, cfg):
        from ._cupy_extras import relative_upper_bound

        return relative_upper_bound(distances, cfg)


def make_backend(precision: str | None = None, inplace: bool = False) -> CupyBackend:
    """The ``cupy`` conformance backend; ``precision`` is fp32 (default), fp16 or bf16."""
    io = "float32" if precision is None else canonical_dtype(precision, "precision")
    if io not in _IO_DTYPES:
        raise ValueError(f"the cupy backend supports precision fp32, fp16 or bf16, got {precision!r}")
    return CupyBackend(io, inplace=inplace)
