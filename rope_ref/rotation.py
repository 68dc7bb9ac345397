"""The rotation itself: elementwise, complex and explicit-matrix forms, and the layout permutation.

RoFormer (arXiv 2104.09864) eq. 13 defines f(x, m) = R_{Theta,m} x with R block-diagonal, one 2x2
rotation by m*theta_i per channel pair; eq. 34 gives the elementwise form used here:
    y_a = x_a cos - x_b sin,   y_b = x_b cos + x_a sin
for each pair (a, b). The layout decides the pairs (see :data:`rope_ref.config.LAYOUTS`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ._arrays import as_float64, as_positions, check_broadcast
from ._exact_trig import cos_sin_of_product
from .axes import positions_for_axes, shape_mismatch_message
from .config import RopeConfig
from .frequencies import _check_config, attention_factor, cos_sin, inv_freq, resolve_seq_len
from .threads import run_blocks

__all__ = [
    "apply",
    "apply_complex",
    "rotation_matrix",
    "layout_permutation",
    "inverse_layout_permutation",
    "pair_indices",
    "set_table_cache_bytes",
    "clear_table_caches",
]

# Rows of float64 processed per block: temporaries stay in cache, so apply costs about one pass.
_BLOCK_ELEMENTS = 1 << 16


def pair_indices(cfg: RopeConfig) -> tuple[np.ndarray, np.ndarray]:
    """Channel indices ``(a, b)`` of the rotated pairs: pair i rotates channels ``a[i]`` and ``b[i]``."""
    cfg = _check_config(cfg)
    half = cfg.rotary_dim // 2
    if cfg.layout == "half":
        a = np.arange(half)
        return a, a + half
    a = np.arange(0, cfg.rotary_dim, 2)
    return a, a + 1


def _validated(x: Any, positions: Any, cfg: RopeConfig, seq_len: int | None, axes: str | None = None):
    """Checked inputs of a rotation: ``(cfg, x as float64, positions as float64, resolved seq_len)``.

    With ``axes`` (e.g. ``"bhsd"``), HF-style ``(B, S)`` ids or per-token ids are placed on x's batch
    and sequence axes (:func:`rope_ref.axes.positions_for_axes`); without it, positions must
    broadcast against ``x.shape[:-1]`` and a mismatch names the ``axes=`` that would fit.
    """
    cfg = _check_config(cfg)
    x = as_float64(x, "x")
    if x.ndim == 0 or x.shape[-1] != cfg.head_dim:
        raise ValueError(f"x.shape[-1] must equal head_dim={cfg.head_dim}, got x.shape={x.shape}")
    if axes is not None:
        pos = positions_for_axes(positions, axes, x.shape)
    else:
        pos = as_positions(positions)
        try:
            check_broadcast(pos, x.shape[:-1])
        except ValueError:
            raise ValueError(shape_mismatch_message(pos.shape, x.shape)) from None
    return cfg, x, pos, resolve_seq_len(pos, cfg, seq_len)


class _TableCache:
    """A small thread-safe LRU of :class:`_Tables`, keyed by the exact bytes of (freqs, factor, positions).

    Exact cos/sin cost several times NumPy's ``np.cos``/``np.sin`` (``docs/performance.md``); callers
    usually rotate many tensors with the same positions (every layer and head of a forward pass), so
    the tables are kept, up to :data:`_TABLE_CACHE_BYTES` in all. Cached arrays are read-only.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, _Tables] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def keeps(self, pos: np.ndarray, freqs: np.ndarray) -> bool:
        """Whether tables for ``pos`` are small enough to be kept: a quarter of the budget at most."""
        size = 3 * pos.size * freqs.size * 2 * 8  # two tables of 2 * n columns (complex counts double)
        return size <= self.max_bytes // 4

    def get(self, pos: np.ndarray, freqs: np.ndarray, factor: float, layout: str) -> _Tables:
        if not self.keeps(pos, freqs):
            return _Tables(pos, freqs, factor, layout)
        key = (layout, factor, freqs.tobytes(), pos.shape, np.ascontiguousarray(pos).tobytes())
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        tables = _Tables(pos, freqs, factor, layout)
        tables.freeze()
        with self._lock:
            if key not in self._items:
                self._items[key] = tables
                self._bytes += tables.nbytes
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self._bytes -= old.nbytes
        return tables


class _Tables:
    """The rotation tables of one block of positions, in the form each layout's kernel needs.

    Half layout: ``([c, c], [s, -s])``; interleaved: ``([c0, c0, c1, c1, ...], 1j * s)``. Both carry the
    attention factor. ``zero`` marks position 0 (where the rotation is the identity bit for bit) when
    the attention factor is 1, else None.
    """

    def __init__(self, pos: np.ndarray, freqs: np.ndarray, factor: float, layout: str) -> None:
        cos, sin = cos_sin_of_product(pos[..., None], freqs)
        if factor != 1.0:
            cos *= factor
            sin *= factor
        if layout == "half":
            self.parts = (np.concatenate([cos, cos], axis=-1), np.concatenate([sin, -sin], axis=-1))
        else:
            i_sin = np.zeros(sin.shape, dtype=np.complex128)
            i_sin.imag = sin
            self.parts = (np.repeat(cos, 2, axis=-1), i_sin)
        self.zero = (pos == 0)[..., None] if factor == 1.0 else None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.parts) + (0 if self.zero is None else self.zero.nbytes)

    def freeze(self) -> None:
        for a in (*self.parts, self.zero):
            if a is not None:
                a.flags.writeable = False


class _PrefixView:
    """Rows ``start .. start + count`` of a prefix table, shaped like the :class:`_Tables` of ``pos``."""

    def __init__(self, parts: tuple[np.ndarray, ...], pos: np.ndarray, start: int, factor: float) -> None:
        count = pos.size
        self.parts = tuple(t[start : start + count].reshape(pos.shape + t.shape[1:]) for t in parts)
        self.zero = (pos == 0)[..., None] if factor == 1.0 else None


class _PrefixTables:
    """Tables of the positions ``0, 1, ..., rows - 1`` per (frequencies, attention factor, layout).

    Long sequences rotate by ``arange``-like positions (``p0, p0 + 1, ..., p0 + S - 1``, integers,
    ``p0 >= 0``) whose tables are too large for :class:`_TableCache`: those are served as a view of one
    table per configuration, built once and grown (at least doubled) when a later call reaches further.
    Every row is the :class:`_Tables` row of that position, computed by the same elementwise formulas,
    so a view holds the same bits as tables built for the call. The tables together stay within ``max_bytes``
    (least recently used configurations are dropped); a request that would not fit is refused
    (``None``) and the caller builds its tables as before. Thread-safe: a table is never changed once
    published (growing builds a new one), and concurrent builders compute the same bits.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, tuple[np.ndarray, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def run_start(pos: np.ndarray) -> int | None:
        """``p0`` if ``pos`` (one axis longer than 1 at most) is ``p0, p0 + 1, ...`` with an integer
        ``p0 >= 0`` (not -0.0, whose sine keeps its sign), else None."""
        if sum(n > 1 for n in pos.shape) > 1 or pos.size == 0:
            return None
        flat = pos.reshape(-1)
        p0 = float(flat[0])
        if not (0.0 <= p0 < 2.0**40 and p0 == int(p0)) or np.signbit(flat[0]):
            return None
        if flat.size > 1 and not np.array_equal(flat, np.arange(p0, p0 + flat.size, dtype=np.float64)):
            return None
        return int(p0)

    def get(self, pos: np.ndarray, freqs: np.ndarray, factor: float, layout: str) -> _PrefixView | None:
        start = self.run_start(pos)
        if start is None:
            return None
        end = start + pos.size
        row_bytes = 2 * 2 * freqs.size * 8  # [c, c] and [s, -s] (or c twice and 1j s): 2 n each
        if end * row_bytes > self.max_bytes:
            return None
        key = (layout, factor, freqs.tobytes())
        with self._lock:
            parts = self._items.get(key)
            if parts is not None:
                self._items.move_to_end(key)
        have = 0 if parts is None else parts[0].shape[0]
        if end - have > 2 * pos.size:
            return None  # building the rows up to p0 would cost over twice the call's own tables
        if have < end:
            # A growth doubles the table (limited by the budget and by twice the call's own rows), so a
            # sequence of calls reaching further and further costs about one build in all.
            rows = min(max(end, have + min(have, 2 * pos.size)), self.max_bytes // row_bytes)
            new = _Tables(np.arange(have, rows, dtype=np.float64), freqs, factor, layout).parts
            if parts is not None:
                new = tuple(np.concatenate(pair) for pair in zip(parts, new, strict=True))
            parts = new
            for t in parts:
                t.flags.writeable = False
            self._publish(key, parts)
        return _PrefixView(parts, pos, start, factor)

    def _publish(self, key: tuple, parts: tuple[np.ndarray, ...]) -> None:
        size = sum(t.nbytes for t in parts)
        with self._lock:
            old = self._items.get(key)
            if old is not None and old[0].shape[0] >= parts[0].shape[0]:
                return  # another thread published a table at least as long
            if old is not None:
                self._bytes -= sum(t.nbytes for t in old)
                del self._items[key]
            while self._items and self._bytes + size > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= sum(t.nbytes for t in dropped)
            self._items[key] = parts
            self._bytes += size


#: Memory the table cache of :func:`apply` may keep (tables of any positions, a quarter of it at most each).
_TABLE_CACHE_BYTES = 64 * 2**20
_TABLE_CACHE = _TableCache(_TABLE_CACHE_BYTES)
#: Memory the prefix tables of :func:`apply` may keep (``arange``-like positions whose tables are too
#: large for the table cache); 2 KiB per position at rotary_dim 128. See :func:`set_table_cache_bytes`.
_PREFIX_TABLE_BYTES = 256 * 2**20
_PREFIX_TABLES = _PrefixTables(_PREFIX_TABLE_BYTES)


def _check_bytes(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int number of bytes, got {type(value).__name__} {value!r:.60}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0 bytes, got {int(value)}")
    return int(value)


def set_table_cache_bytes(
    *, cache_bytes: int | None = None, prefix_bytes: int | None = None
) -> tuple[int, int]:
    """Set the memory :func:`apply` keeps for exact cos/sin tables; returns the previous ``(cache, prefix)``.

    ``cache_bytes`` (default 64 MiB) bounds the least-recently-used cache of tables per (configuration,
    positions), each at most a quarter of it; ``prefix_bytes`` (default 256 MiB) bounds the tables of
    positions ``0 .. N-1`` per configuration that serve longer ``arange``-like positions (2 KiB per
    position at rotary_dim 128: 128 MiB for 65536). ``0`` turns a cache off. The caches are emptied.
    Results never depend on these settings, only the time of a call does.
    """
    global _TABLE_CACHE_BYTES, _TABLE_CACHE, _PREFIX_TABLE_BYTES, _PREFIX_TABLES
    previous = (_TABLE_CACHE_BYTES, _PREFIX_TABLE_BYTES)
    cache = previous[0] if cache_bytes is None else _check_bytes(cache_bytes, "cache_bytes")
    prefix = previous[1] if prefix_bytes is None else _check_bytes(prefix_bytes, "prefix_bytes")
    _TABLE_CACHE_BYTES, _PREFIX_TABLE_BYTES = cache, prefix
    _TABLE_CACHE, _PREFIX_TABLES = _TableCache(cache), _PrefixTables(prefix)
    return previous


def clear_table_caches() -> None:
    """Empty the table caches of :func:`apply` (the next call builds its exact tables afresh)."""
    set_table_cache_bytes()


def _rotate_half_block(out, x, cos_full, sin_signed, rd: int, scratch: np.ndarray) -> None:
    """Half layout on one block in three ufunc calls, with exactly the formula's roundings.

    ``cos_full = [c, c]`` and ``sin_signed = [s, -s]``: after ``out = x * cos_full`` and
    ``tmp = x * sin_signed = [x1 s, -(x2 s)]``, adding ``tmp`` with its halves swapped gives
    ``x1 c + (-(x2 s)) = x1 c - x2 s`` and ``x2 c + x1 s`` (negation is exact, so this is bitwise the
    elementwise form).
    """
    h = rd // 2
    np.multiply(x[..., :rd], cos_full, out=out[..., :rd])
    tmp = np.multiply(x[..., :rd], sin_signed, out=scratch)
    # Splitting the (unit-stride) last axis into (2, h) is always a view, never a copy.
    out4 = out[..., :rd].reshape(out.shape[:-1] + (2, h))
    np.add(out4, tmp.reshape(out4.shape)[..., ::-1, :], out=out4)


def _rotate_interleaved_block(
    out, x, cos_pairs, i_sin, rd: int, scratch: np.ndarray, caller_err: dict
) -> None:
    """Interleaved layout on one block in three ufunc calls, with exactly the formula's roundings.

    ``cos_pairs = [c0, c0, c1, c1, ...]`` and ``i_sin = 1j * s``. With each pair viewed as the complex
    number ``z = x_a + 1j x_b``, ``z * (1j s)`` is ``(x_a*0 - x_b*s) + 1j (x_a*s + x_b*0)``: for finite
    x that is exactly ``(-(x_b s), x_a s)`` whether or not NumPy fuses a multiply and an add, because
    the other product is an exact zero. Adding it to ``x * cos_pairs`` gives ``x_a c - x_b s`` and
    ``x_b c + x_a s`` rounded exactly as written. Runs under ``errstate(invalid="raise")``: an infinite
    input (``0 * inf``) raises, and that block is recomputed with the plain elementwise formula under
    the caller's error state, so the result is the same formula either way (quiet NaNs raise nothing
    and propagate as in the formula).
    """
    xr, orr = x[..., :rd], out[..., :rd]
    try:
        np.multiply(xr, cos_pairs, out=orr)
        np.multiply(xr.view(np.complex128), i_sin, out=scratch.view(np.complex128))
        np.add(orr, scratch, out=orr)
    except FloatingPointError:
        with np.errstate(**caller_err):
            x1, x2, o1, o2 = xr[..., 0::2], xr[..., 1::2], orr[..., 0::2], orr[..., 1::2]
            c, s = cos_pairs[..., 0::2], i_sin.imag
            np.subtract(x1 * c, x2 * s, out=o1)
            np.add(x2 * c, x1 * s, out=o2)


def apply(
    x: Any,
    positions: Any,
    cfg: RopeConfig,
    *,
    seq_len: int | None = None,
    axes: str | None = None,
    inverse: bool = False,
) -> np.ndarray:
    """Rotate ``x`` (shape ``(..., head_dim)``) by ``positions`` (broadcast against ``x.shape[:-1]``).

    ``axes`` names x's axes (``"bshd"``, ``"bhsd"``, ``"sbhd"``, ``"thd"``, ...; see
    :mod:`rope_ref.axes`): then ``positions`` may be HF-style ``(B, S)`` ids, per-token ids or a scalar.
    ``inverse=True`` rotates by ``-m theta_i`` (``R_m^T``, what backward passes and de-rotation use):
    exactly ``apply(x, -positions)`` except that a length-dependent scaling still sees the sequence
    length of ``positions`` (the table of the forward pass).

    RoFormer eq. 34 in float64: for each pair (a, b) of the layout, ``y_a = x_a cos - x_b sin`` and
    ``y_b = x_b cos + x_a sin``, with cos and sin of m*theta_i multiplied by the attention factor (HF
    ``apply_rotary_pos_emb`` semantics). Channels ``rotary_dim:`` are copied unchanged. Positions may
    be negative or fractional. Returns a new float64 array with ``x.shape``.
    """
    cfg, x, pos, seq_len = _validated(x, positions, cfg, seq_len, axes)
    if not isinstance(inverse, (bool, np.bool_)):
        raise TypeError(f"inverse must be a bool, got {type(inverse).__name__}")
    if inverse:
        pos = -pos  # seq_len was resolved from the forward positions above
    freqs = inv_freq(cfg, seq_len)
    factor = attention_factor(cfg, seq_len)
    out = np.empty(x.shape, dtype=np.float64)
    rd = cfg.rotary_dim
    out[..., rd:] = x[..., rd:]
    if x.size == 0:
        return out
    if cfg.layout == "interleaved" and x.strides[-1] != x.itemsize:
        x = np.ascontiguousarray(x)
    # Positions left-padded to x.ndim - 1 axes, so they broadcast over the leading axes of x.
    pos = pos.reshape((1,) * (x.ndim - 1 - pos.ndim) + pos.shape)
    if x.ndim == 1:  # give a single vector a leading axis to block over
        x, out_view, pos = x[None], out[None], pos[None]
    else:
        out_view = out
    # Block over the longest leading axis so temporaries stay cache-sized. Tables are built once (and
    # cached) when they are small next to x, and per block when the positions are nearly x's full
    # shape, so that peak memory stays a few blocks whatever the positions' shape.
    axis = int(np.argmax(x.shape[:-1]))
    row_elements = x.size // x.shape[axis]
    step = max(1, _BLOCK_ELEMENTS // max(row_elements, 1))
    small = pos.shape[axis] == 1 or pos.size * rd <= x.size // 4
    shared = None
    if small and not _TABLE_CACHE.keeps(pos, freqs):
        shared = _PREFIX_TABLES.get(pos, freqs, factor, cfg.layout)
    if small and shared is None:
        shared = _TABLE_CACHE.get(pos, freqs, factor, cfg.layout)
    scratch_shape = x[(slice(None),) * axis + (slice(0, step),)].shape[:-1] + (rd,)
    caller_err = np.geterr() if cfg.layout == "interleaved" else None
    zero_starts = None if shared is None else _blocks_with_zero(shared.zero, axis, step, x.shape[axis])

    def rotate_block(scratch_full: np.ndarray, start: int) -> None:
        sl = (slice(None),) * axis + (slice(start, start + step),)
        if shared is None:
            tables = _Tables(pos[sl], freqs, factor, cfg.layout)
            parts, zero = tables.parts, tables.zero
            if zero is not None and not zero.any():
                zero = None
        else:  # slice the shared tables along the block axis unless they broadcast along it
            parts = tuple(t if t.shape[axis] == 1 else t[sl] for t in shared.parts)
            zero = shared.zero if start in zero_starts else None
            if zero is not None and zero.shape[axis] != 1:
                zero = zero[sl]
        xb = x[sl]
        scratch = scratch_full[(slice(None),) * axis + (slice(0, xb.shape[axis]),)]
        if cfg.layout == "half":
            _rotate_half_block(out_view[sl], xb, *parts, rd, scratch)
        else:
            with np.errstate(invalid="raise"):
                _rotate_interleaved_block(out_view[sl], xb, *parts, rd, scratch, caller_err)
        if zero is not None:
            # Position 0 is the identity bit for bit, signed zeros included (x - 0*y can flip -0.0).
            np.copyto(out_view[sl][..., :rd], xb[..., :rd], where=zero)

    run_blocks(rotate_block, range(0, x.shape[axis], step), lambda: np.empty(scratch_shape, dtype=np.float64))
    return out


def _blocks_with_zero(zero: np.ndarray | None, axis: int, step: int, length: int) -> set[int]:
    """Starts of the blocks of :func:`apply` (``step`` rows along ``axis``) whose positions include 0.

    ``zero`` is the tables' position-0 mask (None: the identity needs no fix-up), broadcast along ``axis``
    when its length there is 1. One reduction per call instead of one per block.
    """
    if zero is None:
        return set()
    others = tuple(i for i in range(zero.ndim) if i != axis)
    rows = np.flatnonzero(zero.any(axis=others))
    if zero.shape[axis] == 1:
        return set(range(0, length, step)) if rows.size else set()
    return {int(row) // step * step for row in rows}


def apply_complex(
    x: Any, positions: Any, cfg: RopeConfig, *, seq_len: int | None = None, axes: str | None = None
) -> np.ndarray:
    """The same rotation as :func:`apply`, computed as complex multiplication.

    Each pair (a, b) is the complex number x_a + i x_b, multiplied by A e^{i m theta}, A the attention
    factor; this is Meta LLaMA's ``precompute_freqs_cis`` / ``apply_rotary_emb`` view
    (meta-llama/llama ``llama/model.py``) generalised to both layouts. RoFormer eq. 12.

    The complex product ``(x_a + i x_b)(c + i s)`` is spelled out in real arithmetic,
    ``(x_a c - x_b s) + i (x_a s + x_b c)``: NumPy's complex multiply may use fused multiply-adds on
    some CPUs, and the oracle's bits must not depend on the CPU. Position 0 is not special-cased here,
    unlike :func:`apply`. ``axes`` as in :func:`apply`.
    """
    cfg, x, pos, seq_len = _validated(x, positions, cfg, seq_len, axes)
    cos, sin = cos_sin(pos, cfg, seq_len=seq_len)
    lead = (1,) * (x.ndim - 1 - pos.ndim)
    cos, sin = cos.reshape(lead + cos.shape), sin.reshape(lead + sin.shape)
    a, b = pair_indices(cfg)
    xa, xb = x[..., a], x[..., b]
    out = x.copy()
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xa * sin + xb * cos
    return out


def rotation_matrix(position: float, cfg: RopeConfig, *, seq_len: int | None = None) -> np.ndarray:
    """The explicit block-diagonal R_{Theta,m} of RoFormer eq. 13, shape ``(head_dim, head_dim)``.

    Pairs follow the layout; pass-through channels get the identity. ``apply(x, m, cfg)`` equals
    ``R @ x`` (times the attention factor on the rotated block, which R includes).
    """
    cfg = _check_config(cfg)
    pos = as_positions(position, "position")
    if pos.ndim != 0:
        raise ValueError(f"position must be a scalar, got shape {pos.shape}")
    cos, sin = cos_sin(pos, cfg, seq_len=seq_len)
    r = np.eye(cfg.head_dim)
    a, b = pair_indices(cfg)
    r[a, a] = cos
    r[a, b] = -sin
    r[b, a] = sin
    r[b, b] = cos
    return r


def layout_permutation(cfg: RopeConfig) -> np.ndarray:
    """Permutation P with ``apply(x[..., P], half) == apply(x, interleaved)[..., P]``.

    P lists the even channels of the rotated block, then the odd ones, then the pass-through channels
    in order. Per head it is the row order HF's ``convert_llama_weights_to_hf.py`` ``permute`` gives
    the q/k projections, which is why Meta (interleaved) checkpoints run under ``rotate_half``.
    """
    cfg = _check_config(cfg)
    rd = cfg.rotary_dim
    return np.concatenate([np.arange(0, rd, 2), np.arange(1, rd, 2), np.arange(rd, cfg.head_dim)])


def inverse_layout_permutation(cfg: RopeConfig) -> np.ndarray:
    """The inverse of :func:`layout_permutation`: ``x[..., P][..., inverse] == x``."""
    perm = layout_permutation(cfg)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    return inv
