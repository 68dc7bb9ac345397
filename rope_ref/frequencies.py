"""Frequencies, angles and the cos/sin table (RoFormer §3.2.2, eq. 15).

theta_i = base^(-2i/d) for i = 0 .. d/2 - 1, with d the *rotary* width; the angle of pair i at
position m is m * theta_i. Scalings (PI, NTK, YaRN, ...) replace the theta_i and may add an attention
factor that multiplies cos and sin, as HF ``transformers`` ``modeling_rope_utils.py`` does.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from ._arrays import as_positions, check_int
from .config import RopeConfig

__all__ = ["default_inv_freq", "inv_freq", "attention_factor", "angles", "cos_sin", "resolve_seq_len"]


def _check_config(cfg: Any) -> RopeConfig:
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    return cfg


def default_inv_freq(base: float, rotary_dim: int) -> np.ndarray:
    """theta_i = base^(-2i/rotary_dim), float64, shape ``(rotary_dim // 2,)``, within ~1.5 ulp.

    RoFormer (arXiv 2104.09864) eq. 15; HF ``_compute_default_rope_parameters`` computes the same
    values as ``1 / base ** (arange(0, dim, 2) / dim)`` in float32.

    A plain ``base ** (-2i/d)`` first rounds the exponent ``2i/d`` to float64, and ``ln(base)``
    magnifies that rounding (up to ~7 ulp for base 1e6). Here the exponent is split exactly into
    ``hi + lo`` (``hi`` the float64 nearest ``-2i/d``, ``lo`` the rational remainder) and
    ``base^(hi + lo) = base^hi * (1 + lo ln base)`` to first order, which is exact to float64
    precision because ``|lo ln base| < 1e-15``.
    """
    return np.array(_default_inv_freq_cached(float(base), int(rotary_dim)))


@functools.lru_cache(maxsize=512)
def _default_inv_freq_cached(base: float, rotary_dim: int) -> tuple[float, ...]:
    exponents = [Fraction(-2 * i, rotary_dim) for i in range(rotary_dim // 2)]
    hi = np.array([float(e) for e in exponents], dtype=np.float64)
    lo = np.array([float(e - Fraction(h)) for e, h in zip(exponents, hi, strict=True)], dtype=np.float64)
    return tuple((np.power(base, hi) * (1.0 + lo * math.log(base))).tolist())


def _check_seq_len(seq_len: Any) -> int | None:
    if seq_len is None:
        return None
    return check_int(seq_len, "seq_len", minimum=1)


def inv_freq(cfg: RopeConfig, seq_len: int | None = None) -> np.ndarray:
    """The inverse frequencies of ``cfg``, float64, shape ``(rotary_dim // 2,)``.

    ``seq_len`` matters only for length-dependent scalings (dynamic NTK, LongRoPE); for those, ``None``
    means "no longer than the original context".
    """
    cfg = _check_config(cfg)
    seq_len = _check_seq_len(seq_len)
    if cfg.scaling is None:
        return default_inv_freq(cfg.base, cfg.rotary_dim)
    return np.asarray(cfg.scaling.inv_freq(cfg.base, cfg.rotary_dim, seq_len), dtype=np.float64)


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


def angles(positions: Any, cfg: RopeConfig, *, seq_len: int | None = None) -> np.ndarray:
    """m * theta_i for every position: shape ``positions.shape + (rotary_dim // 2,)``, float64."""
    cfg = _check_config(cfg)
    pos = as_positions(positions)
    freqs = inv_freq(cfg, resolve_seq_len(pos, cfg, seq_len))
    return pos[..., None] * freqs


def cos_sin(positions: Any, cfg: RopeConfig, *, seq_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` of :func:`angles`, each multiplied by the attention factor (HF semantics)."""
    cfg = _check_config(cfg)
    pos = as_positions(positions)
    seq_len = resolve_seq_len(pos, cfg, seq_len)
    theta = angles(pos, cfg, seq_len=seq_len)
    cos, sin = np.cos(theta), np.sin(theta)
    factor = attention_factor(cfg, seq_len)
    if factor != 1.0:
        cos *= factor
        sin *= factor
    return cos, sin
