"""Paired parameters of the scalings get different values, so a swap or a wrong key cannot pass.

mscale != mscale_all_dim, beta_fast != beta_slow, low_freq_factor != high_freq_factor, short_factor !=
long_factor, original_max_position_embeddings != max_position_embeddings. Each expected table is the
documented formula (HF ``transformers`` ``modeling_rope_utils.py``, cited on each class) evaluated here
with mpmath at 40 digits, pair by pair, and rounded once; the oracle is correctly rounded, so the two
agree to an ulp.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from mp_reference import mp_default_freqs

import rope_ref
from rope_ref import DynamicNTK, Llama3, LongRoPE, RopeConfig, YaRN, scaling_from_hf

ULP = 2.0**-52


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.array(want, dtype=np.float64), rtol=ULP,
                               atol=0)


def _mp(value):
    return mpmath.mpf(value)


def _yarn_table(base, d, factor, l0, beta_fast, beta_slow, truncate):
    """HF ``_compute_yarn_parameters``: corr(r) = d ln(L0 / (2 pi r)) / (2 ln base), ramp linear in i."""
    with mpmath.workdps(40):
        def corr(r):
            return d * mpmath.log(_mp(l0) / (2 * mpmath.pi * _mp(r))) / (2 * mpmath.log(_mp(base)))

        low, high = corr(beta_fast), corr(beta_slow)
        if truncate:
            low, high = mpmath.floor(low), mpmath.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += _mp(0.001)
        out = []
        for i, theta in enumerate(mp_default_freqs(base, d)):
            ramp = min(max((i - low) / (high - low), 0), 1)
            out.append(float(theta / _mp(factor) * ramp + theta * (1 - ramp)))
        return out, (float(low), float(high))


def _mscale(scale, m):
    with mpmath.workdps(40):
        return 0.1 * _mp(m) * mpmath.log(_mp(scale)) + 1 if scale > 1 else _mp(1)


YARN = dict(base=10000.0, d=64, factor=16.0, l0=4096, beta_fast=24.0, beta_slow=2.0)


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn_table_uses_beta_fast_for_low_and_beta_slow_for_high(truncate):
    p = YARN
    betas = {"beta_fast": p["beta_fast"], "beta_slow": p["beta_slow"]}
    scaling = YaRN(p["factor"], p["l0"], **betas, truncate=truncate)
    want, (low, high) = _yarn_table(**p, truncate=truncate)
    _close(scaling.inv_freq(p["base"], p["d"], None), want)
    if truncate:  # corr(24) = 11.47..., corr(2) = 20.08...: floor and ceil
        assert scaling.correction_range(p["base"], p["d"]) == (11.0, 21.0) == (low, high)
    else:
        _close(scaling.correction_range(p["base"], p["d"]), [low, high])
    cfg = RopeConfig(p["d"], layout="half", base=p["base"], scaling=scaling)
    _close(rope_ref.inv_freq(cfg), want)


def test_yarn_clamps_high_to_d_minus_1_not_to_the_pair_count():
    # corr(1e4) = 2.4 and corr(1e-3) = 16.4 for d = 16, L0 = 10**6: the ramp runs from pair 2 to 15 (= d - 1,
    # past the 8 pairs), so its slope is 1/13, not the 1/5 of a clamp to d/2 - 1.
    scaling = YaRN(8.0, 10**6, beta_fast=1e4, beta_slow=1e-3)
    want, (low, high) = _yarn_table(10000.0, 16, 8.0, 10**6, 1e4, 1e-3, True)
    assert (low, high) == (2.0, 15.0) and scaling.correction_range(10000.0, 16)[1] == 15.0
    _close(scaling.inv_freq(10000.0, 16, None), want)


def test_yarn_equal_bounds_get_the_thousandth_guard():
    # beta_fast == beta_slow and truncate=False: low == high exactly, so high += 0.001 (the float 0.001).
    scaling = YaRN(4.0, 4096, beta_fast=3.0, beta_slow=3.0, truncate=False)
    want, (low, high) = _yarn_table(10000.0, 32, 4.0, 4096, 3.0, 3.0, False)
    assert high - low == pytest.approx(0.001, rel=1e-9)
    _close(scaling.inv_freq(10000.0, 32, None), want)
    assert 0.0 < scaling.ramp(10000.0, 32)[int(low) + 1] <= 1.0


@pytest.mark.parametrize("mscale,mscale_all_dim", [(0.9, 0.4), (0.4, 0.9)])
def test_yarn_attention_factor_is_mscale_over_mscale_all_dim(mscale, mscale_all_dim):
    scaling = YaRN(16.0, 4096, mscale=mscale, mscale_all_dim=mscale_all_dim)
    with mpmath.workdps(40):
        want = float(_mscale(16.0, mscale) / _mscale(16.0, mscale_all_dim))
    assert abs(scaling.attention_factor(64, None) - want) <= ULP * want
    assert (want > 1) == (mscale > mscale_all_dim)  # the two orders differ: a swap cannot pass


def test_yarn_attention_factor_with_only_one_mscale_is_the_default():
    want = float(_mscale(16.0, 1.0))  # 0.1 ln 16 + 1: neither mscale enters alone
    assert YaRN(16.0, 4096, mscale=0.9).attention_factor(64, None) == pytest.approx(want, rel=ULP)
    assert YaRN(16.0, 4096, mscale_all_dim=0.4).attention_factor(64, None) == pytest.approx(want, rel=ULP)
    assert rope_ref.scaling.yarn_get_mscale(16.0, 0.4) == pytest.approx(float(_mscale(16.0, 0.4)), rel=ULP)


def _llama3_table(base, d, factor, low, high, l0):
    """Meta ``apply_scaling`` / HF ``_compute_llama3_parameters``, with both band edges inclusive."""
    with mpmath.workdps(40):
        out = []
        for theta in mp_default_freqs(base, d):
            wavelen = 2 * mpmath.pi / theta
            if wavelen < _mp(l0) / high:
                out.append(float(theta))
            elif wavelen > _mp(l0) / low:
                out.append(float(theta / factor))
            else:
                s = (_mp(l0) / wavelen - low) / (_mp(high) - low)
                out.append(float((1 - s) * theta / factor + s * theta))
        return out


def test_llama3_bands_use_low_and_high_freq_factors_each_in_its_place():
    base, d, factor, low, high, l0 = 500000.0, 128, 8.0, 1.5, 6.0, 8192
    want = _llama3_table(base, d, factor, low, high, l0)
    got = Llama3(factor, low, high, l0).inv_freq(base, d, None)
    _close(got, want)
    theta = rope_ref.default_inv_freq(base, d)
    kept, divided = np.sum(got == theta), np.sum(got == theta / factor)
    assert kept > 0 and divided > 0 and kept + divided < d // 2  # all three bands are populated


def test_longrope_short_factor_up_to_the_original_context_and_long_after():
    short, long = [1.0, 1.5, 2.0, 3.0], [2.5, 4.0, 7.0, 11.0]
    scaling = LongRoPE(short, long, 4096, factor=32.0)
    theta = mp_default_freqs(10000.0, 8)
    with mpmath.workdps(40):
        want_short = [float(t / _mp(q)) for t, q in zip(theta, short, strict=True)]
        want_long = [float(t / _mp(q)) for t, q in zip(theta, long, strict=True)]
        factor = float(mpmath.sqrt(1 + mpmath.log(32) / mpmath.log(4096)))
    _close(scaling.inv_freq(10000.0, 8, 4096), want_short)
    _close(scaling.inv_freq(10000.0, 8, None), want_short)
    _close(scaling.inv_freq(10000.0, 8, 4097), want_long)
    assert scaling.attention_factor(8, 4097) == pytest.approx(factor, rel=ULP)
    assert scaling.attention_factor(8, None) == scaling.attention_factor(8, 1)  # not by the length


def test_dynamic_ntk_grows_by_one_plus_factor_times_the_excess():
    scaling = DynamicNTK(3.0, 100)
    d = 16
    with mpmath.workdps(40):
        growth = 1 + _mp(3) * (250 - 100) / 100  # 5.5, where factor 1 would give 2.5
        scaled = _mp(10000.0) * growth ** (_mp(d) / (d - 2))
        want = [float(mpmath.power(scaled, -_mp(2 * i) / d)) for i in range(d // 2)]
    _close(scaling.inv_freq(10000.0, d, 250), want)
    _close(scaling.inv_freq(10000.0, d, 100), rope_ref.default_inv_freq(10000.0, d))  # L = L0: unchanged
    assert not np.array_equal(scaling.inv_freq(10000.0, d, 101), rope_ref.default_inv_freq(10000.0, d))
    assert scaling.scaled_base(10000.0, d, 250) == pytest.approx(float(scaled), rel=ULP)


# --- each key of an HF rope dict reaches its own parameter ---------------------------------------------


def test_yarn_dict_keys_each_reach_their_parameter():
    d = {"rope_type": "yarn", "original_max_position_embeddings": 4096, "beta_fast": 24.0, "beta_slow": 2.0,
         "mscale": 0.9, "mscale_all_dim": 0.4}
    s = scaling_from_hf(d, max_position_embeddings=65536)
    assert (s.factor, s.original_max_position) == (16.0, 4096)  # factor = 65536 / 4096, not its inverse
    assert (s.beta_fast, s.beta_slow, s.mscale, s.mscale_all_dim) == (24.0, 2.0, 0.9, 0.4)
    assert s.truncate is True and s.explicit_attention_factor is None
    assert scaling_from_hf({**d, "factor": 8.0}, max_position_embeddings=65536).factor == 8.0  # explicit wins
    no_original = {k: v for k, v in d.items() if k != "original_max_position_embeddings"}
    fallback = scaling_from_hf({**no_original, "factor": 2.0}, max_position_embeddings=65536)
    assert fallback.original_max_position == 65536
    with pytest.raises(ValueError, match="'factor'"):
        scaling_from_hf(d)


def test_llama3_and_longrope_dict_keys_each_reach_their_parameter():
    s = scaling_from_hf({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.5,
                         "high_freq_factor": 6.0, "original_max_position_embeddings": 8192},
                        max_position_embeddings=131072)
    assert (s.low_freq_factor, s.high_freq_factor, s.original_max_position) == (1.5, 6.0, 8192)
    short, long = [1.0, 1.5], [2.5, 4.0]
    lr = scaling_from_hf({"rope_type": "longrope", "short_factor": short, "long_factor": long,
                          "original_max_position_embeddings": 4096}, max_position_embeddings=131072)
    assert (lr.short_factor, lr.long_factor) == (tuple(short), tuple(long))
    assert (lr.original_max_position, lr.factor) == (4096, 32.0)


def test_dynamic_dict_takes_the_config_context_over_the_dict_one():
    d = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 50}
    assert scaling_from_hf(d, max_position_embeddings=100).original_max_position == 100  # as HF
    assert scaling_from_hf(d).original_max_position == 50


def test_dict_type_keys_and_refusals():
    assert scaling_from_hf({"type": "linear", "factor": 3.0}) == rope_ref.Linear(3.0)  # legacy key
    p = scaling_from_hf({"rope_type": "proportional", "factor": 2.0, "partial_rotary_factor": 0.25})
    assert (p.factor, p.partial_rotary_factor) == (2.0, 0.25)
    with pytest.raises(ValueError, match="differs from the config's max_position_embeddings"):
        scaling_from_hf({"rope_type": "linear", "factor": 2.0, "max_position_embeddings": 64},
                        max_position_embeddings=128)
    with pytest.raises(ValueError, match=r"unknown keys \['beta_fast'\]"):
        scaling_from_hf({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                         "beta_fast": 32.0})


def test_proportional_rotates_the_fraction_of_pairs_with_the_whole_head_exponent():
    # d = 16, partial_rotary_factor 0.25 (not 0.5 or 1): n = int((0.25 * 16) // 2) = 2 pairs rotate.
    scaling = rope_ref.scaling.Proportional(factor=3.0, partial_rotary_factor=0.25)
    assert scaling.rotated_pairs(16) == 2
    with mpmath.workdps(40):
        want = [float(mpmath.power(10000, -mpmath.mpf(2 * i) / 16) / 3) for i in range(2)] + [0.0] * 6
    _close(scaling.inv_freq(10000.0, 16, None), want)
    assert rope_ref.scaling.Proportional(partial_rotary_factor=0.3).rotated_pairs(10) == 1  # (3.0) // 2
