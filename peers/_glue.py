"""The glue every peer adapter shares, kept in one place.

* :class:`Peer`: a :class:`~rope_ref.conformance.protocol.Backend` with a precision policy per
  operation, a list of what the library cannot express (reported *unsupported* with the reason), and
  the operations whose cos/sin tables are taken from the oracle rather than the library.
* Axis plans: every case's ``x`` is ``(..., head_dim)`` with positions broadcast against
  ``x.shape[:-1]``; :func:`tokens` flattens that to one row per token with its own position, which
  every library accepts as "one sequence of N tokens" (or N sequences of one).
* Prefill emulation (:func:`prefill_plan`): for libraries that take positions from a tensor's length
  (``arange(seq_len) + offset``), the tokens are scattered into a zero prefill of length
  ``max(position) + 1`` so the library builds its positions the way it does in real use.
* Unit-vector probes (:func:`probe_cos_sin`): for libraries that only rotate, ``cos`` and ``sin``
  are read back by rotating the unit vector of each pair's first channel.
* Layout bridge (:func:`layout_permutation`): the channel permutation of HF's
  ``convert_llama_weights_to_hf.permute`` maps a half-layout head onto an interleaved one
  (``half(P x) = P interleaved(x)``), so a library with one layout can be asked about the other.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PRECISION_ALIASES, Backend, PrecisionPolicy
from rope_ref.conformance.protocol import Unsupported as _ProtocolUnsupported

from rope_ref.case import OPS as CASE_OPS

__all__ = [
    "Peer",
    "Unsupported",
    "SHORT",
    "dist_version",
    "tokens",
    "prefill_plan",
    "probe_cos_sin",
    "probe_tables",
    "layout_permutation",
    "integer_positions",
    "config_key",
    "emulated_length",
]

#: canonical dtype name -> short precision name (the ecosystem page's columns)
SHORT = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

#: The protocol's original operations (before multi-axis and kernel shapes), which every peer routes.
OPS = CASE_OPS[: CASE_OPS.index("multiaxis_apply")]

#: Operations no RoPE library offers; every peer reports them unsupported with this reason.
NOT_LIBRARY_OPS = {
    "chatglm_position_ids": "ChatGLM-6B position ids live in THUDM's hub code, not in this library",
    "chatglm_apply_2d": "ChatGLM-6B 2D rotary lives in THUDM's hub code, not in this library",
    "chatglm_next_position_ids": "ChatGLM-6B decode position ids live in THUDM's hub code, not here",
    "decay_upper_bound": "RoFormer's decay bound is analysis, not an operation of this library",
}


class Unsupported(_ProtocolUnsupported):
    """The library cannot express this case; the message says why (the runner reports it unsupported).

    ``reason`` is the protocol's key: ``"config"`` (default: this config or input is not expressible),
    ``"operation"`` (the library has no such operation) or ``"dtype"``.
    """

    def __init__(self, message: str = "", reason: str = "config") -> None:
        super().__init__(message, reason)


def dist_version(distribution: str) -> str:
    """The installed version of a distribution, or ``"not installed"``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def config_key(cfg) -> str:
    """A hashable key of a RopeConfig (one library module per distinct config, kept across cases)."""
    scaling = cfg.scaling.to_hf() if cfg.scaling is not None else None
    return repr((cfg.head_dim, cfg.layout, cfg.rotary_dim, float(cfg.base), sorted((scaling or {}).items())))


class Peer(Backend):
    """Base class of the peer adapters.

    Subclasses set ``peer`` (registry name), ``distribution`` (for the version), ``precisions``
    (short names it runs at), and implement ``_inv_freq``, ``_attention_factor``, ``_cos_sin``,
    ``_apply``, ``_apply_vjp`` where the library offers them; ``policies(io)`` returns the honest
    :class:`PrecisionPolicy` of each operation at I/O dtype ``io`` (the protocol's ``precision_by_op``).
    ``oracle_tables`` names the operations whose cos/sin tables come from rope_ref (the runner reports
    their passes as borrowed, not as the library's own).
    """

    peer = "peer"
    distribution = ""
    precisions: tuple[str, ...] = ("fp32",)
    oracle_tables: frozenset[str] = frozenset()
    #: op -> why the library cannot do it (reported as unsupported)
    cannot: dict[str, str] = {}
    #: free-text notes shown on the ecosystem page (how the adapter drives the library)
    notes: tuple[str, ...] = ()
    #: the default :meth:`policies`: dtype of the frequency/cos-sin tables, and of the rotation (None: I/O)
    table_dtype = "float32"
    compute_dtype: str | None = None

    def __init__(self, precision: str | None = None) -> None:
        self._modules: dict[Any, Any] = {}  # the library's modules per config, built on first use
        short = SHORT[PRECISION_ALIASES[precision]] if precision else self.precisions[0]
        if short not in self.precisions:
            raise ValueError(f"peer {self.peer!r} runs at {', '.join(self.precisions)}, not {precision!r}")
        self.precision_name = short
        self.io = PRECISION_ALIASES[short]
        self.name = self.peer
        self.version = dist_version(self.distribution) if self.distribution else "?"
        self.precision_by_op = self.policies(self.io)
        self.precision = self.precision_by_op["apply"]

    # -- precision per operation ----------------------------------------------------------------------
    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        """Policy per operation; the default: ``table_dtype`` tables, rotation in ``compute_dtype`` (the I/O
        dtype when None) for every operation."""
        return dict.fromkeys(OPS, PrecisionPolicy(io, self.table_dtype, self.compute_dtype or io))

    # -- the protocol, routed to the _op methods ------------------------------------------------------
    def _route(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if op in NOT_LIBRARY_OPS:
            raise Unsupported(NOT_LIBRARY_OPS[op], "operation")
        if op in self.cannot:
            raise Unsupported(self.cannot[op], "operation")
        return getattr(self, "_" + op)(*args, **kwargs)

    def inv_freq(self, cfg, seq_len=None):
        return self._route("inv_freq", cfg, seq_len)

    def attention_factor(self, cfg, seq_len=None):
        return self._route("attention_factor", cfg, seq_len)

    def cos_sin(self, positions, cfg, seq_len=None):
        return self._route("cos_sin", positions, cfg, seq_len)

    def apply(self, x, positions, cfg, seq_len=None):
        return self._route("apply", x, positions, cfg, seq_len)

    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        return self._route("apply_vjp", x, positions, cfg, grad_out, seq_len)

    def chatglm_position_ids(self, input_ids, **_: Any):
        return self._route("chatglm_position_ids")

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, **_: Any):
        return self._route("chatglm_apply_2d")

    def chatglm_next_position_ids(self, input_ids, **_: Any):
        return self._route("chatglm_next_position_ids")

    def decay_upper_bound(self, distances, cfg):
        return self._route("decay_upper_bound")

    def _unsupported(self, op: str) -> Any:
        raise Unsupported(f"{self.peer} has no public API for {op}", "operation")

    def _inv_freq(self, cfg, seq_len):
        return self._unsupported("inv_freq")

    def _attention_factor(self, cfg, seq_len):
        return self._unsupported("attention_factor")

    def _cos_sin(self, positions, cfg, seq_len):
        return self._unsupported("cos_sin")

    def _apply(self, x, positions, cfg, seq_len):
        return self._unsupported("apply")

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self._unsupported("apply_vjp")

    # -- arrays: torch by default (the NumPy/JAX/MLX peers override) ----------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        import torch

        t = torch.from_numpy(np.array(array, copy=True))
        return t.to(_torch_dtype(dtype)) if dtype is not None else t

    def to_numpy(self, array: Any) -> np.ndarray:
        import torch

        if isinstance(array, torch.Tensor):
            array = array.detach().cpu()
            return (array.float() if array.dtype == torch.bfloat16 else array).numpy()
        return np.asarray(array)

    def torch_vjp(self, x, positions, cfg, grad_out, seq_len) -> Any:
        """VJP through torch autograd of this peer's own ``_apply`` (libraries with torch autograd)."""
        import torch

        xg = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            y = self._apply(xg, positions, cfg, seq_len)
            (g,) = torch.autograd.grad(y, xg, grad_out)
        return g


def _torch_dtype(name: str):
    import torch

    return {
        "float64": torch.float64,
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
    }[PRECISION_ALIASES[name]]


# -- axis plans -------------------------------------------------------------------------------------------


def tokens(x_shape: tuple[int, ...], positions: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """``(lead_shape, flat_positions)``: positions broadcast to ``x.shape[:-1]``, one per token."""
    lead = tuple(x_shape[:-1])
    return lead, np.broadcast_to(np.asarray(positions), lead).reshape(-1)


def integer_positions(pos: np.ndarray, peer: str) -> np.ndarray:
    """``pos`` as int64, or :class:`Unsupported` when any is fractional or negative."""
    p = np.asarray(pos)
    if p.dtype.kind == "f":
        if not np.all(np.isfinite(p)) or np.any(p != np.round(p)):
            raise Unsupported(f"{peer} takes integer positions only (this case has fractional ones)")
    p = p.astype(np.int64)
    if p.size and p.min() < 0:
        raise Unsupported(f"{peer} takes non-negative positions only")
    return p


def prefill_plan(pos: np.ndarray, head_dim: int, cap: int = 1 << 23) -> tuple[int, int, np.ndarray] | None:
    """Prefill emulation for libraries that read positions from a length.

    Returns ``(length, batch, slots)``: run the library on a zero tensor of shape
    ``(batch, length, head_dim)`` with token ``n`` at ``[slots[n], pos[n]]`` and read it back there;
    ``length`` is ``max(position) + 1``, so the library builds ``arange(length)`` itself, and tokens that
    share a position go to different batch rows (``batch`` is the largest such multiplicity). ``None`` when
    that tensor would exceed ``cap`` elements (the adapter then decodes at ``offset=position``).
    """
    p = pos.astype(np.int64)
    length = int(p.max()) + 1 if p.size else 1
    order = np.argsort(p, kind="stable")
    slots = np.zeros(p.size, dtype=np.int64)
    if p.size:
        sorted_p = p[order]
        first = np.searchsorted(sorted_p, sorted_p, side="left")
        slots[order] = np.arange(p.size) - first
    batch = int(slots.max()) + 1 if p.size else 1
    if batch * length * head_dim > cap:
        return None
    return length, batch, slots


def emulated_length(pos: np.ndarray, seq_len: int | None, peer: str) -> int:
    """The sequence length a prefill must have so a length-reading library sees ``seq_len``.

    ``max(position) + 1`` when ``seq_len`` is ``None``; an explicit ``seq_len`` shorter than that cannot
    be expressed by a library that reads the length from its positions (:class:`Unsupported`).
    """
    need = int(np.max(pos)) + 1 if np.size(pos) else 1
    if seq_len is None or seq_len == need:
        return need
    if seq_len < need:
        raise Unsupported(f"{peer} reads the sequence length from its positions; seq_len={seq_len} < max + 1")
    return int(seq_len)


def probe_cos_sin(
    rotate: Callable[[np.ndarray], np.ndarray], n_pos: int, cfg
) -> tuple[np.ndarray, np.ndarray]:
    """Read ``cos``/``sin`` of a rotate-only library with unit vectors.

    ``rotate(e)`` applies the library at the case's positions to ``e`` of shape ``(n_pos, k, head_dim)``
    (``k = rotary_dim // 2`` unit vectors per position) and returns the result as NumPy. Pair ``i``'s
    first channel ``a`` maps to ``cos_i`` at ``a`` and ``sin_i`` at its partner ``b``.
    """
    k = cfg.rotary_dim // 2
    i = np.arange(k)
    a, b = (i, i + k) if cfg.layout == "half" else (2 * i, 2 * i + 1)
    e = np.zeros((n_pos, k, cfg.head_dim))
    e[:, i, a] = 1.0
    y = np.asarray(rotate(e), dtype=np.float64)
    return y[:, i, a], y[:, i, b]


def probe_tables(
    positions: np.ndarray, cfg, rotate_rows: Callable[[np.ndarray, np.ndarray], Any]
) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)``, each ``positions.shape + (rotary_dim // 2,)``, of a rotate-only library through
    :func:`probe_cos_sin`: ``rotate_rows(rows, ids)`` rotates float32 rows ``(n, head_dim)`` by the positions
    ``ids`` ``(n,)`` in the library and returns them as NumPy."""
    flat = positions.reshape(-1)
    k = cfg.rotary_dim // 2

    def rotate(e: np.ndarray) -> np.ndarray:
        rows = e.reshape(-1, cfg.head_dim).astype(np.float32)
        return np.asarray(rotate_rows(rows, np.repeat(flat, k))).reshape(e.shape)

    cos, sin = probe_cos_sin(rotate, flat.size, cfg)
    return cos.reshape(positions.shape + (k,)), sin.reshape(positions.shape + (k,))


def layout_permutation(rotary_dim: int, head_dim: int) -> np.ndarray:
    """Channel order ``P`` with ``half(x) = P^-1 interleaved(P x)`` on the first ``rotary_dim`` channels.

    The permutation of HF ``convert_llama_weights_to_hf.permute``: interleaved channel ``2i`` holds half
    channel ``i`` and ``2i + 1`` holds ``i + rotary_dim/2``. Pass-through channels stay in place.
    """
    k = rotary_dim // 2
    perm = np.arange(head_dim)
    perm[0:rotary_dim:2] = np.arange(k)
    perm[1:rotary_dim:2] = np.arange(k, rotary_dim)
    return perm
