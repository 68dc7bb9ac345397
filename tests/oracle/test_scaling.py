"""Long-context scalings: each checked against an independent derivation or a published value.

Published values: HF ``transformers`` ``tests/utils/test_modeling_rope_utils.py`` (commit 087e8002)
``EXPECTED_INV_FREQ`` snapshots (LlamaConfig defaults: head_dim 128, theta 1e4, max_pos 2048; 5
significant digits); YaRN arXiv 2309.00071 eq. 22 examples (s = 4 -> 1.1386, s = 40 -> 1.3689); the
gpt-oss YaRN correction range (low 8.09, high 17.40) quoted in vLLM PR #28244 / sglang PR #14270.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mp_reference import DPS, U64, _mp_theta, mp_default_freqs, mp_rotation, rotation_tol

import rope_ref
from rope_ref import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, RopeConfig, YaRN


@pytest.fixture(autouse=True, scope="module")
def _mpmath_40_digits():
    """40-digit mpmath for every test here, without leaking the setting into other modules."""
    with mpmath.workdps(40):
        yield


# --- HF published snapshots (64 values each; transformers tests/utils/test_modeling_rope_utils.py) ---
_SNAPSHOTS = json.loads(Path(__file__).with_name("hf_inv_freq_snapshots.json").read_text(encoding="utf-8"))
HF_DEFAULT = _SNAPSHOTS["HF_DEFAULT"]
HF_DYNAMIC_F10_SEQ16384 = _SNAPSHOTS["HF_DYNAMIC_F10_SEQ16384"]
HF_YARN_F10 = _SNAPSHOTS["HF_YARN_F10"]
HF_LLAMA3_F10 = _SNAPSHOTS["HF_LLAMA3_F10"]
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


# --------------------------------------------------------------------------------------------- validation


# --------------------------------------------------------------------------------------------- HF dicts


def mp_yarn_freqs(base: float, d: int, factor: float, l0: int, fast: float = 32.0, slow: float = 1.0) -> list:
    """HF ``_compute_yarn_parameters`` inverse frequencies (truncate=True), written out in mpmath."""
    with mpmath.workdps(DPS):

        def corr(rotations: float) -> mpmath.mpf:
            return d * mpmath.log(l0 / (rotations * 2 * mpmath.pi)) / (2 * mpmath.log(base))

        low = max(mpmath.floor(corr(fast)), 0)
        high = min(mpmath.ceil(corr(slow)), d - 1)
        assert low != high, "pick parameters with a non-degenerate ramp"
        out = []
        for i, theta in enumerate(mp_default_freqs(base, d)):
            ramp = min(max((i - low) / (high - low), 0), 1)
            out.append(theta / factor * ramp + theta * (1 - ramp))
        return out


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("factor", [0.5, 0.25, 1.5])
def test_yarn_explicit_attention_factor_scales_cos_sin_and_rotation(layout, factor):
    """``factor != 1`` (not ``> 1``): A = 0.5 halves cos and sin, so every pair's radius halves too."""
    cfg = RopeConfig(8, layout=layout, scaling=YaRN(4.0, 64, attention_factor=factor))
    freqs = mp_yarn_freqs(10000.0, 8, 4.0, 64)
    positions = np.array([0.0, 1.0, 7.0, 100.0, 2049.5])
    cos, sin = rope_ref.cos_sin(positions, cfg)
    for row, m in enumerate(positions):
        with mpmath.workdps(DPS):
            want_c = [float(factor * mpmath.cos(m * w)) for w in freqs]
            want_s = [float(factor * mpmath.sin(m * w)) for w in freqs]
        tol = rotation_tol(np.ones(1), m, freqs, factor)
        np.testing.assert_allclose(cos[row], want_c, rtol=0, atol=tol)
        np.testing.assert_allclose(sin[row], want_s, rtol=0, atol=tol)
    np.testing.assert_allclose(np.hypot(cos, sin), factor, rtol=8 * U64, atol=0)
    x = np.random.default_rng(11).standard_normal((positions.size, 8))
    y = rope_ref.apply(x, positions, cfg)
    y_complex = rope_ref.apply_complex(x, positions, cfg)
    for row, m in enumerate(positions):
        r = mp_rotation(m, freqs, factor, 8, layout)
        tol = rotation_tol(x[row], m, freqs, factor)
        np.testing.assert_allclose(y[row], r @ x[row], rtol=0, atol=tol)
        np.testing.assert_allclose(y_complex[row], r @ x[row], rtol=0, atol=tol)
        np.testing.assert_allclose(rope_ref.rotation_matrix(m, cfg), r, rtol=0, atol=tol / np.abs(x).max())
    # Position 0 is not the identity when A != 1: it scales by A.
    np.testing.assert_allclose(y[0], factor * x[0], rtol=2 * U64, atol=0)


def test_angles_use_max_position_plus_one_for_dynamic_ntk():
    d, base, factor, l0 = 16, 10000.0, 2.0, 64
    cfg = RopeConfig(d, layout="half", base=base, scaling=DynamicNTK(factor, l0))
    positions = np.array([3.0, 1000.0, 20.0])  # not sorted: the maximum is in the middle
    with mpmath.workdps(DPS):
        length = 1001  # HF dynamic_rope_update: max(position_ids) + 1
        scaled = base * (1 + mpmath.mpf(factor) * (length - l0) / l0) ** (mpmath.mpf(d) / (d - 2))
        freqs = mp_default_freqs(scaled, d)
        want = np.array([[float(m * w) for w in freqs] for m in positions])
    got = rope_ref.angles(positions, cfg)
    np.testing.assert_allclose(got, want, rtol=8 * U64, atol=0)
    # An explicit seq_len wins; seq_len <= L0 leaves the base alone.
    plain = np.array([[float(m * w) for w in mp_default_freqs(base, d)] for m in positions])
    np.testing.assert_allclose(rope_ref.angles(positions, cfg, seq_len=l0), plain, rtol=8 * U64, atol=0)


def test_angles_pick_longrope_long_factors_past_the_original_context():
    short, long = [1.0, 1.5, 2.0, 3.0], [4.0, 5.0, 6.0, 8.0]
    cfg = RopeConfig(8, layout="half", scaling=LongRoPE(short, long, 64))
    base_freqs = mp_default_freqs(10000.0, 8)
    for positions, ext in (([1.0, 63.0], short), ([1.0, 64.0, 2.0], long)):
        want = np.array([[float(m * w / e) for w, e in zip(base_freqs, ext, strict=True)] for m in positions])
        np.testing.assert_allclose(rope_ref.angles(positions, cfg), want, rtol=8 * U64, atol=0)


def test_yarn_zero_width_ramp_guard():
    """low == high == 0 here (L0 = 1: every correction index is negative). HF adds 0.001 to high, so pair
    0 keeps theta_0 and every other pair is divided by the factor; without the guard 0/0 gives NaN."""
    d, base, factor = 8, 10000.0, 4.0
    scaling = YaRN(factor, 1)
    assert scaling.correction_range(base, d) == (0.0, 0.0)  # the degenerate case, checked by hand:
    assert math.ceil(d * math.log(1 / (2 * math.pi)) / (2 * math.log(base))) == 0
    cfg = RopeConfig(d, layout="half", base=base, scaling=scaling)
    want = [float(w) / (1.0 if i == 0 else factor) for i, w in enumerate(mp_default_freqs(base, d))]
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), want, rtol=4 * U64, atol=0)


@pytest.mark.parametrize(("seq_len", "d"), [(128, 16), (1000, 64), (65, 4)])
def test_dynamic_ntk_scaled_base_closed_form(seq_len, d):
    """base' = base * (1 + factor (L - L0) / L0)^(d / (d - 2)) (HF _compute_dynamic_ntk_parameters)."""
    scaling = rope_ref.DynamicNTK(2.0, 64)
    with mpmath.workdps(40):
        growth = 1 + mpmath.mpf(2) * (seq_len - 64) / 64
        want = float(10000 * growth ** (mpmath.mpf(d) / (d - 2)))
    assert scaling.scaled_base(10000.0, d, seq_len) == pytest.approx(want, rel=2 * U64)
    assert scaling.scaled_base(10000.0, d, 64) == 10000.0
    assert scaling.scaled_base(10000.0, d, None) == 10000.0
    # The table is the default table of that base.
    got = rope_ref.inv_freq(RopeConfig(d, layout="half", scaling=scaling), seq_len)
    with mpmath.workdps(40):
        base_mp = 10000 * growth ** (mpmath.mpf(d) / (d - 2))
        want_t = [float(mpmath.power(base_mp, -mpmath.mpf(2 * i) / d)) for i in range(d // 2)]
    np.testing.assert_allclose(got, want_t, rtol=2 * U64, atol=0)


def test_ntk_scaled_base_closed_form_and_overflow():
    with mpmath.workdps(40):
        want = float(10000 * mpmath.mpf(8) ** (mpmath.mpf(128) / 126))
    assert rope_ref.NTKAware(8.0).scaled_base(10000.0, 128) == pytest.approx(want, rel=2 * U64)
    with pytest.raises(ValueError, match="overflows float64"):
        rope_ref.NTKAware(1e10).scaled_base(1e300, 4)  # 1e300 * 1e20
    with pytest.raises(ValueError, match="overflows float64"):
        rope_ref.DynamicNTK(1e300, 1).scaled_base(1e300, 4, 10)


def test_yarn_get_mscale_is_one_up_to_scale_one():
    from rope_ref.scaling import yarn_get_mscale

    for scale in (0.25, 1.0):
        assert yarn_get_mscale(scale) == 1.0
        assert yarn_get_mscale(scale, 7.0) == 1.0
    assert yarn_get_mscale(math.e, 0.5) == pytest.approx(1.05, rel=4 * U64)
    assert yarn_get_mscale(2.0) == pytest.approx(1 + 0.1 * math.log(2.0), rel=4 * U64)


def test_each_call_returns_a_fresh_table():
    cfg = RopeConfig(8, layout="half", scaling=rope_ref.Linear(2.0))
    first = rope_ref.inv_freq(cfg)
    first[:] = -1.0
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), [float(t) / 2 for t in _mp_theta(10000.0, 8)],
                               rtol=2 * U64, atol=0)


def test_yarn_high_index_is_clamped_to_d_minus_1():
    """base 100, L0 = 10**6, d = 8: corr(beta_slow = 1) = 8 ln(10**6 / 2 pi) / (2 ln 100) = 10.40, ceil 11,
    clamped to d - 1 = 7 (HF: min(high, dim - 1)); beta_fast = 10**6 puts low below 0, clamped to 0."""
    scaling = rope_ref.YaRN(4.0, 10**6, beta_fast=1e6, beta_slow=1.0)
    assert scaling.correction_range(100.0, 8) == (0.0, 7.0)
    np.testing.assert_allclose(scaling.ramp(100.0, 8), [0.0, 1 / 7, 2 / 7, 3 / 7], rtol=2 * U64, atol=0)


def test_dynamic_ntk_sees_length_one_for_position_zero_and_below():
    """HF's rule seq_len = max(position) + 1, never below 1: with L0 = 1, position 0 is within the
    original context (theta unchanged), and so are negative positions; position 1 is past it."""
    import rope_ref
    from rope_ref.frequencies import resolve_seq_len

    cfg = rope_ref.RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 1))
    assert resolve_seq_len(np.array([0.0]), cfg, None) == 1
    assert resolve_seq_len(np.array([-3.0, -7.5]), cfg, None) == 1
    assert resolve_seq_len(np.array([0.0, 1.0]), cfg, None) == 2
    x = np.ones(8)
    plain = rope_ref.RopeConfig(8, layout="half")
    np.testing.assert_array_equal(rope_ref.apply(x, -2.0, cfg), rope_ref.apply(x, -2.0, plain))


