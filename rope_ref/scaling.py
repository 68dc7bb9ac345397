"""Long-context scalings: PI, NTK-aware, dynamic NTK, YaRN, Llama 3 and LongRoPE.

Each scaling is a small frozen dataclass, validated on construction and passed as
``RopeConfig(..., scaling=...)``. It answers two questions (see :class:`rope_ref.scaling_base.Scaling`):
the inverse frequencies for a rotary width, and the attention factor that multiplies cos and sin.
Formulas follow HF ``transformers`` ``src/transformers/modeling_rope_utils.py`` (v5 semantics), which
in turn follow the papers cited on each class; ``docs/scaling.md`` lists where implementations
disagree and which side rope-ref takes.

Notation: ``d`` = rotary width, ``i = 0 .. d/2 - 1``, ``theta_i = base^(-2i/d)`` (RoFormer eq. 15),
``L0`` = original (pre-training) context, ``L`` = current sequence length.

Exactness: every table entry and attention factor is the float64 nearest the *exact* value of its
formula on the float64 inputs (the base, the factors, the contexts), with no intermediate rounding:
the formulas are evaluated in :mod:`rope_ref._mp` (mpmath at 256 bits) and rounded once. Comparisons
and ``floor``/``ceil`` (YaRN's correction range, Llama 3's band edges, LongRoPE's switch) act on the
exact real values. HF evaluates the same formulas in float32/float64 with intermediate roundings; the
two agree to a few ulp of float64 (``docs/spec.md``, "Exact tables").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from . import _mp
from ._arrays import check_int, check_real, set_fields
from .frequencies import exact_default_theta
from .scaling_base import Scaling

__all__ = [
    "Linear",
    "NTKAware",
    "DynamicNTK",
    "YaRN",
    "Llama3",
    "LongRoPE",
    "Proportional",
    "yarn_get_mscale",
    "scaling_from_hf",
    "ROPE_TYPES",
]


# ---------------------------------------------------------------------------------------------------
# validation helpers


def _factor(value: Any, name: str = "factor") -> float:
    value = check_real(value, name)
    if not value >= 1.0:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _positive(value: Any, name: str) -> float:
    value = check_real(value, name)
    if not value > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def _context(value: Any, name: str = "original_max_position") -> int:
    return check_int(value, name, minimum=1)


def _scaled_base_float(value: Any, what: str) -> float:
    try:
        return _mp.to_float(value)
    except OverflowError:
        raise ValueError(f"{what}: the scaled base overflows float64") from None


def _ntk_exponent(rotary_dim: int, kind: str) -> float:
    """d / (d - 2), the exponent of the NTK-aware base change; undefined for d = 2."""
    if rotary_dim < 4:
        raise ValueError(f"{kind} needs rotary_dim >= 4 (exponent d/(d-2)), got rotary_dim={rotary_dim}")
    return rotary_dim / (rotary_dim - 2)


def _rounded(values: Sequence[Any]) -> np.ndarray:
    """Exact (mpmath) values rounded once to float64; an overflow is a ``ValueError``."""
    try:
        return np.array([_mp.to_float(v) for v in values], dtype=np.float64)
    except OverflowError as exc:
        raise ValueError(f"the scaled frequency table overflows float64: {exc}") from None


def _cached_table(compute: Callable[..., list]) -> Callable[..., np.ndarray]:
    """Memoise an exact table builder (arguments are hashable), returning a fresh float64 array each call."""
    cached = functools.lru_cache(maxsize=256)(lambda *args: tuple(_rounded(compute(*args)).tolist()))

    @functools.wraps(compute)
    def table(*args: Any) -> np.ndarray:
        return np.array(cached(*args), dtype=np.float64)

    table.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    return table


def _ln(value: float) -> Any:
    return _mp.ctx().log(_mp.exact(value))


@_cached_table
def _theta_over(base: float, rotary_dim: int, divisors: tuple[float, ...]) -> list:
    """Exact ``theta_i / divisors[i]`` (one divisor broadcast to all pairs when the tuple has one entry)."""
    theta = exact_default_theta(_ln(base), rotary_dim)
    if len(divisors) == 1:
        divisors = divisors * len(theta)
    return [t / _mp.exact(q) for t, q in zip(theta, divisors, strict=True)]


@_cached_table
def _theta_of_ln_base(
    ln_base_terms: tuple[tuple[int, int, float], ...], base: float, rotary_dim: int
) -> list:
    """Exact theta_i for ``ln base' = ln base + sum((p / q) ln v for (p, q, v) in ln_base_terms)``."""
    ln_base = _ln(base)
    for numerator, denominator, value in ln_base_terms:
        ln_base = ln_base + numerator * _ln(value) / denominator
    return exact_default_theta(ln_base, rotary_dim)


# ---------------------------------------------------------------------------------------------------
# the scaling types


@dataclass(frozen=True)
class Linear(Scaling):
    """Position interpolation (Chen et al. 2023, arXiv 2306.15595, eq. 4): angles use ``m / factor``.

    Implemented as ``theta_i / factor`` (HF ``_compute_linear_scaling_rope_parameters``:
    ``inv_freq /= factor``). ``apply(x, m, Linear(f))`` equals ``apply(x, m / f)`` bit for bit when
    ``f`` is a power of two (both divisions are exact); otherwise the two differ by the rounding of
    one division, at most about one ulp of the angle. Attention factor: 1.
    """

    factor: float

    def __post_init__(self) -> None:
        set_fields(self, factor=_factor(self.factor))

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """theta_i / factor, the exact quotient rounded once."""
        return _theta_over(float(base), rotary_dim, (self.factor,))

    def to_hf(self) -> dict:
        return {"rope_type": "linear", "factor": self.factor}


@dataclass(frozen=True)
class NTKAware(Scaling):
    """Static NTK-aware scaling (bloc97; YaRN arXiv 2309.00071 Definition 1).

    ``base' = base * alpha^(d/(d-2))``, then the default frequencies with ``base'``. Reference code:
    ``jquesnelle/yarn`` ``scaled_rope/LlamaNTKScaledRotaryEmbedding.py``; the same formula was HF's
    short-lived ``"ntk"`` rope type. HF v5 has no such type, so :meth:`to_hf` writes ``"ntk"`` and
    only rope-ref reads it back. Attention factor: 1.
    """

    alpha: float

    def __post_init__(self) -> None:
        set_fields(self, alpha=_factor(self.alpha, "alpha"))

    def _exponent(self, rotary_dim: int) -> Any:
        _ntk_exponent(rotary_dim, "NTKAware")
        return _mp.ctx().mpf(rotary_dim) / (rotary_dim - 2)

    def scaled_base(self, base: float, rotary_dim: int) -> float:
        """``base * alpha^(d/(d-2))``, rounded to float64 (for display; tables use the exact value)."""
        mp = _mp.ctx()
        value = mp.exp(_ln(base) + self._exponent(rotary_dim) * _ln(self.alpha))
        return _scaled_base_float(value, f"NTKAware(alpha={self.alpha!r})")

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """The default table of the exact ``base' = base * alpha^(d/(d-2))`` (no rounding of base')."""
        _ntk_exponent(rotary_dim, "NTKAware")
        return _theta_of_ln_base(((rotary_dim, rotary_dim - 2, self.alpha),), float(base), rotary_dim)

    def to_hf(self) -> dict:
        return {"rope_type": "ntk", "factor": self.alpha}


@dataclass(frozen=True)
class DynamicNTK(Scaling):
    """Dynamic NTK scaling, HF form (emozilla; HF ``_compute_dynamic_ntk_parameters``).

    With ``L = max(seq_len, L0)``: ``base' = base * ((factor * L / L0) - (factor - 1))^(d/(d-2))``,
    computed here as the algebraically equal ``base * (1 + factor * (L - L0) / L0)^(d/(d-2))`` so that
    ``L = L0`` gives ``base`` exactly. ``seq_len=None`` means "no longer than L0" (base unchanged).

    The YaRN paper's dynamic scaling (arXiv 2309.00071 §3.3) instead uses ``s = max(1, L / L0)`` and
    ``base' = base * s^(d/(d-2))``; the two agree only for ``factor = 1`` (see ``docs/scaling.md``).
    Attention factor: 1. The oracle is stateless: the answer depends only on the arguments.
    """

    factor: float
    original_max_position: int
    length_dependent: ClassVar[bool] = True

    def __post_init__(self) -> None:
        set_fields(
            self, factor=_factor(self.factor), original_max_position=_context(self.original_max_position)
        )

    def _growth(self, seq_len: int) -> Any:
        """The exact ``1 + factor * (L - L0) / L0``."""
        l0 = self.original_max_position
        return 1 + _mp.exact(self.factor) * (seq_len - l0) / l0

    def scaled_base(self, base: float, rotary_dim: int, seq_len: int | None) -> float:
        """The base used at ``seq_len``, rounded to float64 (display only); ``base`` when L <= L0."""
        _ntk_exponent(rotary_dim, "DynamicNTK")
        if seq_len is None or seq_len <= self.original_max_position:
            return float(base)
        mp = _mp.ctx()
        exponent = mp.mpf(rotary_dim) / (rotary_dim - 2)
        value = mp.exp(_ln(base) + exponent * mp.log(self._growth(seq_len)))
        return _scaled_base_float(value, repr(self))

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """The default table of the exact scaled base (``base`` itself when L <= L0)."""
        _ntk_exponent(rotary_dim, "DynamicNTK")
        if seq_len is None or seq_len <= self.original_max_position:
            return _theta_of_ln_base((), float(base), rotary_dim)
        return _dynamic_table(self, float(base), rotary_dim, int(seq_len))

    def to_hf(self) -> dict:
        return {
            "rope_type": "dynamic",
            "factor": self.factor,
            "original_max_position_embeddings": self.original_max_position,
        }


@_cached_table
def _dynamic_table(scaling: DynamicNTK, base: float, rotary_dim: int, seq_len: int) -> list:
    mp = _mp.ctx()
    exponent = mp.mpf(rotary_dim) / (rotary_dim - 2)
    return exact_default_theta(_ln(base) + exponent * mp.log(scaling._growth(seq_len)), rotary_dim)


def _mscale_exact(scale: float, mscale: float) -> Any:
    """The exact ``0.1 * mscale * ln(scale) + 1`` (0.1 the float64 constant), or 1 when ``scale <= 1``."""
    if scale <= 1.0:
        return _mp.ctx().mpf(1)
    return _mp.exact(0.1) * _mp.exact(mscale) * _ln(scale) + 1


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """``0.1 * mscale * ln(scale) + 1`` for ``scale > 1``, else 1 (YaRN arXiv 2309.00071 eq. 22).

    HF ``modeling_rope_utils.py`` ``get_mscale`` inside ``_compute_yarn_parameters``; DeepSeek-V2's
    ``yarn_get_mscale``. With ``mscale = 1`` this is the paper's ``sqrt(1/t) = 0.1 ln s + 1``.
    Correctly rounded from the exact value.
    """
    return _mp.to_float(_mscale_exact(float(scale), float(mscale)))


def _optional_real(value: Any, name: str, *, positive: bool) -> float | None:
    if value is None:
        return None
    value = check_real(value, name)
    if positive and not value > 0.0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if not positive and value < 0.0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True, init=False, repr=False)
class YaRN(Scaling):
    """YaRN (Peng et al. 2023, arXiv 2309.00071 Definition 3) in the HF / reference-code form.

    Frequencies (HF ``_compute_yarn_parameters``; ``jquesnelle/yarn``
    ``scaled_rope/LlamaYaRNScaledRotaryEmbedding.py``):

    * ``corr(r) = d * ln(L0 / (2 pi r)) / (2 ln base)``, the pair index whose wavelength fits ``r``
      times into ``L0``; ``low = corr(beta_fast)``, ``high = corr(beta_slow)``; with ``truncate``,
      ``low = floor(low)`` and ``high = ceil(high)``; then ``low = max(low, 0)``,
      ``high = min(high, d - 1)``, and ``high += 0.001`` if the two are equal;
    * ``ramp_i = clip((i - low) / (high - low), 0, 1)``, **linear in the pair index i**;
    * ``inv_freq_i = (theta_i / factor) * ramp_i + theta_i * (1 - ramp_i)``.

    The paper's ramp gamma (eq. 18) is linear in ``r = L0 / lambda_i`` (exponential in i); the two
    agree only at the band edges. Attention factor (multiplies cos and sin): the explicit
    ``attention_factor`` if given; else, if ``mscale`` and ``mscale_all_dim`` are both given and
    non-zero, ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`` (DeepSeek-V2);
    else ``get_mscale(factor) = 0.1 ln(factor) + 1`` (eq. 22). See :func:`yarn_get_mscale`.

    The explicit value is stored as ``explicit_attention_factor`` because ``attention_factor`` is the
    :class:`~rope_ref.scaling_base.Scaling` method that answers the resolved factor.
    """

    factor: float
    original_max_position: int
    beta_fast: float
    beta_slow: float
    mscale: float | None
    mscale_all_dim: float | None
    explicit_attention_factor: float | None
    truncate: bool

    def __init__(
        self,
        factor: float,
        original_max_position: int,
        beta_fast: float = 32.0,
        beta_slow: float = 1.0,
        mscale: float | None = None,
        mscale_all_dim: float | None = None,
        attention_factor: float | None = None,
        truncate: bool = True,
    ) -> None:
        beta_fast = _positive(beta_fast, "beta_fast")
        beta_slow = _positive(beta_slow, "beta_slow")
        if not beta_fast >= beta_slow:  # equal is shipped (Kimi-K2: 1.0 and 1.0); HF's guard handles it
            raise ValueError(
                f"beta_fast must be >= beta_slow, got beta_fast={beta_fast}, beta_slow={beta_slow}"
            )
        if not isinstance(truncate, (bool, np.bool_)):
            raise TypeError(f"truncate must be a bool, got {type(truncate).__name__} {truncate!r:.60}")
        set_fields(
            self,
            factor=_factor(factor),
            original_max_position=_context(original_max_position),
            beta_fast=beta_fast,
            beta_slow=beta_slow,
            mscale=_optional_real(mscale, "mscale", positive=False),
            mscale_all_dim=_optional_real(mscale_all_dim, "mscale_all_dim", positive=False),
            explicit_attention_factor=_optional_real(attention_factor, "attention_factor", positive=True),
            truncate=bool(truncate),
        )

    def __repr__(self) -> str:
        parts = [f"factor={self.factor!r}", f"original_max_position={self.original_max_position!r}"]
        if (self.beta_fast, self.beta_slow) != (32.0, 1.0):
            parts += [f"beta_fast={self.beta_fast!r}", f"beta_slow={self.beta_slow!r}"]
        for name, value in (
            ("mscale", self.mscale),
            ("mscale_all_dim", self.mscale_all_dim),
            ("attention_factor", self.explicit_attention_factor),
        ):
            if value is not None:
                parts.append(f"{name}={value!r}")
        if not self.truncate:
            parts.append("truncate=False")
        return f"YaRN({', '.join(parts)})"

    def _clamped_range(self, base: float, rotary_dim: int) -> tuple[Any, Any]:
        """The exact ``(low, high)`` after truncation and clamping, in HF's order (no zero-width guard)."""
        mp = _mp.ctx()
        l0 = self.original_max_position

        def corr(rotations: float) -> Any:
            return rotary_dim * mp.log(l0 / (_mp.exact(rotations) * 2 * mp.pi)) / (2 * _ln(base))

        low, high = corr(self.beta_fast), corr(self.beta_slow)
        if self.truncate:
            low, high = mp.floor(low), mp.ceil(high)
        return max(low, mp.mpf(0)), min(high, mp.mpf(rotary_dim - 1))

    def _exact_range(self, base: float, rotary_dim: int) -> tuple[Any, Any]:
        """:meth:`_clamped_range` with HF's guard: ``high += 0.001`` (the float64 0.001) when equal."""
        low, high = self._clamped_range(base, rotary_dim)
        if low == high:
            high = high + _mp.exact(0.001)
        return low, high

    def correction_range(self, base: float, rotary_dim: int) -> tuple[float, float]:
        """``(low, high)``: the ramp's pair-index bounds after truncation and clamping, in HF's order.

        Rounded to float64 for display; the table uses the exact values. floor/ceil act on the exact
        ``corr(beta)``. The zero-width guard (``high += 0.001`` when ``low == high``) is not included.
        """
        low, high = self._clamped_range(float(base), rotary_dim)
        return _mp.to_float(low), _mp.to_float(high)

    def ramp(self, base: float, rotary_dim: int) -> np.ndarray:
        """Interpolation weight per pair (0 keeps ``theta_i``, 1 divides it by ``factor``), rounded."""
        return _rounded(self._exact_ramp(float(base), rotary_dim))

    def _exact_ramp(self, base: float, rotary_dim: int) -> list:
        low, high = self._exact_range(base, rotary_dim)
        one, zero = _mp.ctx().mpf(1), _mp.ctx().mpf(0)
        return [min(max((i - low) / (high - low), zero), one) for i in range(rotary_dim // 2)]

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """``(theta_i / factor) * ramp_i + theta_i * (1 - ramp_i)``, exact, rounded once."""
        return _yarn_table(self, float(base), rotary_dim)

    def attention_factor(self, rotary_dim: int = 0, seq_len: int | None = None) -> float:
        """Explicit factor, else the exact mscale ratio (DeepSeek) or ``get_mscale(factor)``, rounded once."""
        if self.explicit_attention_factor is not None:
            return self.explicit_attention_factor
        if self.mscale and self.mscale_all_dim:
            ratio = _mscale_exact(self.factor, self.mscale) / _mscale_exact(self.factor, self.mscale_all_dim)
            return _mp.to_float(ratio)
        return yarn_get_mscale(self.factor)

    def to_hf(self) -> dict:
        out: dict[str, Any] = {
            "rope_type": "yarn",
            "factor": self.factor,
            "original_max_position_embeddings": self.original_max_position,
            "beta_fast": self.beta_fast,
            "beta_slow": self.beta_slow,
            "truncate": self.truncate,
        }
        for key, value in (
            ("mscale", self.mscale),
            ("mscale_all_dim", self.mscale_all_dim),
            ("attention_factor", self.explicit_attention_factor),
        ):
            if value is not None:
                out[key] = value
        return out


@_cached_table
def _yarn_table(scaling: YaRN, base: float, rotary_dim: int) -> list:
    theta = exact_default_theta(_ln(base), rotary_dim)
    factor = _mp.exact(scaling.factor)
    return [
        (t / factor) * w + t * (1 - w)
        for t, w in zip(theta, scaling._exact_ramp(base, rotary_dim), strict=True)
    ]


@dataclass(frozen=True)
class Llama3(Scaling):
    """Llama 3.1 scaling (Meta ``llama-models`` ``apply_scaling``; HF ``_compute_llama3_parameters``).

    With ``lambda_i = 2 pi / theta_i`` and ``L0 = original_max_position``: pairs with
    ``lambda_i < L0 / high_freq_factor`` keep ``theta_i``; pairs with ``lambda_i > L0 / low_freq_factor``
    get ``theta_i / factor``; in between (both edges inclusive, where the blend is continuous)
    ``s = (L0 / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor)`` and
    ``inv_freq_i = (1 - s) * theta_i / factor + s * theta_i``. Attention factor: 1.
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int

    def __post_init__(self) -> None:
        low = _positive(self.low_freq_factor, "low_freq_factor")
        high = _positive(self.high_freq_factor, "high_freq_factor")
        if not low < high:
            raise ValueError(
                "low_freq_factor must be < high_freq_factor, "
                f"got low_freq_factor={low}, high_freq_factor={high}"
            )
        set_fields(
            self,
            factor=_factor(self.factor),
            low_freq_factor=low,
            high_freq_factor=high,
            original_max_position=_context(self.original_max_position),
        )

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """The banded table; band membership is decided on the exact wavelengths ``2 pi / theta_i``."""
        return _llama3_table(self, float(base), rotary_dim)

    def to_hf(self) -> dict:
        return {
            "rope_type": "llama3",
            "factor": self.factor,
            "low_freq_factor": self.low_freq_factor,
            "high_freq_factor": self.high_freq_factor,
            "original_max_position_embeddings": self.original_max_position,
        }


@_cached_table
def _llama3_table(scaling: Llama3, base: float, rotary_dim: int) -> list:
    mp = _mp.ctx()
    l0 = mp.mpf(scaling.original_max_position)
    low, high = _mp.exact(scaling.low_freq_factor), _mp.exact(scaling.high_freq_factor)
    factor = _mp.exact(scaling.factor)
    out = []
    for theta in exact_default_theta(_ln(base), rotary_dim):
        wavelen = 2 * mp.pi / theta
        if wavelen < l0 / high:
            out.append(theta)
        elif wavelen > l0 / low:
            out.append(theta / factor)
        else:
            smooth = (l0 / wavelen - low) / (high - low)
            out.append((1 - smooth) * theta / factor + smooth * theta)
    return out


def _factor_list(values: Any, name: str) -> tuple[float, ...]:
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    out = tuple(check_real(v, f"{name}[{k}]") for k, v in enumerate(values))
    if not out:
        raise ValueError(f"{name} must not be empty")
    for k, v in enumerate(out):
        if not v > 0.0:
            raise ValueError(f"{name}[{k}] must be > 0, got {v}")
    return out


@dataclass(frozen=True, init=False, repr=False)
class LongRoPE(Scaling):
    """LongRoPE (Ding et al. 2024, arXiv 2402.13753), as Phi-3 ships it (HF ``_compute_longrope_parameters``).

    ``inv_freq_i = theta_i / ext_i`` with ``ext = long_factor`` when ``seq_len > original_max_position``
    and ``short_factor`` otherwise (also when ``seq_len`` is None); each list has ``d/2`` entries.
    The switch is by the *sequence length* (HF: ``max(position_ids) + 1``), never by the allocated
    context. Attention factor: the explicit ``attention_factor`` if given, else
    ``sqrt(1 + ln(factor) / ln(original_max_position))`` for ``factor > 1``, else 1 (``factor=None``
    counts as 1). HF derives a missing ``factor`` as ``max_position_embeddings / L0``; that needs the
    whole config, so :func:`rope_ref.hf_config.rope_config_from_hf` does it.
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_position: int
    factor: float | None
    explicit_attention_factor: float | None
    length_dependent: ClassVar[bool] = True

    def __init__(
        self,
        short_factor: Sequence[float],
        long_factor: Sequence[float],
        original_max_position: int,
        factor: float | None = None,
        attention_factor: float | None = None,
    ) -> None:
        short = _factor_list(short_factor, "short_factor")
        long = _factor_list(long_factor, "long_factor")
        if len(short) != len(long):
            raise ValueError(
                f"short_factor and long_factor must have the same length, got {len(short)} and {len(long)}"
            )
        set_fields(
            self,
            short_factor=short,
            long_factor=long,
            original_max_position=_context(original_max_position),
            factor=None if factor is None else _factor(factor),
            explicit_attention_factor=_optional_real(attention_factor, "attention_factor", positive=True),
        )

    def __repr__(self) -> str:
        parts = [
            f"short_factor=<{len(self.short_factor)} values>",
            f"long_factor=<{len(self.long_factor)} values>",
            f"original_max_position={self.original_max_position!r}",
        ]
        if self.factor is not None:
            parts.append(f"factor={self.factor!r}")
        if self.explicit_attention_factor is not None:
            parts.append(f"attention_factor={self.explicit_attention_factor!r}")
        return f"LongRoPE({', '.join(parts)})"

    def uses_long(self, seq_len: int | None) -> bool:
        """True when ``seq_len > original_max_position`` (HF's ``>`` rule)."""
        return seq_len is not None and seq_len > self.original_max_position

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        name = "long_factor" if self.uses_long(seq_len) else "short_factor"
        ext = np.asarray(getattr(self, name), dtype=np.float64)
        if ext.shape[0] != rotary_dim // 2:
            raise ValueError(
                f"{name} must have rotary_dim // 2 = {rotary_dim // 2} entries, got {ext.shape[0]}"
            )
        return _theta_over(float(base), rotary_dim, tuple(ext.tolist()))

    def attention_factor(self, rotary_dim: int = 0, seq_len: int | None = None) -> float:
        if self.explicit_attention_factor is not None:
            return self.explicit_attention_factor
        if self.factor is None or self.factor <= 1.0:
            return 1.0
        mp = _mp.ctx()
        return _mp.to_float(mp.sqrt(1 + _ln(self.factor) / mp.log(self.original_max_position)))

    def to_hf(self) -> dict:
        out: dict[str, Any] = {
            "rope_type": "longrope",
            "short_factor": list(self.short_factor),
            "long_factor": list(self.long_factor),
            "original_max_position_embeddings": self.original_max_position,
        }
        if self.factor is not None:
            out["factor"] = self.factor
        if self.explicit_attention_factor is not None:
            out["attention_factor"] = self.explicit_attention_factor
        return out


@dataclass(frozen=True)
class Proportional(Scaling):
    """Proportional RoPE (Gemma 4, LFM3 full-attention layers; HF ``_compute_proportional_rope_parameters``).

    The rotary width is the whole head (``d = head_dim``) and the exponent uses it:
    ``inv_freq_i = base^(-2i/d) / factor`` for the first ``n = int(partial_rotary_factor * d // 2)`` pairs
    and ``0`` for the remaining ``d/2 - n`` pairs, which therefore do not rotate (cos 1, sin 0). In the
    half layout the rotated channels are ``[0, n)`` and ``[d/2, d/2 + n)``, not the first ``2n`` channels
    of a partial RoPE (whose exponent would also be ``2i/(2n)``). ``n`` is HF's float floor division
    ``(partial_rotary_factor * d) // 2``. Attention factor: 1.
    """

    factor: float = 1.0
    partial_rotary_factor: float = 1.0
    zero_frequencies: ClassVar[bool] = True

    def __post_init__(self) -> None:
        fraction = check_real(self.partial_rotary_factor, "partial_rotary_factor")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"partial_rotary_factor must be in [0, 1], got {fraction}")
        set_fields(self, factor=_positive(self.factor, "factor"), partial_rotary_factor=fraction)

    def rotated_pairs(self, rotary_dim: int) -> int:
        """``n``, the number of pairs that rotate (the rest have frequency 0)."""
        return int((self.partial_rotary_factor * rotary_dim) // 2)

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """``theta_i / factor`` for ``i < n`` (exact quotient rounded once), then zeros."""
        n = self.rotated_pairs(rotary_dim)
        table = np.zeros(rotary_dim // 2, dtype=np.float64)
        table[:n] = _theta_over(float(base), rotary_dim, (self.factor,))[:n]
        return table

    def validate(self, base: float, rotary_dim: int) -> None:
        """The rotated pairs' frequencies must be finite and > 0 (the others are 0 by construction)."""
        rotated = self.inv_freq(base, rotary_dim, None)[: self.rotated_pairs(rotary_dim)]
        if not np.all(np.isfinite(rotated) & (rotated > 0)):
            raise ValueError(
                f"{self!r} gives no valid frequency table for rotary_dim={rotary_dim}, base={base}"
            )

    def to_hf(self) -> dict:
        return {
            "rope_type": "proportional",
            "factor": self.factor,
            "partial_rotary_factor": self.partial_rotary_factor,
        }


# ---------------------------------------------------------------------------------------------------
# HF rope_scaling dicts

#: rope types :func:`scaling_from_hf` understands (``"ntk"`` is rope-ref's name for :class:`NTKAware`).
ROPE_TYPES = ("default", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
ROPE_TYPES += ("proportional",)  # zero-frequency pairs past the rotated fraction (Gemma 4, LFM3)

# Keys any rope dict may carry besides its own parameters (HF v5 moves these into rope_parameters).
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
_KEYS = {
    "default": set(),
    "linear": {"factor"},
    "ntk": {"factor"},
    "dynamic": {"factor", "original_max_position_embeddings"},
    "yarn": {
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
    },
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "longrope": {
        "short_factor",
        "long_factor",
        "original_max_position_embeddings",
        "factor",
        "attention_factor",
    },
}
_KEYS["proportional"] = {"factor"}  # its partial_rotary_factor (a common key) is read too
#: Keys of a rope dict that do not change cos and sin: ``llama_4_scaling_beta`` scales the queries by
#: ``1 + beta ln(1 + floor(m / L0))`` after the rotation (Ministral 3, Mistral 4:
#: ``models/ministral3/modeling_ministral3.py`` ``get_llama_4_attn_scale``); ``max_position_embeddings``
#: repeats the config's own value (checked against it when both are given).
_NOT_ROTATION_KEYS = {"llama_4_scaling_beta", "max_position_embeddings"}


def _require(d: Mapping[str, Any], key: str, rope_type: str) -> Any:
    if d.get(key) is None:
        raise ValueError(f"rope_scaling of rope_type {rope_type!r} is missing the key {key!r}")
    return d[key]


def scaling_from_hf(
    d: Mapping[str, Any] | None, *, max_position_embeddings: int | None = None
) -> Scaling | None:
    """The scaling described by an HF ``rope_scaling`` / ``rope_parameters`` dict (or ``to_hf()`` output).

    The type comes from ``rope_type``, else the legacy ``type`` (HF ``standardize_rope_params``);
    ``"default"`` and ``None`` give ``None``. ``max_position_embeddings`` (the model config's) is used
    where HF uses it: as the dynamic-NTK original context (HF ignores the dict's
    ``original_max_position_embeddings`` for ``"dynamic"`` when the config is known), to derive a missing
    YaRN/LongRoPE ``factor`` as ``max_position_embeddings / original_max_position_embeddings``, and as
    the fallback original context of ``yarn``, ``llama3`` and ``longrope``. Unknown types, unknown keys
    and missing keys raise ``ValueError`` naming the key.
    """
    if d is None:
        return None
    if not isinstance(d, Mapping):
        raise TypeError(f"rope_scaling must be a dict or None, got {type(d).__name__}")
    rope_type = d.get("rope_type", d.get("type"))
    if rope_type is None:
        raise ValueError(f"rope_scaling has neither 'rope_type' nor 'type': {dict(d)!r:.200}")
    if not isinstance(rope_type, str):
        raise TypeError(f"rope_type must be a string, got {type(rope_type).__name__} {rope_type!r:.60}")
    if rope_type not in _KEYS:
        raise ValueError(f"rope_scaling has unknown rope_type {rope_type!r}; rope-ref knows {ROPE_TYPES}")
    unknown = sorted(set(d) - _KEYS[rope_type] - _COMMON_KEYS)
    unknown = sorted(set(unknown) - _NOT_ROTATION_KEYS)
    if unknown:
        raise ValueError(f"rope_scaling of rope_type {rope_type!r} has unknown keys {unknown}")
    if max_position_embeddings is not None:
        max_position_embeddings = check_int(max_position_embeddings, "max_position_embeddings", minimum=1)

    def original_max() -> int:
        value = d.get("original_max_position_embeddings")
        if value is None:
            value = max_position_embeddings
        if value is None:
            raise ValueError(
                f"rope_scaling of rope_type {rope_type!r} is missing the key "
                "'original_max_position_embeddings'"
            )
        return _context(value, "original_max_position_embeddings")

    repeated = d.get("max_position_embeddings")
    if repeated is not None and max_position_embeddings is not None and repeated != max_position_embeddings:
        raise ValueError(
            f"rope_scaling key 'max_position_embeddings' ({repeated}) differs from the config's "
            f"max_position_embeddings ({max_position_embeddings})"
        )
    if rope_type == "proportional":
        fraction = d.get("partial_rotary_factor")
        return Proportional(d.get("factor", 1.0), 1.0 if fraction is None else fraction)
    if rope_type == "default":
        return None
    if rope_type == "linear":
        return Linear(_require(d, "factor", rope_type))
    if rope_type == "ntk":
        return NTKAware(_require(d, "factor", rope_type))
    if rope_type == "dynamic":
        l0 = max_position_embeddings if max_position_embeddings is not None else original_max()
        return DynamicNTK(_require(d, "factor", rope_type), l0)
    if rope_type == "yarn":
        l0 = original_max()
        factor = d.get("factor")
        if factor is None:
            if max_position_embeddings is None:
                raise ValueError("rope_scaling of rope_type 'yarn' is missing the key 'factor'")
            factor = max_position_embeddings / l0
        return YaRN(
            factor,
            l0,
            # HF: ``get("beta_fast") or 32``; a falsy value means the default.
            beta_fast=d.get("beta_fast") or 32.0,
            beta_slow=d.get("beta_slow") or 1.0,
            mscale=d.get("mscale"),
            mscale_all_dim=d.get("mscale_all_dim"),
            attention_factor=d.get("attention_factor"),
            truncate=d.get("truncate", True),
        )
    if rope_type == "llama3":
        return Llama3(
            _require(d, "factor", rope_type),
            _require(d, "low_freq_factor", rope_type),
            _require(d, "high_freq_factor", rope_type),
            original_max(),
        )
    # longrope
    l0 = original_max()
    factor = d.get("factor")
    if factor is None and max_position_embeddings is not None:
        factor = max_position_embeddings / l0
    return LongRoPE(
        _require(d, "short_factor", rope_type),
        _require(d, "long_factor", rope_type),
        l0,
        factor=factor,
        attention_factor=d.get("attention_factor"),
    )
