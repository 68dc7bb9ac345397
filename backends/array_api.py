"""A generic backend written only against the Python Array API standard (built-in ``array-api:<module>``).

Every operation is written once with ``array_api_compat.array_namespace`` and standard functions
only, so it runs unchanged on NumPy, PyTorch, CuPy, JAX and array-api-strict (the last one is the
proof that nothing outside the standard slipped in: it refuses every non-standard call).

Precision policy (see ``docs/backends/array-api.md``):

* activations (``x``, ``grad_out``) are computed and returned in their own floating dtype (the
  runner passes ``precision.io_dtype``);
* angles ``position * inv_freq`` and ``cos``/``sin`` are evaluated in the *widest* real floating dtype
  the library offers on the array's device (float64 when available, else float32), multiplied by the
  attention factor there, then cast to the activation dtype for the rotation (as HF does:
  ``(cos * attention_scaling).to(x.dtype)``);
* the frequency table ``inv_freq`` (a tiny vector) and the attention factor come from the oracle's
  float64 formulas (:func:`rope_ref.inv_freq`) and are converted to the angle dtype once; all
  per-position work (angles, cos/sin, rotation, the decay sums, ChatGLM ids) is native.

The caller's namespace and device are preserved: results are arrays of the input's library, on the
input's device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rope_ref.conformance.protocol import (
    Backend,
    NextPositionIdsFromFullIds,
    PrecisionPolicy,
    canonical_dtype,
)

from ._array_api_chatglm import ChatGLM
from ._array_api_kernel_shapes import KERNEL_OPS, KernelShapes, mutable_namespace
from ._array_api_multiaxis import multiaxis_apply
from ._array_api_namespace import (
    HOST_DTYPES,
    array_api_size,
    broadcasts_to,
    dtype_named,
    load_namespace,
    resolve_device,
    widest_float,
)

__all__ = ["ArrayAPIBackend", "make_backend", "available", "widest_float", "multiaxis_apply"]


class ArrayAPIBackend(KernelShapes, ChatGLM, NextPositionIdsFromFullIds, Backend):
    """RoPE on any Array API namespace. ``xp`` is the (compat-wrapped) namespace, ``device`` its device.

    The kernel-shape operations (``apply_axes``, ``apply_qk``, ``apply_qkv``; issue 16) come from
    :class:`~rope_ref.backends._array_api_kernel_shapes.KernelShapes`; they run in place (``inplace_ops``) on
    namespaces whose arrays are mutable and whose slices are views (probed: NumPy, PyTorch, CuPy,
    array-api-strict), not on JAX.
    """

    inplace = False

    def __init__(self, module_name: str, xp: Any, device: Any, io_dtype: str, version: str) -> None:
        self.xp = xp
        self._device = device
        self.name = f"array-api:{module_name}"
        self.version = version
        self.device = str(device)
        self.angle_dtype = widest_float(xp, device)
        angle_name = "float64" if self.angle_dtype == dtype_named(xp, "float64", device) else "float32"
        self.io_dtype = dtype_named(xp, io_dtype, device)
        self.precision = PrecisionPolicy(io_dtype, angle_name, io_dtype)
        self.inplace_ops = KERNEL_OPS if mutable_namespace(xp, device) else frozenset()

    # -- conversion -------------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        xp = self.xp
        if dtype is None:
            # np.asarray, not np.ascontiguousarray: the latter makes a 0-d array (a scalar offset) 1-D.
            return xp.asarray(np.asarray(array, order="C"), device=self._device, copy=True)
        target = dtype_named(xp, canonical_dtype(dtype), self._device)
        if target is None:
            raise ValueError(f"{self.name} has no {dtype} on device {self.device}")
        # Round on the host (a device may lack float64); NumPy has no bfloat16, so bf16 goes through
        # float32 (the runner's bf16 values are exact in float32) and the library rounds the rest.
        host = np.asarray(array, dtype=HOST_DTYPES[canonical_dtype(dtype)], order="C")
        arr = xp.asarray(host, device=self._device, copy=True)
        return xp.astype(arr, target)

    def to_numpy(self, array: Any) -> np.ndarray:
        from rope_ref._interop import foreign_to_numpy

        if isinstance(array, np.ndarray):
            return array
        converted = foreign_to_numpy(array, "array")
        return converted if converted is not None else np.asarray(array)

    # -- helpers ----------------------------------------------------------------------------------
    def _ns(self, *arrays: Any) -> tuple[Any, Any]:
        """Namespace and device of the inputs (the caller's, not necessarily the backend's default)."""
        import array_api_compat

        xp = array_api_compat.array_namespace(*arrays)
        return xp, array_api_compat.device(arrays[0])

    def _seq_len(self, xp: Any, positions: Any, cfg, seq_len: int | None) -> int | None:
        """HF's rule for length-dependent scalings: ``seq_len`` if given, else floor(max(positions)) + 1.

        Mirrors :func:`rope_ref.frequencies.resolve_seq_len`; the maximum is read back as a Python int.
        """
        from rope_ref.frequencies import _check_seq_len

        seq_len = _check_seq_len(seq_len)
        if seq_len is not None or cfg.scaling is None or not cfg.scaling.length_dependent:
            return seq_len
        if array_api_size(positions) == 0:
            return None
        return max(int(xp.floor(xp.max(positions))) + 1, 1)

    def _freqs(self, xp: Any, device: Any, cfg, seq_len: int | None) -> tuple[Any, float, Any]:
        """(inv_freq in the angle dtype, attention factor, angle dtype) for this device."""
        import rope_ref

        adt = widest_float(xp, device)
        table = rope_ref.inv_freq(cfg, seq_len)
        if adt != dtype_named(xp, "float64", device):
            table = table.astype(np.float32)  # the device has no float64: round once, here
        freqs = xp.asarray(np.ascontiguousarray(table), device=device)
        return xp.astype(freqs, adt), rope_ref.attention_factor(cfg, seq_len), adt

    def _angle_positions(self, xp: Any, positions: Any, device: Any) -> Any:
        pos = positions
        if not hasattr(pos, "shape"):
            pos = xp.asarray(pos, device=device)
        return xp.astype(pos, widest_float(xp, device))

    def _table(self, xp: Any, device: Any, pos: Any, cfg, seq_len: int | None) -> tuple[Any, Any, float]:
        """cos and sin of pos * inv_freq in the angle dtype, times the attention factor (RoFormer eq. 34)."""
        freqs, factor, _ = self._freqs(xp, device, cfg, seq_len)
        theta = pos[..., None] * freqs
        cos, sin = xp.cos(theta), xp.sin(theta)
        if factor != 1.0:
            cos = cos * factor
            sin = sin * factor
        return cos, sin, factor

    # -- operations -------------------------------------------------------------------------------
    def inv_freq(self, cfg, seq_len=None):
        freqs, _, _ = self._freqs(self.xp, self._device, cfg, seq_len)
        return freqs

    def attention_factor(self, cfg, seq_len=None):
        import rope_ref

        return rope_ref.attention_factor(cfg, seq_len)

    def cos_sin(self, positions, cfg, seq_len=None):
        """RoFormer eq. 15 angles m * theta_i; cos/sin in the angle dtype, cast to the activation dtype."""
        xp, device = self._ns(positions)
        pos = self._angle_positions(xp, positions, device)
        seq_len = self._seq_len(xp, pos, cfg, seq_len)
        cos, sin, _ = self._table(xp, device, pos, cfg, seq_len)
        target = dtype_named(xp, self.precision.compute_dtype, device)
        return xp.astype(cos, target), xp.astype(sin, target)

    def _rotation(
        self, xp: Any, device: Any, pos: Any, cfg, seq_len: int | None, negate: bool, dtype: Any, ndim: int
    ) -> tuple[Any, Any, Any]:
        """The tables :meth:`_rotate_with` needs for ``pos`` against an ``x`` of ``ndim`` axes and ``dtype``.

        ``(cos, sin, zero)``: cos and sin of pos * inv_freq (``-pos`` when ``negate``) built in the angle
        dtype, times the attention factor, then cast to ``dtype``, left-padded to ``ndim - 1`` leading
        axes; ``zero`` marks position 0 (the identity) when the factor is 1, else ``None``. One build
        serves every array of that dtype whose leading axes ``pos`` broadcasts against (q and k).
        """
        if negate:
            pos = -pos
        cos, sin, factor = self._table(xp, device, pos, cfg, seq_len)
        cos, sin = xp.astype(cos, dtype), xp.astype(sin, dtype)
        lead = (1,) * (ndim - 1 - pos.ndim)
        cos = xp.reshape(cos, lead + tuple(cos.shape))
        sin = xp.reshape(sin, lead + tuple(sin.shape))
        zero = xp.reshape(pos == 0, lead + tuple(pos.shape) + (1,)) if factor == 1.0 else None
        return cos, sin, zero

    def _rotate_with(self, xp: Any, x: Any, tables: tuple, cfg, *, whole: bool = True) -> Any:
        """RoFormer eq. 34 for each layout pair (a, b): y_a = x_a cos - x_b sin, y_b = x_b cos + x_a sin.

        ``tables`` from :meth:`_rotation`. Returns all ``head_dim`` channels (``rotary_dim:`` copied) when
        ``whole``, else only the ``rotary_dim`` rotated ones (what an in-place write needs).
        """
        cos, sin, zero = tables
        rd, half = cfg.rotary_dim, cfg.rotary_dim // 2
        if cfg.layout == "half":
            x1, x2 = x[..., :half], x[..., half:rd]
        else:
            x1, x2 = x[..., 0:rd:2], x[..., 1:rd:2]
        o1 = x1 * cos - x2 * sin
        o2 = x2 * cos + x1 * sin
        if cfg.layout == "half":
            rotated = xp.concat([o1, o2], axis=-1)
        else:
            pairs = xp.stack([o1, o2], axis=-1)
            rotated = xp.reshape(pairs, tuple(pairs.shape[:-2]) + (rd,))
        if zero is not None:
            rotated = xp.where(zero, x[..., :rd], rotated)
        if rd == cfg.head_dim or not whole:
            return rotated
        return xp.concat([rotated, x[..., rd:]], axis=-1)

    def _rotate(self, x: Any, pos: Any, cfg, seq_len: int | None, negate: bool) -> Any:
        """Rotate ``x`` by ``pos`` (RoFormer eq. 34; see :meth:`_rotation` and :meth:`_rotate_with`).

        ``pos`` is already in the angle dtype. ``negate`` rotates by -angle (the transpose, for the VJP).
        Position 0 (with no attention factor) is the identity bit for bit, as in :func:`rope_ref.apply`.
        """
        xp, device = self._ns(x)
        if x.ndim == 0 or x.shape[-1] != cfg.head_dim:
            raise ValueError(f"x.shape[-1] must equal head_dim={cfg.head_dim}, got x.shape={tuple(x.shape)}")
        if not broadcasts_to(tuple(pos.shape), tuple(x.shape[:-1])):
            raise ValueError(
                f"positions of shape {tuple(pos.shape)} do not broadcast against "
                f"x.shape[:-1] = {tuple(x.shape[:-1])}"
            )
        tables = self._rotation(xp, device, pos, cfg, seq_len, negate, x.dtype, x.ndim)
        return self._rotate_with(xp, x, tables, cfg)

    def apply(self, x, positions, cfg, seq_len=None):
        xp, device = self._ns(x)
        pos = self._angle_positions(xp, positions, device)
        return self._rotate(x, pos, cfg, self._seq_len(xp, pos, cfg, seq_len), negate=False)

    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        """The Jacobian of apply is A R(m theta); its transpose is A R(-m theta): rotate grad_out back."""
        xp, device = self._ns(grad_out)
        pos = self._angle_positions(xp, positions, device)
        return self._rotate(grad_out, pos, cfg, self._seq_len(xp, pos, cfg, seq_len), negate=True)

    def multiaxis_apply(self, x, positions, spec):
        """Issue 20: :func:`multiaxis_apply` below (the id builders and the MLA scale stay unsupported)."""
        return multiaxis_apply(x, positions, spec)

    def decay_upper_bound(self, distances, cfg):
        """RoFormer §3.4.3: (1/(d/2)) sum_{j=1}^{d/2} |S_j(r)|, S_j = sum_{i<j} e^{i r theta_i}.

        Real arithmetic: |S_j| = hypot(cumsum cos(r theta), cumsum sin(r theta)), as
        :func:`rope_ref.decay.relative_upper_bound`; length-dependent scalings see max|r| + 1.
        """
        xp, device = self._ns(distances)
        r = self._angle_positions(xp, distances, device)
        seq_len = self._seq_len(xp, xp.abs(r), cfg, None)
        freqs, _, _ = self._freqs(xp, device, cfg, seq_len)
        theta = r[..., None] * freqs
        re = xp.cumulative_sum(xp.cos(theta), axis=-1)
        im = xp.cumulative_sum(xp.sin(theta), axis=-1)
        return xp.mean(xp.hypot(re, im), axis=-1)


def available(namespace: str | None = None, device: Any = None, **_: Any) -> tuple[bool, str]:
    """Whether ``namespace`` can be imported here (always True when no namespace is named)."""
    if namespace is None:
        return True, ""
    try:
        load_namespace(namespace)
    except ImportError as exc:
        return False, f"array-api:{namespace}: cannot import {namespace!r} ({exc})"
    return True, ""


def make_backend(
    precision: str | None = None, namespace: str = "numpy", device: Any = None, **options: Any
) -> ArrayAPIBackend:
    """The generic backend on ``namespace`` (default device unless ``device`` is given).

    ``precision`` (``fp64``/``fp32``/``fp16``/``bf16``, default ``fp32``) sets the activation dtype.
    Raises :class:`~rope_ref.conformance.registry.BackendUnavailable` when the module is missing or
    lacks that dtype.
    """
    from rope_ref.conformance.protocol import BackendUnavailable

    if options:
        raise ValueError(f"array-api backend: unknown options {sorted(options)}")
    io_name = canonical_dtype(precision, "precision") if precision is not None else "float32"
    try:
        xp, version = load_namespace(namespace)
    except ImportError as exc:
        raise BackendUnavailable(f"array-api:{namespace}: cannot import {namespace!r} ({exc})") from None
    dev = resolve_device(xp, device)
    if dtype_named(xp, io_name, dev) is None:
        raise BackendUnavailable(f"array-api:{namespace} has no {io_name} on device {dev}")
    module_name = namespace
    return ArrayAPIBackend(module_name, xp, dev, io_name, version)
