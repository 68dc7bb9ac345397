"""Functional ``apply`` and the ``RotaryEmbedding`` module (cos/sin cache) of the torch adapter."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import torch

from rope_ref.config import RopeConfig

from . import _torch_core as _core
from ._torch_core import (
    _complex_ok,
    _pairs,
    _rotate_block,
    angle_tables,
    as_positions,
    check_angle_dtype,
    check_broadcast,
    check_config,
    check_x,
    expand_tables,
    freq_constants,
    freq_table,
    resolve_compute_dtype,
    rotate_tables,
    seq_len_of,
)
from ._torch_triton import check_kernel

__all__ = [
    "apply",
    "rotate",
    "apply_rotary_pos_emb",
    "RotaryEmbedding",
    "EagerTables",
    "eager_cpu",
    "rotate_blocked",
    "rotate_any",
]


# -- the blocked eager CPU kernel (shared by apply, rotate, the module and the issue-16 kernels) ---------


def eager_cpu(autograd: str, kernel: str, *tensors: torch.Tensor) -> bool:
    """Whether :func:`rotate_blocked` serves a call: eager, on CPU, ``kernel="torch"``,
    ``autograd="function"`` and no autograd graph to record for any of ``tensors`` (x, cos, sin).

    Everything else (autograd, ``torch.compile``, Triton, ``autograd="native"``, other devices) goes
    through :func:`~rope_ref.backends._torch_core.rotate_tables`.
    """
    if kernel != "torch" or autograd != "function" or torch.compiler.is_compiling():
        return False
    if any(t.device.type != "cpu" for t in tensors):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


class EagerTables:
    """Broadcastable half-width cos/sin in the compute dtype, and the forms the kernel derives from them
    (``[cos, cos]`` at full width, the complex factor ``cos + i sin``), each built at most once per call
    and shared by every tensor the call rotates (q and k)."""

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor, layout: str, compute: torch.dtype) -> None:
        self.cos, self.sin = cos.to(compute), sin.to(compute)
        self.layout, self.compute = layout, compute
        self._full: torch.Tensor | None = None
        self._complex: torch.Tensor | None = None

    def full_cos(self) -> torch.Tensor:
        if self._full is None:
            c = self.cos
            pair = torch.cat((c, c), dim=-1) if self.layout == "half" else torch.stack((c, c), -1).flatten(-2)
            self._full = pair
        return self._full

    def complex_factor(self) -> torch.Tensor:
        if self._complex is None:
            self._complex = torch.complex(self.cos, self.sin)
        return self._complex


def _blocks(x: torch.Tensor, rd: int, compute: torch.dtype) -> tuple[int, list[tuple]]:
    """The block axis (longest leading axis) and index tuples of about ``_BLOCK_BYTES`` of work each.

    The size is read from :mod:`._torch_core` at call time (one setting for every eager kernel).
    """
    if x.ndim == 1:
        return 0, [(...,)]
    axis = max(range(x.ndim - 1), key=lambda i: x.shape[i])
    length = x.shape[axis]
    itemsize = torch.empty((), dtype=compute).element_size()
    row_bytes = max(1, (x.numel() // max(x.shape[-1], 1)) * rd // max(length, 1)) * itemsize
    step = max(1, _core._BLOCK_BYTES // row_bytes)
    return axis, [(slice(None),) * axis + (slice(s, s + step),) for s in range(0, length, step)]


def _part(t: torch.Tensor, axis: int, index: tuple) -> torch.Tensor:
    """The block ``index`` of a table ``t`` (unchanged where it broadcasts along the block axis)."""
    return t if index == (...,) or t.shape[axis] == 1 else t[index]


def _scratch(first: torch.Size, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``count`` work blocks shaped like the first (largest) block, allocated once per tensor."""
    return torch.empty((count,) + tuple(first), dtype=dtype, device=device)


def _fit(t: torch.Tensor, axis: int, index: tuple, like: torch.Tensor) -> torch.Tensor:
    """A scratch block cut to ``like`` (the last block along ``axis`` may be shorter)."""
    return t if index == (...,) else t.narrow(axis, 0, like.shape[axis])


def rotate_blocked(x: torch.Tensor, out: torch.Tensor, tables: EagerTables, rd: int) -> torch.Tensor:
    """Eq. 34 on CPU into ``out`` (``x`` itself for in place, else any tensor of x's shape and dtype).

    Reads and writes only the elements of the two views, through their strides. Interleaved pairs in
    float32/float64 whose strides allow it: one complex multiply per pair. Otherwise, in blocks of
    about ``_BLOCK_BYTES`` along the longest leading axis (the passes reread the block from cache):

    * out of place, compute dtype = x's: ``out = x * [cos, cos]``, ``out_a -= x_b sin``, ``out_b += x_a sin``;
    * in place, same dtype: a copy of ``x_a`` (one preallocated half block), then ``x_a = x_a cos - x_b
      sin`` and ``x_b = x_b cos + saved sin``;
    * another compute dtype (float32 for float16/bfloat16): the block converted once into a preallocated
      compute-dtype block, rotated there into a second one, rounded once into ``out``. (Mixed-dtype
      ``mul``/``addcmul`` on CPU run far slower than a conversion.)

    Channels ``rd:`` are copied when out of place. The arithmetic, hence every bit of the result, is
    the same whatever the block size and whether in place or not.
    """
    layout, compute = tables.layout, tables.compute
    inplace = out is x
    if not inplace and rd < x.shape[-1]:
        out[..., rd:].copy_(x[..., rd:])
    if _complex_ok(x, layout, compute) and (inplace or _complex_ok(out, layout, compute)):
        n = rd // 2
        xc = torch.view_as_complex(x[..., :rd].unflatten(-1, (n, 2)))
        if inplace:
            xc.mul_(tables.complex_factor())
        else:
            oc = torch.view_as_complex(out[..., :rd].unflatten(-1, (n, 2)))
            torch.mul(xc, tables.complex_factor(), out=oc)
        return out
    axis, blocks = _blocks(x, rd, compute)
    if not blocks:
        return out
    convert = compute != x.dtype
    first = x[blocks[0]][..., :rd].shape
    if convert:
        xw_all, work_all = _scratch(first, 2, compute, x.device)
        full = tables.full_cos()
    elif inplace:
        saved_all = _scratch(first[:-1] + (rd // 2,), 1, x.dtype, x.device)[0]
    else:
        full = tables.full_cos()
    for index in blocks:
        xb, ob = x[index], out[index][..., :rd]
        s = _part(tables.sin, axis, index)
        if convert:
            xw, work = _fit(xw_all, axis, index, ob), _fit(work_all, axis, index, ob)
            xw.copy_(xb[..., :rd])
            _rotate_block(xw, _part(full, axis, index), s, work, layout, rd)
            ob.copy_(work)
        elif inplace:
            a, b = _pairs(xb, layout, rd)
            c = _part(tables.cos, axis, index)
            saved = _fit(saved_all, axis, index, a)
            saved.copy_(a)
            a.mul_(c).addcmul_(b, s, value=-1)
            b.mul_(c).addcmul_(saved, s)
        else:
            _rotate_block(xb, _part(full, axis, index), s, ob, layout, rd)
    return out


def rotate_any(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rd: int,
    compute: torch.dtype,
    autograd: str,
    kernel: str,
) -> torch.Tensor:
    """A new contiguous rotated tensor: :func:`rotate_blocked` where :func:`eager_cpu` allows it,
    :func:`~rope_ref.backends._torch_core.rotate_tables` otherwise (same values, bit for bit)."""
    if eager_cpu(autograd, kernel, x, cos, sin):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return rotate_blocked(x, out, EagerTables(cos, sin, layout, compute), rd)
    return rotate_tables(x, cos, sin, layout, rd, compute, autograd, kernel)


def apply(
    x: torch.Tensor,
    positions: Any,
    cfg: RopeConfig,
    *,
    seq_len: int | None = None,
    angle_dtype: torch.dtype = torch.float32,
    compute_dtype: Any = None,
    autograd: str = "function",
    kernel: str = "torch",
) -> torch.Tensor:
    """Rotate ``x`` (``(..., head_dim)``, any float dtype, any strides) by ``positions``.

    ``positions`` (integer or real, broadcast against ``x.shape[:-1]`` after left-padding, e.g.
    ``(S, 1)`` for ``(B, S, H, D)`` or ``(B, 1, S)`` per row for ``(B, H, S, D)``) gives each row its
    angles ``position * inv_freq`` in ``angle_dtype``; the rotation runs in ``compute_dtype`` (see
    :func:`~rope_ref.backends._torch_core.resolve_compute_dtype`) and returns a new tensor of
    ``x.dtype``, contiguous. Semantics are :func:`rope_ref.apply` (HF ``apply_rotary_pos_emb`` with the
    attention factor in cos/sin; channels ``rotary_dim:`` pass through). Length-dependent scalings see
    ``seq_len`` or, if ``None``, ``max(positions) + 1`` (a host sync; pass ``seq_len`` to avoid it).
    ``kernel``: ``"torch"`` (eager torch ops, any device) or ``"triton"`` (one fused Triton kernel;
    CUDA tensors, rotation in float32/float64; see ``docs/backends/torch.md``).
    """
    cfg = check_config(cfg)
    x = check_x(x, cfg.head_dim)
    angle_dtype = check_angle_dtype(angle_dtype)
    compute = resolve_compute_dtype(compute_dtype, x.dtype)
    pos = as_positions(positions, x.device)
    check_broadcast(pos, tuple(x.shape[:-1]))
    inv, factor = freq_table(cfg, seq_len_of(pos, cfg, seq_len), angle_dtype, x.device)
    cos, sin = expand_tables(*angle_tables(pos, inv, factor), x.ndim)
    return rotate_any(x, cos, sin, cfg.layout, cfg.rotary_dim, compute, autograd, kernel)


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
    return rotate_any(x, cos, sin, layout, rd, compute, autograd, kernel)


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
        if autograd not in ("function", "native"):
            raise ValueError(f"autograd must be 'function' or 'native', got {autograd!r}")
        self.autograd = autograd
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
        return rotate_any(
            x, cos, sin, self.cfg.layout, self.cfg.rotary_dim, compute, self.autograd, self.kernel
        )
