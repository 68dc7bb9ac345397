"""Frequencies, angles and the cos/sin table (RoFormer §3.2.2, eq. 15).

theta_i = base^(-2i/d) for i = 0 .. d/2 - 1, with d the *rotary* width; the angle of pair i at
position m is m * theta_i. Scalings (PI, NTK, YaRN, ...) replace the theta_i and may add an attention
factor that multiplies cos and sin, as HF ``transformers`` ``modeling_rope_utils.py`` does.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import _mp
from ._arrays import POSITION_LIMIT, as_positions, check_int, check_real
from ._exact_trig import cos_sin_of_product
from .config import RopeConfig

#: Largest rotary width :func:`default_inv_freq` accepts (``RopeConfig`` allows head_dim up to 65536;
#: ``sinusoidal_embedding`` uses the same table for d_model up to 2**20).
MAX_ROTARY_DIM = 1 << 20

__all__ = ["default_inv_freq", "inv_freq", "attention_factor", "angles", "cos_sin", "resolve_seq_len"]


def _check_config(cfg: Any) -> RopeConfig:
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    return cfg


def default_inv_freq(base: float, rotary_dim: int) -> np.ndarray:
    """theta_i = base^(-2i/rotary_dim), float64, shape ``(rotary_dim // 2,)``, correctly rounded.

    RoFormer (arXiv 2104.09864) eq. 15; HF ``_compute_default_rope_parameters`` computes the same
    values as ``1 / base ** (arange(0, dim, 2) / dim)`` in float32. Each entry is the float64 nearest
    the exact real ``base^(-2i/d)`` of the float64 ``base`` (evaluated as ``exp(-(2i/d) ln base)`` in
    :mod:`rope_ref._mp`), so it is the same on every machine.
    """
    base = check_real(base, "base")
    if not (base > 0.0 and base != 1.0):
        raise ValueError(f"base must be a finite number > 0 and != 1, got {base}")
    rotary_dim = check_int(rotary_dim, "rotary_dim", minimum=2)
    if rotary_dim % 2 or rotary_dim > MAX_ROTARY_DIM:
        raise ValueError(f"rotary_dim must be an even integer in [2, {MAX_ROTARY_DIM}], got {rotary_dim}")
    return np.array(_default_inv_freq_cached(base, rotary_dim))


@functools.lru_cache(maxsize=512)
def _default_inv_freq_cached(base: float, rotary_dim: int) -> tuple[float, ...]:
    mp = _mp.ctx()
    return tuple(_mp.to_float(t) for t in exact_default_theta(mp.log(_mp.exact(base)), rotary_dim))


def exact_default_theta(ln_base: Any, rotary_dim: int) -> list:
    """The exact (mpmath) ``theta_i = base^(-2i/d)``, i = 0 .. d/2 - 1, for scalings to build on.

    ``theta_1 = exp(-(2/d) ln base)`` and ``theta_i = theta_1^i`` by repeated multiplication at
    :data:`rope_ref._mp.PRECISION_BITS` bits: the relative error after ``i`` products is below
    ``i * 2**-255``, far below float64's rounding, and it costs one product per entry.
    """
    mp = _mp.ctx()
    ratio = mp.exp(-(ln_base * 2) / rotary_dim)
    out, theta = [], mp.mpf(1)
    for _ in range(rotary_dim // 2):
        out.append(theta)
        theta = theta * ratio
    return out


def _check_seq_len(seq_len: Any) -> int | None:
    if seq_len is None:
        return None
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    if seq_len > POSITION_LIMIT + 1:
        shown = str(seq_len) if seq_len < 10**20 else f"an integer of {len(str(seq_len))} digits"
        raise ValueError(f"seq_len must be <= 2**40 + 1 (the oracle's position limit + 1), got {shown}")
    return seq_len


def inv_freq(cfg: RopeConfig, seq_len: int | None = None) -> np.ndarray:
    """The inverse frequencies of ``cfg``, float64, shape ``(rotary_dim // 2,)``.

    ``seq_len`` matters only for length-dependent scalings (dynamic NTK, LongRoPE); for those, ``None``
    means "no longer than the original context".
    """
    cfg = _check_config(cfg)
    seq_len = _check_seq_len(seq_len)
    if cfg.scaling is None:
        return default_inv_freq(cfg.base, cfg.rotary_dim)
    freqs = np.asarray(cfg.scaling.inv_freq(cfg.base, cfg.rotary_dim, seq_len), dtype=np.float64)
    if cfg.scaling.zero_frequencies:  # pairs past the rotated ones have frequency 0 (Proportional)
        if not np.all(np.isfinite(freqs) & (freqs >= 0)):
            raise ValueError(f"{cfg.scaling!r} at seq_len={seq_len} gives negative or non-finite frequencies")
        return freqs
    if not np.all(np.isfinite(freqs) & (freqs > 0)):
        raise ValueError(
            f"{cfg.scaling!r} at seq_len={seq_len} gives inverse frequencies outside float64's "
            "positive normal range (an overflow or underflow); the config cannot be evaluated"
        )
    return freqs


def attention_factor(cfg: RopeConfig, seq_len: int | None = None) -> float:
    """The factor multiplying cos and sin (HF "attention_scaling"); 1.0 without scaling."""
    cfg = _check_config(cfg)
    seq_len = _check_seq_len(seq_len)
    if cfg.scaling is None:
        return 1.0
    return float(cfg.scaling.attention_factor(cfg.rotary_dim, seq_len))


def resolve_seq_len(positions: np.ndarray, cfg: RopeConfig, seq_len: int | None) -> int | None:
    """The sequence length a length-dependent scaling sees: ``seq_len`` if given, else max(positions) + 1.

    This is HF's rule (``dynamic_rope_update``: ``seq_len = max(position_ids) + 1``). For fractional
    positions the floor of the maximum is used. Returns ``None`` when the scaling does not depend on
    length, or when there are no positions.
    """
    seq_len = _check_seq_len(seq_len)
    if seq_len is not None or cfg.scaling is None or not cfg.scaling.length_dependent:
        return seq_len
    if positions.size == 0:
        return None
    return max(int(np.floor(positions.max())) + 1, 1)


def _place_ids(positions: Any, axes: str) -> np.ndarray:
    """Ids placed on the axes of an x whose other axes (heads) have size 1."""
    from .axes import parse_axes, positions_for_axes

    ids = as_positions(positions)
    letters = parse_axes(axes)
    if ids.ndim == len(letters) - 1:  # one axis per leading axis of x already
        return positions_for_axes(ids, letters, ids.shape + (1,))
    sizes = {"b": 1, "s": 1, "t": 1}
    if ids.ndim == 1:
        sizes["s"] = sizes["t"] = ids.shape[0]
    elif ids.ndim == 2 and "b" in letters:
        sizes["b"], sizes["s"] = ids.shape
    x_shape = tuple(sizes.get(letter, 1) for letter in letters[:-1]) + (1,)  # d's size does not matter
    return positions_for_axes(ids, letters, x_shape)


def angles(positions: Any, cfg: RopeConfig, *, seq_len: int | None = None) -> np.ndarray:
    """fl(m * theta_i) for every position: shape ``positions.shape + (rotary_dim // 2,)``, float64.

    This is the float64 *rounding* of each angle, for display and for error models. :func:`cos_sin`
    does not go through it: it takes cos and sin of the exact product.
    """
    cfg = _check_config(cfg)
    pos = as_positions(positions)
    freqs = inv_freq(cfg, resolve_seq_len(pos, cfg, seq_len))
    return pos[..., None] * freqs


def cos_sin(
    positions: Any, cfg: RopeConfig, *, seq_len: int | None = None, axes: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` of the exact angles ``m * theta_i``, each times the attention factor (HF semantics).

    Shape ``positions.shape + (rotary_dim // 2,)``. cos and sin are of the exact real product of the
    float64 position and the float64 inverse frequency (not of its float64 rounding, whose error grows
    with the position), within 1 ulp and nearly always correctly rounded (:mod:`rope_ref._exact_trig`);
    the attention factor then adds one rounding.

    With ``axes`` (x's axes, e.g. ``"bhsd"``; see :mod:`rope_ref.axes`), the ids are placed as for
    :func:`rope_ref.apply` and the tables get one axis per axis of x (size 1 where the ids do not vary,
    the last one holding the ``rotary_dim // 2`` pairs): HF-style ``(B, S)`` ids and ``"bhsd"`` give
    ``(B, 1, S, rotary_dim // 2)``, ready to broadcast against ``(B, H, S, ...)``.
    """
    cfg = _check_config(cfg)
    pos = as_positions(positions) if axes is None else _place_ids(positions, axes)
    seq_len = resolve_seq_len(pos, cfg, seq_len)
    cos, sin = cos_sin_of_product(pos[..., None], inv_freq(cfg, seq_len))
    factor = attention_factor(cfg, seq_len)
    if factor != 1.0:
        cos *= factor
        sin *= factor
    return cos, sin
