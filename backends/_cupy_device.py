"""The device side of the CuPy backend: the compiled kernels, bfloat16 arrays, and what every launch reads.

:func:`_module` compiles ``rope_kernels.cu`` once (NVRTC through ``cupy.RawModule``); :class:`Bf16Array`
holds bfloat16 activations as uint16 bit patterns (CuPy has no bfloat16 dtype); :func:`_storage` /
:func:`_wrap_like` go from a caller's array to what a kernel reads and back; :func:`_positions` and
:func:`_freq_table` put the positions and the oracle's float64 frequency table on the device. Nothing here
imports cupy at import time: :func:`_cupy` imports it on first use.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

import rope_ref
from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len

from ._cupy_bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from ._cupy_plan import MULTIAXIS_DEFINE

__all__ = ["Bf16Array", "KERNEL_SOURCE", "IO_DTYPES"]

#: The CUDA source of every kernel (shipped as package data).
KERNEL_SOURCE = Path(__file__).with_name("rope_kernels.cu")

#: The activation dtypes the kernels read and write.
IO_DTYPES = ("float32", "float16", "bfloat16")


def _cupy() -> Any:
    import cupy

    return cupy


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
    if dtype_name not in IO_DTYPES:
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


def _to_device(a: Any) -> Any:
    """``a`` as a cupy array (unchanged when it is one; NumPy arrays and Python values are uploaded)."""
    cp = _cupy()
    return a if isinstance(a, cp.ndarray) else cp.asarray(np.asarray(a))


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
