"""Proportional RoPE (``rope_type: "proportional"``, Gemma 4 and LFM3 full-attention layers).

Expected values are derived here from the formula of transformers 5.23
``modeling_rope_utils._compute_proportional_rope_parameters`` with mpmath: over the whole head
``d``, ``n = int(partial_rotary_factor * d // 2)`` pairs rotate with ``base^(-2i/d) / factor``, the other
``d/2 - n`` pairs have frequency 0; the rotation is checked against an explicit half-layout rotation
(channel ``i`` paired with ``i + d/2``).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import rope_ref
from rope_ref import RopeConfig
from rope_ref.frequencies import cos_sin, inv_freq
from rope_ref.hf_config import rope_config_from_hf, rope_configs_from_hf
from rope_ref.scaling import Proportional, scaling_from_hf
from rope_ref.scaling_base import Scaling


def _mp_table(base: float, d: int, n: int, factor: float) -> list[float]:
    """theta_i / factor for i < n, then zeros: the float64 nearest each exact value (mpmath, 60 digits)."""
    with mpmath.workdps(60):
        rotated = [float(mpmath.mpf(base) ** (-mpmath.mpf(2 * i) / d) / mpmath.mpf(factor)) for i in range(n)]
    return rotated + [0.0] * (d // 2 - n)


@pytest.mark.parametrize(
    "d,fraction,factor,base,n",
    [
        (512, 0.25, 1.0, 1_000_000.0, 64),  # Gemma 4 full attention (global_head_dim 512)
        (128, 0.5, 1.0, 1_000_000.0, 32),  # LFM3 full attention
        (20, 0.35, 3.0, 10_000.0, 3),  # (0.35 * 20) // 2 = 3: floor, not round (3.5)
        (16, 1.0, 2.0, 500.0, 8),  # every pair rotates: linear scaling over the whole head
        (16, 0.0, 1.0, 500.0, 0),  # no pair rotates
    ],
)
def test_inverse_frequencies_match_the_formula(d, fraction, factor, base, n):
    cfg = RopeConfig(d, layout="half", base=base, scaling=Proportional(factor, fraction))
    got = inv_freq(cfg)
    want = _mp_table(base, d, n, factor)
    assert got.shape == (d // 2,)
    assert np.count_nonzero(got) == n
    np.testing.assert_array_max_ulp(got, np.array(want), maxulp=1)


def test_rotated_pairs_is_hf_float_floor_division():
    assert Proportional(1.0, 0.35).rotated_pairs(20) == 3
    assert Proportional(1.0, 0.25).rotated_pairs(512) == 64
    assert Proportional(1.0, 0.9).rotated_pairs(10) == 4  # 9.0 // 2


def _explicit_half_rotation(x: np.ndarray, m: float, freqs: list[float]) -> np.ndarray:
    """Rotate channel i with channel i + d/2 by m * freqs[i] (mpmath angles), half layout."""
    d = x.shape[-1]
    y = x.copy()
    for i, f in enumerate(freqs):
        with mpmath.workdps(40):
            angle = mpmath.mpf(m) * mpmath.mpf(f)
            c, s = float(mpmath.cos(angle)), float(mpmath.sin(angle))
        a, b = x[..., i], x[..., i + d // 2]
        y[..., i] = a * c - b * s
        y[..., i + d // 2] = b * c + a * s
    return y


def test_apply_rotates_only_the_first_pairs_of_the_whole_head():
    d, fraction, base = 16, 0.25, 10_000.0
    cfg = RopeConfig(d, layout="half", base=base, scaling=Proportional(1.0, fraction))
    x = np.random.default_rng(1).standard_normal((3, d))
    positions = np.array([0, 7, 4093])
    got = rope_ref.apply(x, positions, cfg)
    freqs = _mp_table(base, d, 2, 1.0)
    for row, m in enumerate(positions):
        np.testing.assert_allclose(
            got[row], _explicit_half_rotation(x[row], float(m), freqs), rtol=0, atol=1e-13
        )
    # the non-rotating pairs pass through exactly: channels 2..7 and 10..15
    keep = [c for c in range(d) if c % (d // 2) >= 2]
    assert np.array_equal(got[:, keep], x[:, keep])


def test_proportional_is_not_a_partial_rope():
    """A partial RoPE of width 2n rotates channels (i, i + n) with base^(-2i/2n); proportional does not."""
    d = 16
    prop = RopeConfig(d, layout="half", base=10_000.0, scaling=Proportional(1.0, 0.5))
    partial = RopeConfig(d, layout="half", rotary_dim=8, base=10_000.0)
    x = np.random.default_rng(2).standard_normal((1, d))
    assert not np.allclose(rope_ref.apply(x, [5], prop), rope_ref.apply(x, [5], partial))


def test_cos_sin_of_zero_frequency_pairs():
    cfg = RopeConfig(8, layout="half", base=100.0, scaling=Proportional(1.0, 0.5))
    cos, sin = cos_sin([3], cfg)
    assert np.array_equal(cos[0, 2:], np.ones(2)) and np.array_equal(sin[0, 2:], np.zeros(2))
    assert cos[0, 1] == pytest.approx(math.cos(3 * 100.0 ** (-2 / 8)), abs=1e-15)


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan")])
def test_fraction_outside_unit_interval_is_refused(fraction):
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        Proportional(1.0, fraction)


@pytest.mark.parametrize("factor", [0.0, -2.0])
def test_factor_not_positive_is_refused(factor):
    with pytest.raises(ValueError, match="factor"):
        Proportional(factor, 0.5)


def test_validate_refuses_a_rotated_pair_that_underflows():
    """base^(-2/4) / factor = 1e-150 / 1e308 rounds to 0: a rotated pair that does not rotate."""
    with pytest.raises(ValueError, match="no valid frequency table"):
        Proportional(1e308, 1.0).validate(1e300, 4)
    Proportional(1e308, 0.5).validate(1e300, 4)  # only pair 0 (theta 1 / 1e308) rotates: fine


def test_inv_freq_refuses_negative_frequencies_from_a_zero_frequency_scaling():
    class Negative(Scaling):
        zero_frequencies = True

        def inv_freq(self, base, rotary_dim, seq_len):
            return np.array([1.0] + [-0.5] * (rotary_dim // 2 - 1))

        def validate(self, base, rotary_dim):
            return None

    cfg = RopeConfig(8, layout="half", scaling=Negative())
    with pytest.raises(ValueError, match="negative or non-finite"):
        inv_freq(cfg)


def test_scaling_from_hf_reads_factor_and_fraction():
    got = scaling_from_hf({"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25})
    assert got == Proportional(1.0, 0.25)
    got = scaling_from_hf({"rope_type": "proportional", "factor": 8.0, "partial_rotary_factor": 0.75})
    assert (got.factor, got.partial_rotary_factor) == (8.0, 0.75)
    assert scaling_from_hf({"rope_type": "proportional"}) == Proportional(1.0, 1.0)  # HF: .get(..., 1.0)
    assert scaling_from_hf(got.to_hf()) == got
    with pytest.raises(ValueError, match="unknown keys"):
        scaling_from_hf({"rope_type": "proportional", "beta_fast": 32.0})


_LFM3 = {
    "model_type": "lfm3",
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "head_dim": 128,
    "max_position_embeddings": 128000,
    "layer_types": ["conv", "full_attention", "conv", "sliding_attention"],
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {
            "rope_type": "proportional",
            "rope_theta": 1000000.0,
            "partial_rotary_factor": 0.5,
        },
    },
}


def test_from_hf_lfm3_full_attention_is_proportional_over_the_whole_head():
    ropes = rope_configs_from_hf(_LFM3, layout="half")
    full, local = ropes["full_attention"], ropes["sliding_attention"]
    assert (full.head_dim, full.rotary_dim, full.base) == (128, 128, 1_000_000.0)
    assert full.scaling == Proportional(1.0, 0.5)
    assert (local.rotary_dim, local.base, local.scaling) == (128, 10_000.0, None)
    np.testing.assert_array_max_ulp(inv_freq(full), np.array(_mp_table(1e6, 128, 32, 1.0)), maxulp=1)


def test_from_hf_proportional_fraction_falls_back_to_the_top_level_key():
    cfg = {
        "model_type": "x",
        "head_dim": 64,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "partial_rotary_factor": 0.75,
        "rope_parameters": {"rope_type": "proportional", "rope_theta": 5000.0},
    }
    got = rope_config_from_hf(cfg, layout="half")
    assert (got.rotary_dim, got.scaling) == (64, Proportional(1.0, 0.75))
    del cfg["partial_rotary_factor"]
    assert rope_config_from_hf(cfg, layout="half").scaling == Proportional(1.0, 1.0)
