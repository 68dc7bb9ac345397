"""Long-context scalings: each checked against an independent derivation or a published value.

Published values: HF ``transformers`` ``tests/utils/test_modeling_rope_utils.py`` (commit 087e8002)
``EXPECTED_INV_FREQ`` snapshots (LlamaConfig defaults: head_dim 128, theta 1e4, max_pos 2048; 5
significant digits); YaRN arXiv 2309.00071 eq. 22 examples (s = 4 -> 1.1386, s = 40 -> 1.3689); the
gpt-oss YaRN correction range (low 8.09, high 17.40) quoted in vLLM PR #28244 / sglang PR #14270.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rope_ref
from rope_ref import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, RopeConfig, YaRN, scaling_from_hf


@pytest.fixture(autouse=True, scope="module")
def _mpmath_40_digits():
    """40-digit mpmath for every test here, without leaking the setting into other modules."""
    with mpmath.workdps(40):
        yield


# --- HF published snapshots (64 values each; transformers tests/utils/test_modeling_rope_utils.py) ---
HF_DEFAULT = [
    1.0000e00, 8.6596e-01, 7.4989e-01, 6.4938e-01, 5.6234e-01, 4.8697e-01, 4.2170e-01, 3.6517e-01,
    3.1623e-01, 2.7384e-01, 2.3714e-01, 2.0535e-01, 1.7783e-01, 1.5399e-01, 1.3335e-01, 1.1548e-01,
    1.0000e-01, 8.6596e-02, 7.4989e-02, 6.4938e-02, 5.6234e-02, 4.8697e-02, 4.2170e-02, 3.6517e-02,
    3.1623e-02, 2.7384e-02, 2.3714e-02, 2.0535e-02, 1.7783e-02, 1.5399e-02, 1.3335e-02, 1.1548e-02,
    1.0000e-02, 8.6596e-03, 7.4989e-03, 6.4938e-03, 5.6234e-03, 4.8697e-03, 4.2170e-03, 3.6517e-03,
    3.1623e-03, 2.7384e-03, 2.3714e-03, 2.0535e-03, 1.7783e-03, 1.5399e-03, 1.3335e-03, 1.1548e-03,
    1.0000e-03, 8.6596e-04, 7.4989e-04, 6.4938e-04, 5.6234e-04, 4.8697e-04, 4.2170e-04, 3.6517e-04,
    3.1623e-04, 2.7384e-04, 2.3714e-04, 2.0535e-04, 1.7783e-04, 1.5399e-04, 1.3335e-04, 1.1548e-04,
]  # fmt: skip
HF_DYNAMIC_F10_SEQ16384 = [
    1.0000e00, 8.0931e-01, 6.5498e-01, 5.3008e-01, 4.2900e-01, 3.4720e-01, 2.8099e-01, 2.2741e-01,
    1.8404e-01, 1.4895e-01, 1.2055e-01, 9.7558e-02, 7.8955e-02, 6.3899e-02, 5.1714e-02, 4.1853e-02,
    3.3872e-02, 2.7413e-02, 2.2185e-02, 1.7955e-02, 1.4531e-02, 1.1760e-02, 9.5176e-03, 7.7027e-03,
    6.2339e-03, 5.0451e-03, 4.0831e-03, 3.3045e-03, 2.6744e-03, 2.1644e-03, 1.7517e-03, 1.4176e-03,
    1.1473e-03, 9.2852e-04, 7.5146e-04, 6.0817e-04, 4.9220e-04, 3.9834e-04, 3.2238e-04, 2.6091e-04,
    2.1115e-04, 1.7089e-04, 1.3830e-04, 1.1193e-04, 9.0585e-05, 7.3312e-05, 5.9332e-05, 4.8018e-05,
    3.8861e-05, 3.1451e-05, 2.5453e-05, 2.0600e-05, 1.6672e-05, 1.3492e-05, 1.0920e-05, 8.8374e-06,
    7.1522e-06, 5.7883e-06, 4.6845e-06, 3.7912e-06, 3.0683e-06, 2.4832e-06, 2.0097e-06, 1.6265e-06,
]  # fmt: skip
HF_YARN_F10 = [
    1.0000e00, 8.6596e-01, 7.4989e-01, 6.4938e-01, 5.6234e-01, 4.8697e-01, 4.2170e-01, 3.6517e-01,
    3.1623e-01, 2.7384e-01, 2.3714e-01, 2.0535e-01, 1.7783e-01, 1.5399e-01, 1.3335e-01, 1.1548e-01,
    1.0000e-01, 8.3479e-02, 6.9590e-02, 5.7925e-02, 4.8136e-02, 3.9931e-02, 3.3061e-02, 2.7315e-02,
    2.2515e-02, 1.8512e-02, 1.5177e-02, 1.2403e-02, 1.0101e-02, 8.1924e-03, 6.6143e-03, 5.3120e-03,
    4.2400e-03, 3.3599e-03, 2.6396e-03, 2.0520e-03, 1.5746e-03, 1.1882e-03, 8.7713e-04, 6.2810e-04,
    4.3007e-04, 2.7384e-04, 2.3714e-04, 2.0535e-04, 1.7783e-04, 1.5399e-04, 1.3335e-04, 1.1548e-04,
    1.0000e-04, 8.6596e-05, 7.4989e-05, 6.4938e-05, 5.6234e-05, 4.8697e-05, 4.2170e-05, 3.6517e-05,
    3.1623e-05, 2.7384e-05, 2.3714e-05, 2.0535e-05, 1.7783e-05, 1.5399e-05, 1.3335e-05, 1.1548e-05,
]  # fmt: skip
HF_LLAMA3_F10 = [
    1.0000e00, 8.6596e-01, 7.4989e-01, 6.4938e-01, 5.6234e-01, 4.8697e-01, 4.2170e-01, 3.6517e-01,
    3.1623e-01, 2.7384e-01, 2.3714e-01, 2.0535e-01, 1.7783e-01, 1.5399e-01, 1.3335e-01, 1.1548e-01,
    1.0000e-01, 8.6596e-02, 7.4989e-02, 6.4938e-02, 5.6234e-02, 4.8697e-02, 4.2170e-02, 3.6517e-02,
    3.1623e-02, 2.7384e-02, 2.3714e-02, 2.0535e-02, 1.7783e-02, 1.5399e-02, 1.3335e-02, 1.0730e-02,
    7.7785e-03, 5.6009e-03, 3.9991e-03, 2.8248e-03, 1.9675e-03, 1.3449e-03, 8.9549e-04, 5.7363e-04,
    3.4539e-04, 2.7384e-04, 2.3714e-04, 2.0535e-04, 1.7783e-04, 1.5399e-04, 1.3335e-04, 1.1548e-04,
    1.0000e-04, 8.6596e-05, 7.4989e-05, 6.4938e-05, 5.6234e-05, 4.8697e-05, 4.2170e-05, 3.6517e-05,
    3.1623e-05, 2.7384e-05, 2.3714e-05, 2.0535e-05, 1.7783e-05, 1.5399e-05, 1.3335e-05, 1.1548e-05,
]  # fmt: skip
# 5 significant digits: a rounded value is within 5e-5 relative of the true one (leading digit 1).
SNAPSHOT_RTOL = 6e-5


def _cfg(scaling, head_dim: int = 128, base: float = 10000.0, layout: str = "half", rotary_dim=None):
    return RopeConfig(head_dim, layout=layout, base=base, scaling=scaling, rotary_dim=rotary_dim)


def _theta_mp(base, d: int) -> list:
    """theta_i = base^(-2i/d) in 40-digit arithmetic."""
    return [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / d) for i in range(d // 2)]


def _rotate_loop(x: np.ndarray, m: float, freqs, factor: float, layout: str) -> np.ndarray:
    """Rotate one vector pair by pair in mpmath (half layout pairs i, i + d/2; interleaved 2i, 2i+1)."""
    d = len(freqs) * 2
    y = [mpmath.mpf(float(v)) for v in x]
    out = list(y)
    for i, f in enumerate(freqs):
        a, b = (i, i + d // 2) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = mpmath.cos(m * f) * factor, mpmath.sin(m * f) * factor
        out[a] = y[a] * c - y[b] * s
        out[b] = y[b] * c + y[a] * s
    return np.array([float(v) for v in out])


# --------------------------------------------------------------------------------------------- snapshots


def test_default_matches_hf_snapshot():
    np.testing.assert_allclose(rope_ref.inv_freq(_cfg(None)), HF_DEFAULT, rtol=SNAPSHOT_RTOL)


def test_dynamic_matches_hf_snapshot():
    cfg = _cfg(DynamicNTK(10.0, 2048))
    np.testing.assert_allclose(rope_ref.inv_freq(cfg, 16384), HF_DYNAMIC_F10_SEQ16384, rtol=SNAPSHOT_RTOL)


def test_yarn_matches_hf_snapshot():
    cfg = _cfg(YaRN(10.0, 2048, beta_fast=32, beta_slow=1))
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), HF_YARN_F10, rtol=SNAPSHOT_RTOL)


def test_llama3_matches_hf_snapshot():
    cfg = _cfg(Llama3(10.0, 1.0, 4.0, 2048))
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), HF_LLAMA3_F10, rtol=SNAPSHOT_RTOL)


# --------------------------------------------------------------------------------------------- linear


@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0, 10.0, 3.7])
def test_linear_inv_freq_is_theta_over_factor(factor):
    expected = [float(t / factor) for t in _theta_mp(10000, 64)]
    np.testing.assert_allclose(rope_ref.inv_freq(_cfg(Linear(factor), 64)), expected, rtol=1e-15)
    assert rope_ref.attention_factor(_cfg(Linear(factor), 64)) == 1.0


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@settings(max_examples=40, deadline=None)
@given(
    exponent=st.integers(1, 6),
    positions=st.lists(st.integers(-(2**20), 2**20), min_size=1, max_size=6),
    seed=st.integers(0, 2**31),
)
def test_linear_applied_once_power_of_two_is_bit_exact(layout, exponent, positions, seed):
    factor = float(2**exponent)
    x = np.random.default_rng(seed).standard_normal((len(positions), 32))
    m = np.array(positions, dtype=np.float64)
    scaled = rope_ref.apply(x, m, _cfg(Linear(factor), 32, layout=layout))
    plain = rope_ref.apply(x, m / factor, _cfg(None, 32, layout=layout))
    assert np.array_equal(scaled, plain)


@pytest.mark.parametrize("factor", [3.0, 10.0, 2.5])
def test_linear_applied_once_general_factor_within_angle_rounding(factor):
    x = np.random.default_rng(1).standard_normal((50, 64))
    m = np.arange(0, 50 * 997, 997, dtype=np.float64)
    scaled = rope_ref.apply(x, m, _cfg(Linear(factor), 64))
    plain = rope_ref.apply(x, m / factor, _cfg(None, 64))
    # The two compute m * (theta / f) and (m / f) * theta: two roundings each, so the angle may differ
    # by ~2 ulp; the output by |x| times that. Squaring the factor would be off by O(1).
    max_angle = m.max() / factor
    atol = 4 * np.finfo(np.float64).eps * max_angle * np.abs(x).max() * 2
    np.testing.assert_allclose(scaled, plain, rtol=0, atol=atol)
    twice = rope_ref.apply(x, m / factor, _cfg(Linear(factor), 64))
    assert np.abs(twice - scaled).max() > 1e-3  # applying the factor twice is visibly different


# --------------------------------------------------------------------------------------------- NTK-aware


@pytest.mark.parametrize("alpha,d,base", [(2.0, 64, 10000.0), (8.0, 128, 10000.0), (4.0, 4, 500000.0)])
def test_ntk_aware_closed_form(alpha, d, base):
    # base'^(-2i/d) = theta_i * alpha^(-2i/(d-2)): the exponent d/(d-2) folded into each pair.
    expected = [
        float(t * mpmath.power(alpha, -mpmath.mpf(2 * i) / (d - 2))) for i, t in enumerate(_theta_mp(base, d))
    ]
    np.testing.assert_allclose(rope_ref.inv_freq(_cfg(NTKAware(alpha), d, base)), expected, rtol=1e-13)
    assert rope_ref.attention_factor(_cfg(NTKAware(alpha), d, base)) == 1.0


def test_ntk_aware_needs_rotary_dim_4():
    with pytest.raises(ValueError, match="rotary_dim"):
        rope_ref.inv_freq(_cfg(NTKAware(2.0), 2))


# --------------------------------------------------------------------------------------------- dynamic NTK


def _hf_dynamic(base, d, factor, l0, seq_len):
    """HF _compute_dynamic_ntk_parameters, written as HF writes it, in 40-digit arithmetic."""
    L = max(seq_len, l0)
    new_base = mpmath.mpf(base) * ((mpmath.mpf(factor) * L / l0) - (factor - 1)) ** (mpmath.mpf(d) / (d - 2))
    return [float(t) for t in _theta_mp(new_base, d)]


@pytest.mark.parametrize("seq_len", [1, 2047, 2048, 2049, 4096, 16384, 10**6])
@pytest.mark.parametrize("factor", [1.0, 2.0, 10.0])
def test_dynamic_ntk_hf_formula(seq_len, factor):
    cfg = _cfg(DynamicNTK(factor, 2048))
    np.testing.assert_allclose(
        rope_ref.inv_freq(cfg, seq_len), _hf_dynamic(1e4, 128, factor, 2048, seq_len), rtol=1e-12
    )


def test_dynamic_ntk_equals_paper_form_only_for_factor_one():
    # YaRN §3.3: s = max(1, L/L0), base' = base * s^(d/(d-2)).
    paper = [float(t) for t in _theta_mp(mpmath.mpf(1e4) * mpmath.mpf(4) ** (mpmath.mpf(64) / 62), 64)]
    np.testing.assert_allclose(rope_ref.inv_freq(_cfg(DynamicNTK(1.0, 1000), 64), 4000), paper, rtol=1e-12)
    assert not np.allclose(rope_ref.inv_freq(_cfg(DynamicNTK(2.0, 1000), 64), 4000), paper, rtol=1e-3)


def test_dynamic_ntk_only_grows_past_original_context():
    cfg = _cfg(DynamicNTK(4.0, 1024), 64)
    default = rope_ref.inv_freq(_cfg(None, 64))
    for seq_len in (None, 1, 512, 1023, 1024):
        assert np.array_equal(rope_ref.inv_freq(cfg, seq_len), default), seq_len
    previous = default
    for seq_len in (1025, 1100, 2048, 10**5):
        current = rope_ref.inv_freq(cfg, seq_len)
        assert current[0] == 1.0 and np.all(current[1:] < previous[1:]), seq_len
        previous = current


def test_dynamic_ntk_is_stateless():
    # transformers #25306: a long call must not change later short calls.
    cfg = _cfg(DynamicNTK(10.0, 2048))
    x = np.random.default_rng(0).standard_normal((3, 128))
    fresh_short = rope_ref.apply(x, [5, 50, 500], cfg)
    rope_ref.apply(x, [10, 9000, 16383], cfg)
    rope_ref.inv_freq(cfg, 16384)
    assert np.array_equal(rope_ref.apply(x, [5, 50, 500], cfg), fresh_short)
    assert np.array_equal(fresh_short, rope_ref.apply(x, [5, 50, 500], _cfg(None)))


def test_dynamic_ntk_seq_len_defaults_to_max_position_plus_one():
    cfg = _cfg(DynamicNTK(10.0, 2048))
    x = np.random.default_rng(2).standard_normal((2, 128))
    pos = np.array([3, 4096])
    assert np.array_equal(rope_ref.apply(x, pos, cfg), rope_ref.apply(x, pos, cfg, seq_len=4097))
    assert not np.array_equal(rope_ref.apply(x, pos, cfg), rope_ref.apply(x, pos, cfg, seq_len=8192))
    cos, _ = rope_ref.cos_sin(pos, cfg)
    np.testing.assert_allclose(
        cos[1], np.cos(4096 * np.array(_hf_dynamic(1e4, 128, 10.0, 2048, 4097))), atol=1e-9
    )


# --------------------------------------------------------------------------------------------- YaRN


def _yarn_pair_by_pair(base, d, factor, l0, beta_fast, beta_slow):
    """Expected YaRN inv_freq found by counting rotations r_i = L0 theta_i / (2 pi) index by index.

    low = the last index with r_i >= beta_fast (the floor of the correction dim), high = the first index
    with r_i <= beta_slow (its ceil), searching past d/2 with theta_i = base^(-2i/d) continued, then
    clamped to [0, d - 1] as HF does; the weight is linear in the index between them (HF / jquesnelle).
    """
    theta = _theta_mp(base, d)
    rotations = [
        l0 * mpmath.power(base, -mpmath.mpf(2 * i) / d) / (2 * mpmath.pi) for i in range(-4 * d, 4 * d)
    ]
    low = max(i - 4 * d for i, r in enumerate(rotations) if r >= beta_fast)
    high = min(i - 4 * d for i, r in enumerate(rotations) if r <= beta_slow)
    low, high = max(low, 0), min(high, d - 1)
    out = []
    for i, t in enumerate(theta):
        w = min(max(mpmath.mpf(i - low) / (high - low), 0), 1)
        out.append(float(t / factor * w + t * (1 - w)))
    return out, low, high


@pytest.mark.parametrize(
    "base,d,factor,l0",
    [
        (1e4, 128, 10.0, 2048),
        (1e4, 64, 40.0, 4096),
        (1e6, 128, 4.0, 32768),
        (5e5, 128, 8.0, 8192),
        (1e4, 32, 16.0, 4096),
        (500.0, 16, 8.0, 32768),  # high clamps at d - 1 = 15, beyond the last pair (minimind #602)
    ],
)
def test_yarn_ramp_pair_by_pair(base, d, factor, l0):
    expected, low, high = _yarn_pair_by_pair(base, d, factor, l0, 32, 1)
    scaling = YaRN(factor, l0)
    assert scaling.correction_range(base, d) == (low, high)
    got = rope_ref.inv_freq(_cfg(scaling, d, base))
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    theta = [float(t) for t in _theta_mp(base, d)]
    assert np.all(got[: low + 1] == theta[: low + 1])  # r >= beta_fast: untouched (extrapolated)
    np.testing.assert_allclose(got[high:], np.array(theta[high:]) / factor, rtol=1e-15)  # fully interpolated


def test_yarn_ramp_is_index_linear_not_rotation_linear():
    # Paper eq. 18: gamma linear in r. HF: linear in the index. Inside the band they must differ.
    base, d, factor, l0 = 1e4, 128, 10.0, 2048
    got = rope_ref.inv_freq(_cfg(YaRN(factor, l0), d, base))
    theta = np.array([float(t) for t in _theta_mp(base, d)])
    r = l0 * theta / (2 * math.pi)
    gamma = np.clip((r - 1) / (32 - 1), 0, 1)
    paper = (1 - gamma) * theta / factor + gamma * theta
    assert np.abs(got / paper - 1).max() > 0.1


def test_yarn_truncate_false_matches_gpt_oss_range():
    # gpt-oss: theta 150000, head_dim 64, factor 32, L0 4096, truncate False; low 8.09, high 17.40.
    low, high = YaRN(32.0, 4096, truncate=False).correction_range(150000.0, 64)
    assert round(low, 2) == 8.09 and round(high, 2) == 17.40
    assert YaRN(32.0, 4096).correction_range(150000.0, 64) == (8.0, 18.0)


@pytest.mark.parametrize("factor,expected", [(4.0, 1.1386), (40.0, 1.3689)])
def test_yarn_default_attention_factor_published(factor, expected):
    got = rope_ref.attention_factor(_cfg(YaRN(factor, 4096)))
    assert round(got, 4) == expected
    assert got == pytest.approx(0.1 * math.log(factor) + 1.0, rel=1e-15)


def test_yarn_attention_factor_conventions():
    # Explicit value wins (vLLM PR #46280, mlx-lm PR #1507).
    assert YaRN(64.0, 4096, attention_factor=1.0).attention_factor(64, None) == 1.0
    assert (
        YaRN(64.0, 4096, mscale=1.0, mscale_all_dim=0.5, attention_factor=0.75).attention_factor(64, None)
        == 0.75
    )
    # mscale == mscale_all_dim gives exactly 1 (vLLM PR #48623: Ministral3 factor 16; DeepSeek-V2 0.707).
    assert YaRN(16.0, 4096, mscale=1.0, mscale_all_dim=1.0).attention_factor(64, None) == 1.0
    assert YaRN(40.0, 4096, mscale=0.707, mscale_all_dim=0.707).attention_factor(64, None) == 1.0
    # The ratio: (0.1*1*ln40 + 1) / (0.1*0.5*ln40 + 1).
    ratio = YaRN(40.0, 4096, mscale=1.0, mscale_all_dim=0.5).attention_factor(64, None)
    assert ratio == pytest.approx((1 + 0.1 * math.log(40)) / (1 + 0.05 * math.log(40)), rel=1e-15)
    # HF treats a zero (falsy) mscale_all_dim as absent: back to 0.1 ln f + 1 (mscale is ignored too).
    assert YaRN(40.0, 4096, mscale=0.5, mscale_all_dim=0.0).attention_factor(64, None) == pytest.approx(
        1 + 0.1 * math.log(40), rel=1e-15
    )
    assert YaRN(1.0, 4096).attention_factor(64, None) == 1.0


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_attention_factor_scales_cos_and_sin_once(layout):
    scaling = YaRN(16.0, 1024)
    af = 1 + 0.1 * math.log(16.0)
    cfg = RopeConfig(64, layout=layout, rotary_dim=48, scaling=scaling)
    x = np.random.default_rng(3).standard_normal(64)
    y0 = rope_ref.apply(x, 0, cfg)
    np.testing.assert_allclose(y0[:48], af * x[:48], rtol=1e-15)
    assert np.array_equal(y0[48:], x[48:])  # pass-through channels are not scaled
    freqs, _, _ = _yarn_pair_by_pair(10000.0, 48, 16.0, 1024, 32, 1)
    for m in (1, 777, 5000):
        expected = _rotate_loop(x[:48], m, [mpmath.mpf(f) for f in freqs], af, layout)
        np.testing.assert_allclose(rope_ref.apply(x, m, cfg)[:48], expected, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------- Llama 3


def _llama3_pair_by_pair(base, d, factor, low_ff, high_ff, l0):
    out, bands = [], []
    for t in _theta_mp(base, d):
        wavelen = 2 * mpmath.pi / t
        if wavelen * high_ff < l0:  # short wavelengths: untouched
            out.append(float(t))
            bands.append("high")
        elif wavelen * low_ff > l0:  # long wavelengths: fully interpolated
            out.append(float(t / factor))
            bands.append("low")
        else:
            s = (l0 / wavelen - low_ff) / (high_ff - low_ff)
            out.append(float((1 - s) * t / factor + s * t))
            bands.append("mid")
    return out, bands


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("factor", [8.0, 32.0])
def test_llama3_bands_pair_by_pair(d, factor):
    expected, bands = _llama3_pair_by_pair(5e5, d, factor, 1.0, 4.0, 8192)
    assert {"high", "mid", "low"} <= set(bands)
    np.testing.assert_allclose(
        rope_ref.inv_freq(_cfg(Llama3(factor, 1.0, 4.0, 8192), d, 5e5)), expected, rtol=1e-13
    )
    assert rope_ref.attention_factor(_cfg(Llama3(factor, 1.0, 4.0, 8192), d, 5e5)) == 1.0


@pytest.mark.parametrize("edge", ["high", "low"])
def test_llama3_pair_exactly_on_a_band_edge(edge):
    # Choose high_freq_factor (or low_freq_factor) so that L0 / factor equals pair k's wavelength exactly
    # in float64; the blend is continuous there, so the pair must come out as theta (or theta / f).
    d, base, l0, factor, k = 64, 5e5, 8192, 8.0, 12
    theta = np.power(base, -np.arange(0, d, 2, dtype=np.float64) / d)
    wavelen = 2 * math.pi / theta[k]
    edge_factor = l0 / wavelen
    for _ in range(8):
        if l0 / edge_factor == wavelen:
            break
        edge_factor = np.nextafter(edge_factor, np.inf if l0 / edge_factor > wavelen else -np.inf)
    assert l0 / edge_factor == wavelen
    if edge == "high":
        scaling, expected = Llama3(factor, edge_factor / 4, edge_factor, l0), theta[k]
    else:
        scaling, expected = Llama3(factor, edge_factor, edge_factor * 4, l0), theta[k] / factor
    got = rope_ref.inv_freq(_cfg(scaling, d, base))[k]
    assert got == pytest.approx(expected, rel=4e-16)


# --------------------------------------------------------------------------------------------- LongRoPE


SHORT = tuple(1.0 + 0.05 * i for i in range(16))
LONG = tuple(1.0 + 2.0 * i for i in range(16))


def test_longrope_short_and_long_factors():
    scaling = LongRoPE(SHORT, LONG, 4096, factor=32.0)
    cfg = _cfg(scaling, 32)
    theta = [float(t) for t in _theta_mp(10000, 32)]
    short = [t / s for t, s in zip(theta, SHORT, strict=True)]
    long = [t / s for t, s in zip(theta, LONG, strict=True)]
    for seq_len in (None, 1, 4095, 4096):
        np.testing.assert_allclose(rope_ref.inv_freq(cfg, seq_len), short, rtol=1e-15)
    for seq_len in (4097, 131072):
        np.testing.assert_allclose(rope_ref.inv_freq(cfg, seq_len), long, rtol=1e-15)


def test_longrope_switches_at_original_plus_one_via_positions():
    cfg = _cfg(LongRoPE(SHORT, LONG, 4096, factor=32.0), 32)
    x = np.random.default_rng(4).standard_normal((2, 32))
    short_only = rope_ref.apply(x, [0, 4095], cfg)  # seq_len = 4096 -> short
    assert np.array_equal(short_only, rope_ref.apply(x, [0, 4095], cfg, seq_len=1))
    long_too = rope_ref.apply(x, [0, 4096], cfg)  # seq_len = 4097 -> long
    assert np.array_equal(long_too, rope_ref.apply(x, [0, 4096], cfg, seq_len=4097))
    assert not np.array_equal(long_too, rope_ref.apply(x, [0, 4096], cfg, seq_len=4096))
    # Stateless: the long call did not change the next short one.
    assert np.array_equal(rope_ref.apply(x, [0, 4095], cfg), short_only)


def test_longrope_attention_factor():
    # Phi-3.5: factor 131072 / 4096 = 32, ln 32 / ln 4096 = 5/12, so sqrt(17/12).
    assert LongRoPE(SHORT, LONG, 4096, factor=32.0).attention_factor(32, None) == pytest.approx(
        math.sqrt(17 / 12), rel=1e-15
    )
    assert LongRoPE(SHORT, LONG, 4096, factor=32.0, attention_factor=0.5).attention_factor(32, None) == 0.5
    assert LongRoPE(SHORT, LONG, 4096).attention_factor(32, None) == 1.0
    assert LongRoPE(SHORT, LONG, 4096, factor=1.0).attention_factor(32, None) == 1.0


def test_longrope_wrong_length_names_the_list():
    # RopeConfig validates the scaling when it is built, so the mismatch surfaces there.
    with pytest.raises(ValueError, match="short_factor must have rotary_dim // 2 = 32 entries"):
        _cfg(LongRoPE(SHORT, LONG, 4096), 64)
    with pytest.raises(ValueError, match="long_factor"):
        LongRoPE(SHORT, LONG, 4096).inv_freq(10000.0, 64, 5000)
    with pytest.raises(ValueError, match="same length"):
        LongRoPE(SHORT, LONG[:-1], 4096)


# --------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda: Linear(0.5), "factor"),
        (lambda: NTKAware(0.9), "alpha"),
        (lambda: DynamicNTK(0.5, 2048), "factor"),
        (lambda: DynamicNTK(2.0, 0), "original_max_position"),
        (lambda: YaRN(0.99, 4096), "factor"),
        (lambda: YaRN(4.0, -1), "original_max_position"),
        (lambda: YaRN(4.0, 4096, beta_fast=1, beta_slow=32), "beta_fast"),
        (lambda: YaRN(4.0, 4096, attention_factor=0.0), "attention_factor"),
        (lambda: YaRN(4.0, 4096, mscale=-1.0), "mscale"),
        (lambda: Llama3(0.5, 1, 4, 8192), "factor"),
        (lambda: Llama3(8, 4, 4, 8192), "low_freq_factor"),
        (lambda: Llama3(8, 5, 4, 8192), "low_freq_factor"),
        (lambda: Llama3(8, 1, 4, 0), "original_max_position"),
        (lambda: LongRoPE(SHORT, LONG, 0), "original_max_position"),
        (lambda: LongRoPE(SHORT, LONG, 4096, factor=0.5), "factor"),
        (lambda: LongRoPE((1.0, -1.0), (1.0, 1.0), 4096), "short_factor"),
        (lambda: LongRoPE((), (), 4096), "short_factor"),
        (lambda: Linear(float("nan")), "factor"),
        (lambda: Linear(float("inf")), "factor"),
    ],
)
def test_bad_parameters_raise_naming_the_parameter(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_bad_parameter_types_raise_type_error():
    with pytest.raises(TypeError, match="factor"):
        Linear("2")
    with pytest.raises(TypeError, match="original_max_position"):
        YaRN(4.0, 4096.0)
    with pytest.raises(TypeError, match="truncate"):
        YaRN(4.0, 4096, truncate="yes")
    with pytest.raises(TypeError, match="short_factor"):
        LongRoPE("1,2", (1.0, 2.0), 4096)


# --------------------------------------------------------------------------------------------- HF dicts


ALL = [
    Linear(4.0),
    NTKAware(2.0),
    DynamicNTK(10.0, 2048),
    YaRN(4.0, 32768),
    YaRN(40.0, 4096, mscale=0.707, mscale_all_dim=0.707),
    YaRN(32.0, 4096, beta_fast=16, beta_slow=2, attention_factor=1.0, truncate=False),
    Llama3(8.0, 1.0, 4.0, 8192),
    LongRoPE(SHORT, LONG, 4096, factor=32.0),
    LongRoPE(SHORT, LONG, 4096, attention_factor=1.2),
]


@pytest.mark.parametrize("scaling", ALL, ids=repr)
def test_to_hf_round_trip_and_hashable(scaling):
    d = scaling.to_hf()
    assert isinstance(d["rope_type"], str)
    back = scaling_from_hf(d)
    assert back == scaling and hash(back) == hash(scaling)
    legacy = {("type" if k == "rope_type" else k): v for k, v in d.items()}
    assert scaling_from_hf(legacy) == scaling
    cfg = _cfg(scaling, 32)
    np.testing.assert_array_equal(rope_ref.inv_freq(_cfg(back, 32), 5000), rope_ref.inv_freq(cfg, 5000))


def test_plain_hf_dicts():
    assert scaling_from_hf(None) is None
    assert scaling_from_hf({"rope_type": "default"}) is None
    assert scaling_from_hf({"type": "linear", "factor": 2.0}) == Linear(2.0)
    # rope_type wins over the legacy key (HF standardize_rope_params uses setdefault).
    assert scaling_from_hf({"rope_type": "linear", "type": "dynamic", "factor": 2.0}) == Linear(2.0)
    assert scaling_from_hf(
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}
    ) == YaRN(4.0, 32768)
    # A missing beta (or a falsy one) means the default, as in HF (``get("beta_fast") or 32``).
    assert scaling_from_hf(
        {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 8, "beta_fast": None}
    ) == YaRN(4.0, 8)
    assert scaling_from_hf(
        {"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=4096
    ) == DynamicNTK(2.0, 4096)
    assert scaling_from_hf(
        {"rope_type": "yarn", "original_max_position_embeddings": 4096}, max_position_embeddings=16384
    ) == YaRN(4.0, 4096)


@pytest.mark.parametrize(
    "d,key",
    [
        ({"rope_type": "su", "factor": 2.0}, "rope_type"),
        ({"factor": 2.0}, "rope_type"),
        ({"rope_type": "linear"}, "factor"),
        ({"rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0}, "low_freq_factor"),
        ({"rope_type": "dynamic", "factor": 2.0}, "original_max_position_embeddings"),
        ({"rope_type": "yarn", "factor": 2.0}, "original_max_position_embeddings"),
        ({"rope_type": "yarn", "original_max_position_embeddings": 4096}, "factor"),
        (
            {
                "rope_type": "llama3",
                "factor": 8.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "low_freq_factor",
        ),
        (
            {"rope_type": "longrope", "long_factor": [1.0], "original_max_position_embeddings": 4096},
            "short_factor",
        ),
    ],
)
def test_bad_hf_dicts_name_the_key(d, key):
    with pytest.raises(ValueError, match=key):
        scaling_from_hf(d)
