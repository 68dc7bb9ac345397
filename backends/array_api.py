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

import importlib
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import (
    Backend,
    NextPositionIdsFromFullIds,
    PrecisionPolicy,
    canonical_dtype,
)

from ._array_api_kernels import KERNEL_OPS, KernelShapes, mutable_namespace

__all__ = ["ArrayAPIBackend", "make_backend", "available", "widest_float", "multiaxis_apply"]


_HOST_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": np.float32}


def widest_float(xp: Any, device: Any = None) -> Any:
    """The widest real floating dtype ``xp`` offers on ``device``: float64 if available, else float32.

    Uses the inspection API (``xp.__array_namespace_info__().dtypes``), so a device without float64
    (Apple MPS, array-api-strict's ``no_float64``) gets float32 angles.
    """
    info = xp.__array_namespace_info__()
    kinds = info.dtypes(kind="real floating", device=device)
    if "float64" in kinds:
        return kinds["float64"]
    if "float32" in kinds:
        return kinds["float32"]
    raise ValueError(f"namespace {xp.__name__} has no float32 or float64 on device {device!r}")


def _dtype(xp: Any, name: str, device: Any) -> Any:
    """The namespace's dtype object for a canonical name; ``None`` if the library lacks it."""
    if name in ("float16", "bfloat16"):
        # Not in the standard: libraries that have them (NumPy, torch, CuPy, JAX) use these names.
        return getattr(xp, name, None)
    return xp.__array_namespace_info__().dtypes(kind="real floating", device=device).get(name)


def array_api_size(x: Any) -> int:
    """Number of elements (``array_api_compat.size``: ``x.size`` may be ``None`` for lazy arrays)."""
    import array_api_compat

    return int(array_api_compat.size(x))


def _broadcasts_to(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """True when an array of shape ``small`` broadcasts *to* ``big`` (the standard's rules, right-aligned)."""
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))


class ArrayAPIBackend(KernelShapes, NextPositionIdsFromFullIds, Backend):
    """RoPE on any Array API namespace. ``xp`` is the (compat-wrapped) namespace, ``device`` its device.

    The kernel-shape operations (``apply_axes``, ``apply_qk``, ``apply_qkv``; issue 16) come from
    :class:`~rope_ref.backends._array_api_kernels.KernelShapes`; they run in place (``inplace_ops``) on
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
        angle_name = "float64" if self.angle_dtype == _dtype(xp, "float64", device) else "float32"
        self.io_dtype = _dtype(xp, io_dtype, device)
        self.precision = PrecisionPolicy(io_dtype, angle_name, io_dtype)
        self.inplace_ops = KERNEL_OPS if mutable_namespace(xp, device) else frozenset()

    # -- conversion -------------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        xp = self.xp
        if dtype is None:
            # np.asarray, not np.ascontiguousarray: the latter makes a 0-d array (a scalar offset) 1-D.
            return xp.asarray(np.asarray(array, order="C"), device=self._device, copy=True)
        target = _dtype(xp, canonical_dtype(dtype), self._device)
        if target is None:
            raise ValueError(f"{self.name} has no {dtype} on device {self.device}")
        # Round on the host (a device may lack float64); NumPy has no bfloat16, so bf16 goes through
        # float32 (the runner's bf16 values are exact in float32) and the library rounds the rest.
        host = np.asarray(array, dtype=_HOST_DTYPES[canonical_dtype(dtype)], order="C")
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
        if adt != _dtype(xp, "float64", device):
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
        target = _dtype(xp, self.precision.compute_dtype, device)
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
        if not _broadcasts_to(tuple(pos.shape), tuple(x.shape[:-1])):
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

    def chatglm_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        """ChatGLM-6B ``get_position_ids`` (final released version), vectorised over the batch.

        Same rules as :func:`rope_ref.chatglm.position_ids`: context length = first index of bos; mask
        position = first [gMASK] if the row has one, else first [MASK]; 2D overwrites positions from the
        context length on for both mask kinds, 1D only for [MASK] rows; block ids 0 then 1, 2, 3, ...
        First occurrences come from ``argmax`` (the standard returns the first maximal index).
        """
        xp, device = self._ns(input_ids)
        ids = input_ids
        if ids.ndim != 2:
            raise ValueError(f"input_ids must have shape (batch, seq), got shape {tuple(ids.shape)}")
        batch, seq = ids.shape
        i64 = xp.int64

        def first(token: int) -> tuple[Any, Any]:
            hit = ids == token
            found = xp.any(hit, axis=-1)
            if seq == 0:
                return found, xp.zeros((batch,), dtype=i64, device=device)
            return found, xp.astype(xp.argmax(xp.astype(hit, xp.int8), axis=-1), i64)

        has_bos, context = first(int(bos_token_id))
        has_gmask, gmask_pos = first(int(gmask_token_id))
        has_mask, mask_pos = first(int(mask_token_id))
        if not bool(xp.all(has_bos)):
            row = int(xp.argmax(xp.astype(~has_bos, xp.int8)))
            raise ValueError(f"input_ids row {row} has no bos (<sop>) token {bos_token_id}")
        if not bool(xp.all(has_gmask | has_mask)):
            row = int(xp.argmax(xp.astype(~(has_gmask | has_mask), xp.int8)))
            raise ValueError(f"input_ids row {row} has neither a [gMASK] nor a [MASK] token")
        mask_position = xp.where(has_gmask, gmask_pos, mask_pos)
        j = xp.reshape(xp.arange(seq, dtype=i64, device=device), (1, seq))
        after = j >= context[:, None]
        overwrite = after if position_encoding_2d else after & ~has_gmask[:, None]
        pos = xp.where(overwrite, mask_position[:, None], j)
        if not position_encoding_2d:
            return pos
        block = xp.where(after, j - context[:, None] + 1, xp.zeros_like(j))
        return xp.stack([pos, block], axis=1)

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        """ChatGLM-6B 2D rotary: each half of a head is a half-layout RoPE over head_dim/2 channels.

        ``precision="float64"``: the backend's own arithmetic (activation dtype, widest-float angles).
        ``precision="chatglm-6b-fp16"``: the released model's fp16 table and fp16 rotation, as
        :func:`rope_ref.chatglm.fp16_cos_sin` describes (needs a float16 dtype; the standard has none,
        so array-api-strict reports it unsupported).
        """
        from rope_ref.config import RopeConfig

        xp, device = self._ns(x)
        if x.ndim == 0 or x.shape[-1] == 0 or x.shape[-1] % 4:
            raise ValueError(f"x.shape[-1] (head_dim) must be a positive multiple of 4, got {tuple(x.shape)}")
        half = x.shape[-1] // 2
        if precision == "float64":
            cfg = RopeConfig(half, layout="half", base=base)
            parts = []
            for sl, ids in ((slice(0, half), position_ids), (slice(half, None), block_position_ids)):
                pos = self._angle_positions(xp, ids, device)
                parts.append(self._rotate(x[..., sl], pos, cfg, None, negate=False))
            return xp.concat(parts, axis=-1)
        if precision != "chatglm-6b-fp16":
            raise ValueError(f"precision must be 'float64' or 'chatglm-6b-fp16', got {precision!r}")
        f16 = getattr(xp, "float16", None)
        if f16 is None:
            raise NotImplementedError(f"{xp.__name__} has no float16, needed by precision='chatglm-6b-fp16'")
        x16 = xp.astype(x, f16)
        lead = x.ndim - 1
        parts = []
        for sl, ids in ((slice(0, half), position_ids), (slice(half, None), block_position_ids)):
            cos16, sin16 = self._chatglm_fp16_table(xp, device, ids, half, float(base))
            pad = (1,) * (lead - ids.ndim)
            cos16 = xp.reshape(cos16, pad + tuple(cos16.shape))
            sin16 = xp.reshape(sin16, pad + tuple(sin16.shape))
            q = x16[..., sl]
            quarter = half // 2
            rotated = xp.concat([-q[..., quarter:], q[..., :quarter]], axis=-1)
            parts.append(q * cos16 + rotated * sin16)  # each op rounded to float16, as eager PyTorch
        return xp.concat(parts, axis=-1)

    def _chatglm_fp16_table(self, xp: Any, device: Any, ids: Any, dim: int, base: float) -> tuple[Any, Any]:
        """Released ``RotaryEmbedding(dim, base, precision=torch.half)``: fp32 inv_freq -> fp16, fp16 angles.

        The product of two float16 values is exact in float32 (11 + 11 significant bits), so rounding
        it once to float16 reproduces the fp16 einsum; cos/sin are taken in the widest float, rounded.
        """
        f16, f32 = xp.float16, xp.float32
        idx = self._angle_positions(xp, ids, device)
        if array_api_size(idx) and (
            bool(xp.any(idx != xp.floor(idx))) or bool(xp.any(idx < 0)) or bool(xp.any(idx > 65504))
        ):
            raise ValueError("ChatGLM fp16 ids must be integers in [0, 65504] (they index the cos/sin table)")
        exponent = xp.arange(0, dim, 2, dtype=f32, device=device) / dim
        inv16 = xp.astype(1.0 / xp.pow(xp.asarray(base, dtype=f32, device=device), exponent), f16)
        t16 = xp.astype(idx, f16)
        freqs16 = xp.astype(xp.astype(t16, f32)[..., None] * xp.astype(inv16, f32), f16)
        emb = xp.astype(xp.concat([freqs16, freqs16], axis=-1), widest_float(xp, device))
        return xp.astype(xp.cos(emb), f16), xp.astype(xp.sin(emb), f16)

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


def multiaxis_apply(x: Any, positions: Any, spec: Any, *, seq_len: int | None = None) -> Any:
    """Multi-axis RoPE (:func:`rope_ref.multiaxis.apply`) on any Array API namespace, standard calls only.

    ``x``: ``(..., head_dim)`` of any real floating dtype; ``positions``: ``(n_streams, ...)`` (an array
    of x's namespace, or anything ``xp.asarray`` takes), each stream broadcasting against
    ``x.shape[:-1]``. Pair ``i`` of ``spec`` (channels ``a_i, b_i``) is rotated by ``m^(s(i)) phi_i``
    (RoFormer eq. 34): the stream choice is one ``take`` along the stream axis, the pairs are gathered
    with ``take`` and put back with one inverse-permutation ``take``. Precision as the backend's
    ``apply``: angles and cos/sin in the widest real floating dtype of the device, times each pair's
    attention factor, then cast to ``x.dtype`` for the rotation; a pair at position 0 with factor 1 is
    copied. Length-dependent scalings see ``seq_len`` or ``max(positions) + 1`` over all streams.
    """
    import array_api_compat

    from rope_ref.multiaxis import MultiAxisRope

    if not isinstance(spec, MultiAxisRope):
        raise TypeError(f"spec must be a rope_ref.multiaxis.MultiAxisRope, got {type(spec).__name__}")
    xp = array_api_compat.array_namespace(x)
    device = array_api_compat.device(x)
    if x.ndim == 0 or x.shape[-1] != spec.head_dim:
        raise ValueError(f"x.shape[-1] must equal head_dim={spec.head_dim}, got x.shape={tuple(x.shape)}")
    try:
        array_api_compat.array_namespace(x, positions)
    except TypeError:  # not an array of x's library: convert on the host
        positions = xp.asarray(np.asarray(positions), device=device)
    adt = widest_float(xp, device)
    pos = xp.astype(positions, adt)
    lead = tuple(x.shape[:-1])
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(
            f"positions must have a leading axis of n_streams={spec.n_streams} (one row per stream), "
            f"got shape {tuple(pos.shape)}"
        )
    if not _broadcasts_to(tuple(pos.shape[1:]), lead):
        raise ValueError(
            f"positions of shape {tuple(pos.shape)} do not broadcast against x.shape[:-1] = {lead}"
        )
    if seq_len is None and any(t.scaling is not None and t.scaling.length_dependent for t in spec.tables):
        if array_api_size(pos):
            seq_len = max(int(xp.floor(xp.max(pos))) + 1, 1)  # HF dynamic_rope_update, over all streams
    phi, amp = spec.pair_frequencies(seq_len)
    if adt != _dtype(xp, "float64", device):
        phi = phi.astype(np.float32)  # the device has no float64: round once, here

    def const(values: np.ndarray, dtype: Any) -> Any:
        return xp.asarray(np.ascontiguousarray(values), dtype=dtype, device=device)

    moved = xp.permute_dims(pos, tuple(range(1, pos.ndim)) + (0,))  # (..., n_streams)
    m = xp.take(moved, const(np.asarray(spec.streams, dtype=np.int64), xp.int64), axis=-1)  # (..., n_pairs)
    theta = m * const(phi, adt)
    cos, sin = xp.cos(theta), xp.sin(theta)
    if np.any(amp != 1.0):
        cos, sin = cos * const(amp, adt), sin * const(amp, adt)
    pad = (1,) * (x.ndim - 1 - m.ndim + 1)
    cos = xp.reshape(xp.astype(cos, x.dtype), pad + tuple(cos.shape))
    sin = xp.reshape(xp.astype(sin, x.dtype), pad + tuple(sin.shape))
    a, b = spec.pair_indices()
    xa = xp.take(x, const(a.astype(np.int64), xp.int64), axis=-1)
    xb = xp.take(x, const(b.astype(np.int64), xp.int64), axis=-1)
    ya = xa * cos - xb * sin
    yb = xb * cos + xa * sin
    keep = (m == 0) & const(amp == 1.0, xp.bool)  # position 0, factor 1: the identity
    keep = xp.reshape(keep, pad + tuple(keep.shape))
    ya, yb = xp.where(keep, xa, ya), xp.where(keep, xb, yb)
    # Output channel c is column inverse[c] of [ya, yb, x[..., rotary_dim:]].
    n, rd = spec.n_pairs, spec.rotary_dim
    inverse = np.empty(spec.head_dim, dtype=np.int64)
    inverse[a], inverse[b] = np.arange(n), n + np.arange(n)
    inverse[rd:] = 2 * n + np.arange(spec.head_dim - rd)
    parts = [ya, yb] if rd == spec.head_dim else [ya, yb, x[..., rd:]]
    return xp.take(xp.concat(parts, axis=-1), const(inverse, xp.int64), axis=-1)


def _load_namespace(namespace: str) -> tuple[Any, str]:
    """Import ``namespace`` and return its Array API namespace (compat-wrapped when needed) and version."""
    import array_api_compat

    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace must be a module name such as 'array_api_strict', got {namespace!r}")
    module = importlib.import_module(namespace)
    if not hasattr(module, "asarray"):
        raise ValueError(f"module {namespace!r} is not an array namespace (it has no asarray)")
    xp = array_api_compat.array_namespace(module.asarray(0.0))
    version = getattr(module, "__version__", None)
    if version is None:
        top = importlib.import_module(namespace.split(".")[0])
        version = getattr(top, "__version__", "unknown")
    return xp, str(version)


def _resolve_device(xp: Any, device: Any) -> Any:
    """``None`` -> the namespace's default device; a string -> the listed device whose name matches."""
    info = xp.__array_namespace_info__()
    if device is None:
        return info.default_device()
    if not isinstance(device, str):
        return device
    for candidate in info.devices():
        text = str(candidate)
        if device in (text, repr(candidate)) or text.endswith(f"'{device}')"):
            return candidate
    names = [str(d) for d in info.devices()]
    raise ValueError(f"device {device!r} is not one of {xp.__name__}'s devices {names}")


def available(namespace: str | None = None, device: Any = None, **_: Any) -> tuple[bool, str]:
    """Whether ``namespace`` can be imported here (always True when no namespace is named)."""
    if namespace is None:
        return True, ""
    try:
        _load_namespace(namespace)
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
    from rope_ref.conformance.registry import BackendUnavailable

    if options:
        raise ValueError(f"array-api backend: unknown options {sorted(options)}")
    io_name = canonical_dtype(precision, "precision") if precision is not None else "float32"
    try:
        xp, version = _load_namespace(namespace)
    except ImportError as exc:
        raise BackendUnavailable(f"array-api:{namespace}: cannot import {namespace!r} ({exc})") from None
    dev = _resolve_device(xp, device)
    if _dtype(xp, io_name, dev) is None:
        raise BackendUnavailable(f"array-api:{namespace} has no {io_name} on device {dev}")
    module_name = namespace
    return ArrayAPIBackend(module_name, xp, dev, io_name, version)
