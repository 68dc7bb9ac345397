"""The backend protocol: what a RoPE implementation provides to be checked by the suite.

A backend is a small class. The runner converts stored NumPy inputs with :meth:`Backend.from_numpy`,
calls one method per operation, and reads results back with :meth:`Backend.to_numpy`. A method that
raises ``NotImplementedError`` marks its cases *unsupported* (counted separately, never a pass).

Configurations arrive as :class:`rope_ref.RopeConfig`; a backend that does not want to depend on
rope_ref's types reads ``cfg.head_dim``, ``cfg.layout``, ``cfg.rotary_dim``, ``cfg.base`` and
``cfg.scaling.to_hf()`` (an HF-style dict, or ``None``).

Optional, backwards-compatible declarations (old backends need none of them): raise :class:`Unsupported`
with a reason (``"operation"``, ``"config"``, ``"dtype"``) instead of a bare ``NotImplementedError``;
``precision_by_op`` maps an operation to the policy of the path that serves it (``precision`` for the
rest); ``oracle_tables`` names operations whose values the backend takes from rope_ref itself, so their
passes are reported as borrowed, not as the backend's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rope_ref.precision import DTYPES, PRECISION_ALIASES, PrecisionPolicy, canonical_dtype

__all__ = [
    "Backend",
    "BackendUnavailable",
    "KernelCall",
    "KernelShapeCalls",
    "PrecisionPolicy",
    "DTYPES",
    "PRECISION_ALIASES",
    "canonical_dtype",
    "Unsupported",
    "UNSUPPORTED_REASONS",
]

#: Why a case is unsupported: reason key -> what the coverage table prints.
UNSUPPORTED_REASONS = {
    "operation": "operation missing",
    "config": "config not expressible",
    "dtype": "dtype missing",
}


class BackendUnavailable(RuntimeError):
    """The backend exists but cannot run here (library or device missing); the message says why.

    Raised by a backend module's ``make_backend`` (and by the registry when ``available()`` says no).
    """


class Unsupported(NotImplementedError):
    """Raised by a backend for a case it cannot run; ``reason`` is a key of :data:`UNSUPPORTED_REASONS`.

    A subclass of ``NotImplementedError``, so runners that know only that still mark the case unsupported.
    """

    def __init__(self, message: str = "", reason: str = "config") -> None:
        if reason not in UNSUPPORTED_REASONS:
            raise ValueError(f"reason must be one of {sorted(UNSUPPORTED_REASONS)}, got {reason!r}")
        super().__init__(message)
        self.reason = reason


class Backend:
    """Base class of a conformance backend; override what your implementation supports.

    Attributes: ``name``, ``version``, ``device`` (free text, e.g. ``"cpu"``, ``"cuda:0"``),
    ``precision`` (a :class:`PrecisionPolicy`) and ``inplace`` (True if ``apply`` may overwrite
    its input; otherwise the runner fails any case where the input changed).

    Optional: ``precision_by_op`` (operation -> :class:`PrecisionPolicy` of the path serving it; its
    ``io_dtype`` must equal ``precision.io_dtype``, activations are converted once for the whole run) and
    ``oracle_tables`` (operations whose values come from rope_ref itself: they are run and judged, but
    the report counts their passes as borrowed, not as the backend's own) and ``inplace_ops``
    (operations of the kernel-shape family the backend runs in place when asked; see ``apply_axes``).
    """

    name: str = "unnamed"
    version: str = "0"
    device: str = "cpu"
    precision: PrecisionPolicy = PrecisionPolicy()
    inplace: bool = False
    precision_by_op: dict[str, PrecisionPolicy] = {}  # noqa: RUF012 - read-only class default
    oracle_tables: frozenset[str] = frozenset()
    #: operations (of apply_axes, apply_qk, apply_qkv) this backend can run with ``inplace=True``
    inplace_ops: frozenset[str] = frozenset()

    def precision_for(self, op: str) -> PrecisionPolicy:
        """The policy the tolerance model judges ``op`` under: ``precision_by_op[op]`` or ``precision``."""
        policy = (getattr(self, "precision_by_op", None) or {}).get(op, self.precision)
        if policy.io_dtype != self.precision.io_dtype:
            raise ValueError(
                f"precision_by_op[{op!r}] declares io dtype {policy.io_dtype}, but the backend's io dtype "
                f"is {self.precision.io_dtype}: a per-operation policy may change angle and compute only"
            )
        return policy

    # -- array conversion -------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        """Convert a NumPy array to the backend's array type.

        ``dtype`` is a canonical name from :data:`DTYPES` for activations (the runner passes
        ``precision.io_dtype``; bfloat16 values arrive as float32 that bfloat16 holds exactly), or
        ``None`` to keep the array's own dtype (positions, token ids, distances).
        """
        raise NotImplementedError

    def to_numpy(self, array: Any) -> np.ndarray:
        """Convert a backend array (or a Python scalar) back to NumPy."""
        raise NotImplementedError

    # -- operations (one per operation in the golden manifest) ------------------------------------
    def inv_freq(self, cfg, seq_len: int | None = None) -> Any:
        """Inverse frequencies, shape ``(rotary_dim // 2,)``."""
        raise NotImplementedError

    def attention_factor(self, cfg, seq_len: int | None = None) -> float:
        """The factor multiplying cos and sin."""
        raise NotImplementedError

    def cos_sin(self, positions: Any, cfg, seq_len: int | None = None) -> tuple[Any, Any]:
        """``(cos, sin)``, each ``positions.shape + (rotary_dim // 2,)``, attention factor included."""
        raise NotImplementedError

    def apply(self, x: Any, positions: Any, cfg, seq_len: int | None = None) -> Any:
        """Rotate ``x`` (``(..., head_dim)``) by ``positions`` (broadcast against ``x.shape[:-1]``)."""
        raise NotImplementedError

    def apply_vjp(self, x: Any, positions: Any, cfg, grad_out: Any, seq_len: int | None = None) -> Any:
        """Vector-Jacobian product of :meth:`apply` with respect to ``x``."""
        raise NotImplementedError

    def chatglm_position_ids(
        self,
        input_ids: Any,
        *,
        bos_token_id: int,
        mask_token_id: int,
        gmask_token_id: int,
        position_encoding_2d: bool,
    ) -> Any:
        """ChatGLM-6B position ids: ``(batch, 2, seq)`` in 2D, ``(batch, seq)`` in 1D."""
        raise NotImplementedError

    def chatglm_apply_2d(
        self, x: Any, position_ids: Any, block_position_ids: Any, *, base: float, precision: str
    ) -> Any:
        """ChatGLM-6B 2D rotary: first half of each head by ``position_ids``, second by block ids."""
        raise NotImplementedError

    def chatglm_next_position_ids(
        self,
        input_ids: Any,
        *,
        bos_token_id: int,
        mask_token_id: int,
        gmask_token_id: int,
        position_encoding_2d: bool,
    ) -> Any:
        """ChatGLM-6B ids of the last token under incremental decoding: ``(batch, 2, 1)`` / ``(batch, 1)``."""
        raise NotImplementedError

    # -- multi-axis operations (issue 20; optional: an old backend reports them "operation missing") -------
    def multiaxis_apply(self, x: Any, positions: Any, spec) -> Any:
        """Rotate ``x`` (``(..., head_dim)``) by ``positions`` (``(n_streams, ...)``) under ``spec``, a
        :class:`rope_ref.multiaxis.MultiAxisRope` (pair ``i``: channels ``pair_indices()``, stream
        ``streams[i]``, frequency ``pair_frequencies()``); the result has x's shape and I/O dtype."""
        raise NotImplementedError

    def mrope_position_ids(
        self,
        input_ids: Any,
        image_grid_thw: Any,
        video_grid_thw: Any,
        attention_mask: Any,
        second_per_grid_ts: Any,
        *,
        rule: str,
        spatial_merge_size: int,
        tokens_per_second: float,
    ) -> tuple[Any, Any]:
        """M-RoPE ``(position_ids (3, batch, seq), mrope_position_deltas (batch, 1))``, integer arrays, of
        ``get_rope_index`` for ``rule`` (``qwen2-vl``, ``qwen2.5-vl``, ``qwen3-vl``, ``glm4v``) with the
        rule's default token ids (:mod:`rope_ref.mrope`); absent grids, mask or seconds arrive as ``None``."""
        raise NotImplementedError

    def mrope_decode_ids(self, deltas: Any, *, cache_position: int, n_new: int) -> Any:
        """M-RoPE ids ``(3, batch, n_new)`` of tokens decoded at cache slots ``cache_position ..``."""
        raise NotImplementedError

    def vision_ids(self, grids: Any, *, convention: str, spatial_merge_size: int) -> Any:
        """ViT patch ids ``(2, n_patches)`` (row, column): ``convention`` ``"qwen2-vl"`` (grids ``(t, h, w)``,
        merge-window order) or ``"pixtral"`` (grids ``(h, w)``, row-major)."""
        raise NotImplementedError

    def mla_softmax_scale(self, cfg) -> float:
        """DeepSeek MLA softmax scale of ``cfg`` (a :class:`rope_ref.mla.MLAConfig`):
        ``qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2`` under YaRN."""
        raise NotImplementedError

    # -- the shapes real kernels see (issue 16; optional: an old backend reports them "operation missing") --
    # Positions come in exactly one of three forms (``docs/writing-a-backend.md``, "Kernel shapes"):
    #   positions=     integer ids: (B, S) HF position_ids for axes with b and s, (T,) one per token for thd;
    #   offset=        a KV-cache offset: a Python int or an integer array (B,); token s of row b is at
    #                  offset[b] + s (axes with b and s only);
    #   cu_seqlens=    thd only: integer (N + 1,) boundaries [0, len_0, ..., T]; positions restart at 0 in
    #                  every sequence, plus start_offsets (None, a Python int, or an integer array (N,));
    #                  max_seqlen (a Python int) comes with it, for kernels that need it.
    # inverse=True rotates by -m theta (a length-dependent scaling still sees the forward positions).
    # inplace=True only for operations named in ``inplace_ops``: write the result into the given array(s),
    # through their strides and only their elements, and return them; the runner judges those buffers.
    # A backend may inherit :class:`KernelShapeCalls` to take these keywords once, as a :class:`KernelCall`.

    def permute(self, array: Any, order: tuple[int, ...]) -> Any:
        """A view of ``array`` with its axes permuted (``numpy.transpose(array, order)`` semantics).

        The runner uses it (and basic slicing, ``array[..., a:b:step, :]``) to hand transposed and strided
        views. The default covers torch (``permute``), NumPy/CuPy/JAX (``transpose``) and any array-API
        namespace (``permute_dims``); override it if your arrays differ.
        """
        if hasattr(array, "permute"):
            return array.permute(*order)
        if hasattr(array, "transpose"):
            try:
                return array.transpose(tuple(order))
            except TypeError:
                pass
        from array_api_compat import array_namespace

        return array_namespace(array).permute_dims(array, tuple(order))

    def apply_axes(
        self,
        x: Any,
        cfg,
        *,
        axes: str,
        positions: Any = None,
        offset: Any = None,
        cu_seqlens: Any = None,
        start_offsets: Any = None,
        max_seqlen: int | None = None,
        inverse: bool = False,
        inplace: bool = False,
        seq_len: int | None = None,
    ) -> Any:
        """Rotate ``x`` whose axes ``axes`` names (``"bshd"``, ``"bhsd"``, ``"sbhd"``, ``"thd"``); ``x`` may
        be a non-contiguous view (transposed, sliced out of a larger buffer, non-unit strides). Positions in
        one of the three forms above. Returns x's shape and I/O dtype (``x`` itself when ``inplace``)."""
        raise NotImplementedError

    def apply_qk(
        self,
        q: Any,
        k: Any,
        cfg,
        *,
        axes: str,
        positions: Any = None,
        offset: Any = None,
        cu_seqlens: Any = None,
        start_offsets: Any = None,
        max_seqlen: int | None = None,
        inverse: bool = False,
        inplace: bool = False,
        seq_len: int | None = None,
    ) -> tuple[Any, Any]:
        """Rotate q ``(.., Hq, ..)`` and k ``(.., Hk, ..)`` (``Hk`` divides ``Hq``: GQA/MQA) in one call, same
        positions for every head; returns ``(q_rot, k_rot)``. In place, q and k may be disjoint slices of
        one packed buffer."""
        raise NotImplementedError

    def apply_qkv(
        self,
        qkv: Any,
        cfg,
        *,
        axes: str,
        num_heads_q: int,
        num_heads_kv: int,
        positions: Any = None,
        offset: Any = None,
        cu_seqlens: Any = None,
        start_offsets: Any = None,
        max_seqlen: int | None = None,
        inverse: bool = False,
        inplace: bool = False,
        seq_len: int | None = None,
    ) -> Any:
        """Rotate the q and k heads of a packed ``qkv`` whose head axis holds ``num_heads_q + 2 *
        num_heads_kv`` heads (q, then k, then v); the v heads must come back bit for bit unchanged."""
        raise NotImplementedError

    def decay_upper_bound(self, distances: Any, cfg) -> Any:
        """RoFormer's relative upper bound (1/(d/2)) sum_j |S_j(r)| at each distance."""
        raise NotImplementedError

    def __repr__(self) -> str:
        p = self.precision
        return (
            f"<{type(self).__name__} {self.name} {self.version} on {self.device}: "
            f"io={p.io_dtype} angles={p.angle_dtype} compute={p.compute_dtype}>"
        )


class NextPositionIdsFromFullIds:
    """Mixin: :meth:`Backend.chatglm_next_position_ids` from the backend's own ``chatglm_position_ids``.

    ChatGLM-6B's ids for the next decoded token are the last column of the full 2D ids,
    ``[mask_position, seq_len - context_length]`` (``prepare_inputs_for_generation`` with a cache in the
    released ``modeling_chatglm.py``); the 1D form keeps the first row. Works on any array type that
    slices like NumPy (torch, CuPy, array-api namespaces). See :func:`rope_ref.chatglm.next_position_ids`.
    """

    def chatglm_next_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        full = self.chatglm_position_ids(
            input_ids,
            bos_token_id=bos_token_id,
            mask_token_id=mask_token_id,
            gmask_token_id=gmask_token_id,
            position_encoding_2d=True,
        )
        last = full[:, :, -1:]
        return last if position_encoding_2d else last[:, 0, :]


@dataclasses.dataclass(frozen=True, eq=False)
class KernelCall:
    """The keywords of one kernel-shape call (``apply_axes`` / ``apply_qk`` / ``apply_qkv``), defaults as in
    :class:`Backend`: the axes, the positions in one of three forms, and the flags."""

    axes: str
    positions: Any = None
    offset: Any = None
    cu_seqlens: Any = None
    start_offsets: Any = None
    max_seqlen: int | None = None
    inverse: bool = False
    inplace: bool = False
    seq_len: int | None = None

    def where(self) -> dict[str, Any]:
        """The keywords naming the positions: ids, offset, cu_seqlens, start_offsets, max_seqlen."""
        return {
            "positions": self.positions,
            "offset": self.offset,
            "cu_seqlens": self.cu_seqlens,
            "start_offsets": self.start_offsets,
            "max_seqlen": self.max_seqlen,
        }

    def keywords(self) -> dict[str, Any]:
        """Every keyword, to forward the call to a function with the protocol's keywords."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> KernelCall:
        return dataclasses.replace(self, **changes)


class KernelShapeCalls:
    """Mixin: :meth:`Backend.apply_axes`, ``apply_qk`` and ``apply_qkv`` with their keywords (names and
    defaults of :class:`Backend`) bundled once into a :class:`KernelCall` and handed to the hooks
    ``_axes_call(x, cfg, call)``, ``_qk_call(q, k, cfg, call)`` and
    ``_qkv_call(qkv, cfg, num_heads_q, num_heads_kv, call)``, which a backend implements. An unknown keyword
    raises ``TypeError``, as it would for the written-out signature."""

    def apply_axes(self, x: Any, cfg: Any, *, axes: str, **keywords: Any) -> Any:
        return self._axes_call(x, cfg, KernelCall(axes, **keywords))

    def apply_qk(self, q: Any, k: Any, cfg: Any, *, axes: str, **keywords: Any) -> tuple[Any, Any]:
        return self._qk_call(q, k, cfg, KernelCall(axes, **keywords))

    def apply_qkv(
        self, qkv: Any, cfg: Any, *, axes: str, num_heads_q: int, num_heads_kv: int, **keywords: Any
    ) -> Any:
        return self._qkv_call(qkv, cfg, num_heads_q, num_heads_kv, KernelCall(axes, **keywords))

    def _axes_call(self, x: Any, cfg: Any, call: KernelCall) -> Any:
        raise NotImplementedError

    def _qk_call(self, q: Any, k: Any, cfg: Any, call: KernelCall) -> tuple[Any, Any]:
        raise NotImplementedError

    def _qkv_call(self, qkv: Any, cfg: Any, num_heads_q: int, num_heads_kv: int, call: KernelCall) -> Any:
        raise NotImplementedError
