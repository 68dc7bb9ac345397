"""The ``RotaryEmbedding`` module (a cos/sin cache per device and frequency table) of the torch adapter,
and the functions that rotate with precomputed tables (:func:`rotate`, HF's ``apply_rotary_pos_emb``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import torch

from rope_ref.config import RopeConfig

from ._torch_checks import (
    as_positions,
    check_angle_dtype,
    check_autograd,
    check_broadcast,
    check_config,
    check_kernel,
    check_x,
    resolve_compute_dtype,
)
from ._torch_core import EagerTables, rotate_tables  # noqa: F401  (EagerTables: old import path)
from ._torch_kernels import apply  # noqa: F401  (re-exported: the old import path)
from ._torch_tables import angle_tables, expand_tables, freq_constants, freq_table, seq_len_of

__all__ = ["rotate", "apply_rotary_pos_emb", "RotaryEmbedding", "MAX_TABLE_BYTES"]


def rotate(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str,
    compute_dtype: Any = None,
    autograd: str = "function",
    kernel: str = "torch",
) -> torch.Tensor:
    """Rotate ``x`` with precomputed *half-width* tables ``cos``/``sin`` (``(..., rotary_dim/2)``).

    The tables broadcast against ``x.shape[:-1] + (rotary_dim/2,)`` after left-padding; ``rotary_dim =
    2 * cos.shape[-1]`` and channels beyond it pass through. ``kernel`` as in :func:`apply`.
    """
    x = check_x(x, None)
    if layout not in ("half", "interleaved"):
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    rd = 2 * cos.shape[-1]
    if rd == 0 or rd > x.shape[-1]:
        raise ValueError(f"2 * cos.shape[-1] = {rd} must be in 2..x.shape[-1] = {x.shape[-1]}")
    cos, sin = expand_tables(cos, sin, x.ndim)
    compute = resolve_compute_dtype(compute_dtype, x.dtype)
    return rotate_tables(x, cos, sin, layout, rd, compute, autograd, kernel, blocked=True)


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    unsqueeze_dim: int = 1,
    compute_dtype: Any = None,
    kernel: str = "torch",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for HF ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``.

    Differences from HF: ``cos``/``sin`` are the *half-width* float32 tables of
    :meth:`RotaryEmbedding.tables` (``(B, S, rotary_dim/2)``), never rounded to the activation dtype,
    and partial rotary is handled here (HF models slice by hand).
    """
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (
        rotate(q, cos, sin, layout=layout, compute_dtype=compute_dtype, kernel=kernel),
        rotate(k, cos, sin, layout=layout, compute_dtype=compute_dtype, kernel=kernel),
    )


#: Largest cos+sin table ``max_position`` may ask the module to hold (4 GiB).
MAX_TABLE_BYTES = 2**32


def _check_max_position(max_position: Any, cfg: RopeConfig, angle_dtype: torch.dtype) -> int | None:
    """``max_position`` as an int, refused up front when its cos/sin table would exceed 4 GiB."""
    if max_position is None:
        return None
    if isinstance(max_position, bool) or not isinstance(max_position, int):
        raise TypeError(f"max_position must be an int or None, got {max_position!r}")
    if max_position < 1:
        raise ValueError(f"max_position must be >= 1, got {max_position}")
    itemsize = torch.empty((), dtype=angle_dtype).element_size()
    need = 2 * max_position * (cfg.rotary_dim // 2) * itemsize
    if need > MAX_TABLE_BYTES:
        raise ValueError(
            f"max_position={max_position} needs a {need / 2**30:.4g} GiB cos/sin table ({angle_dtype}, "
            f"rotary_dim {cfg.rotary_dim}); the limit is {MAX_TABLE_BYTES / 2**30:g} GiB, i.e. "
            f"max_position <= {MAX_TABLE_BYTES // (2 * (cfg.rotary_dim // 2) * itemsize)}"
        )
    return max_position


def _check_meta(pos: torch.Tensor, cfg: RopeConfig, seq_len: int | None, max_position: int | None) -> None:
    """Positions on "meta" have no values: refuse (one line, naming the argument) what would read them."""
    missing = []
    if max_position is None and pos.numel() and not torch.compiler.is_compiling():
        missing.append("max_position=")  # the on-demand cache reads min/max(positions)
    if seq_len is None and cfg.scaling is not None and cfg.scaling.length_dependent and pos.numel():
        missing.append("seq_len=")  # a length-dependent scaling reads max(positions)
    if missing:
        raise RuntimeError(
            f"RotaryEmbedding cannot read positions on the meta device (they have no data): pass "
            f"{' and '.join(missing)}"
        )


class RotaryEmbedding(torch.nn.Module):
    """RoPE for a model: ``forward(x, positions)`` rotates ``x``; ``tables(positions)`` gives cos/sin.

    cos/sin for integer positions ``0 .. L-1`` are cached per device and per frequency table, ``L``
    growing (doubling) on demand up to ``max_cached_positions``; larger positions are computed
    directly. The cache is plain attributes, not buffers: ``module.to(bfloat16)``, ``.half()`` and
    ``state_dict`` never see it, so its precision is always ``angle_dtype``
    (the gpt-neox #1003 / transformers #25681 bug cannot happen), and it is rebuilt lazily on a new
    device. Length-dependent scalings key the cache by their current frequency table, so dynamic NTK
    and LongRoPE are right whatever lengths came before. Negative or real positions bypass the cache.

    Finding the range of the positions reads them on the host (``aminmax``: a device sync per call,
    which also rules out CUDA-graph capture). ``max_position=N`` (here, or per call to ``forward`` /
    ``tables``) promises integer positions in ``0 .. N-1`` instead: the table is then grown to at
    least ``N`` rows from the host-side ``N`` and indexed without reading the positions, so there is no
    sync. Positions outside that range are not detected (``index_select`` fails, or raises a device
    assert on CUDA). Length-dependent scalings also need ``seq_len`` then, or they read
    ``max(positions)``.

    ``kernel="triton"`` rotates with the fused Triton kernel (CUDA tensors; see :func:`apply`).
    """

    def __init__(
        self,
        cfg: RopeConfig,
        *,
        angle_dtype: torch.dtype = torch.float32,
        compute_dtype: Any = None,
        autograd: str = "function",
        max_cached_tables: int = 4,
        max_cached_positions: int = 65536,
        max_position: int | None = None,
        kernel: str = "torch",
    ) -> None:
        super().__init__()
        self.kernel = check_kernel(kernel)
        self.cfg = check_config(cfg)
        self.angle_dtype = check_angle_dtype(angle_dtype)
        if compute_dtype is not None:
            resolve_compute_dtype(compute_dtype, torch.float32)
        self.compute_dtype = compute_dtype
        self.autograd = check_autograd(autograd)
        if (
            isinstance(max_cached_tables, bool)
            or not isinstance(max_cached_tables, int)
            or max_cached_tables < 1
        ):
            raise ValueError(f"max_cached_tables must be an int >= 1, got {max_cached_tables!r}")
        self.max_cached_tables = max_cached_tables
        if isinstance(max_cached_positions, bool) or not isinstance(max_cached_positions, int):
            raise TypeError(f"max_cached_positions must be an int, got {max_cached_positions!r}")
        if max_cached_positions < 1:
            raise ValueError(f"max_cached_positions must be >= 1, got {max_cached_positions}")
        self.max_cached_positions = max_cached_positions
        self.max_position = _check_max_position(max_position, self.cfg, self.angle_dtype)
        self._cache: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())
        state.pop("_cache_lock", None)  # a lock cannot be pickled or deep-copied
        state["_cache"] = OrderedDict()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._cache_lock = threading.Lock()

    def extra_repr(self) -> str:
        extra = "" if self.max_position is None else f", max_position={self.max_position}"
        if self.kernel != "torch":
            extra += f", kernel={self.kernel!r}"
        return f"{self.cfg!r}, angle_dtype={self.angle_dtype}{extra}"

    def cached_lengths(self) -> dict[tuple, int]:
        """``{key: L}`` of the tables held now (for tests and introspection)."""
        with self._cache_lock:
            return {key: cos.shape[0] for key, (cos, _) in self._cache.items()}

    def _entry(self, key: tuple, need: int, seq_len: int | None, device: torch.device):
        """The cached table for ``key`` with at least ``need`` rows (grown by doubling).

        Thread-safe: the cache is read and updated under a lock (one module may be shared by data-loader
        or serving threads); a table is built outside the lock, and the entries are immutable tuples.
        """
        with self._cache_lock:
            entry = self._cache.get(key)
            if entry is not None and entry[0].shape[0] >= need:
                self._cache.move_to_end(key)
                return entry
        length = max(need, 2 * entry[0].shape[0] if entry is not None else 256)
        length = min(length, max(self.max_cached_positions, need))
        inv, fac = freq_table(self.cfg, seq_len, self.angle_dtype, device)
        built = angle_tables(torch.arange(length, device=device), inv, fac)
        with self._cache_lock:
            current = self._cache.get(key)
            if current is None or current[0].shape[0] < built[0].shape[0]:
                self._cache[key] = built
                current = built
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_cached_tables:
                self._cache.popitem(last=False)
        return current

    def _cached(
        self, pos: torch.Tensor, seq_len: int | None, max_position: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        freqs, factor = freq_constants(self.cfg, seq_len)
        key = (str(pos.device), freqs, factor)
        if max_position is not None:
            need = max_position  # the caller's promise: no host read of the positions
        else:
            lo, hi = (int(v) for v in torch.aminmax(pos))
            if lo < 0 or hi >= self.max_cached_positions:
                return self._direct(pos, seq_len)
            need = hi + 1
        entry = self._entry(key, need, seq_len, pos.device)
        flat = pos.reshape(-1)
        shape = tuple(pos.shape) + (entry[0].shape[-1],)
        return entry[0].index_select(0, flat).reshape(shape), entry[1].index_select(0, flat).reshape(shape)

    def _direct(self, pos: torch.Tensor, seq_len: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        inv, factor = freq_table(self.cfg, seq_len, self.angle_dtype, pos.device)
        return angle_tables(pos, inv, factor)

    def tables(
        self,
        positions: Any,
        *,
        seq_len: int | None = None,
        device: Any = None,
        max_position: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Half-width ``(cos, sin)`` of shape ``positions.shape + (rotary_dim/2,)`` in ``angle_dtype``.

        ``max_position`` (default: the module's) promises integer positions in ``0 .. max_position-1``
        and avoids the host read of the positions (see the class docstring).
        """
        max_position = (
            self.max_position
            if max_position is None
            else _check_max_position(max_position, self.cfg, self.angle_dtype)
        )
        dev = (
            torch.device(device)
            if device is not None
            else (positions.device if isinstance(positions, torch.Tensor) else torch.device("cpu"))
        )
        pos = as_positions(positions, dev)
        if pos.device.type == "meta":
            _check_meta(pos, self.cfg, seq_len, max_position)
        seq_len = seq_len_of(pos, self.cfg, seq_len)
        if pos.dtype.is_floating_point or pos.numel() == 0 or torch.compiler.is_compiling():
            return self._direct(pos, seq_len)
        return self._cached(pos, seq_len, max_position)

    def forward(
        self, x: torch.Tensor, positions: Any, *, seq_len: int | None = None, max_position: int | None = None
    ) -> torch.Tensor:
        """Rotate ``x`` (``(..., head_dim)``) by ``positions`` exactly as :func:`apply` does.

        ``max_position``: as in :meth:`tables` (no host sync when given here or at construction).
        """
        x = check_x(x, self.cfg.head_dim)
        pos = as_positions(positions, x.device)
        check_broadcast(pos, tuple(x.shape[:-1]))
        cos, sin = expand_tables(*self.tables(pos, seq_len=seq_len, max_position=max_position), x.ndim)
        compute = resolve_compute_dtype(self.compute_dtype, x.dtype)
        layout, rd = self.cfg.layout, self.cfg.rotary_dim
        return rotate_tables(x, cos, sin, layout, rd, compute, self.autograd, self.kernel, blocked=True)
