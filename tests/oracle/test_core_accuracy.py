"""Accuracy of the oracle against 50-digit mpmath, and the published fixed points."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import configs

import rope_ref
from rope_ref import RopeConfig

EPS64 = np.finfo(np.float64).eps


@mpmath.workdps(50)
def mp_rotate(x: np.ndarray, m: float, cfg: RopeConfig):
    """y in 50-digit arithmetic from the same float64 inputs: x, m and the float64 theta_i.

    theta_i is the oracle's correctly rounded table entry, recomputed here as the float64 nearest the
    50-digit ``base^(-2i/d)`` (not read from the oracle); the angle is the exact ``m * theta_i``.
    """
    d = cfg.rotary_dim
    y = [mpmath.mpf(float(v)) for v in x]
    for i in range(d // 2):
        theta_i = float(mpmath.power(mpmath.mpf(cfg.base), mpmath.mpf(-2 * i) / d))
        angle = mpmath.mpf(m) * mpmath.mpf(theta_i)
        a, b = (i, i + d // 2) if cfg.layout == "half" else (2 * i, 2 * i + 1)
        c, s = mpmath.cos(angle), mpmath.sin(angle)
        xa, xb = mpmath.mpf(float(x[a])), mpmath.mpf(float(x[b]))
        y[a], y[b] = xa * c - xb * s, xb * c + xa * s
    return y


@settings(max_examples=40, deadline=None)
@given(
    cfg=configs(max_head_dim=16),
    x=st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), min_size=16, max_size=16),
    m=st.one_of(
        st.integers(-(2**40), 2**40),
        st.floats(-(2.0**40), 2.0**40, allow_nan=False, allow_infinity=False),
        st.sampled_from([2**40, -(2**40), 2**31, 2**24 + 1, 16_800_000, 131071, 2049, 257]),
    ),
)
def test_apply_error_is_within_the_stated_bound(cfg, x, m):
    # docs/spec.md "Accuracy": 4 eps64 |(x_a, x_b)| at every position (no |angle| term any more).
    xv = np.array(x[: cfg.head_dim])
    got = rope_ref.apply(xv, m, cfg)
    want = mp_rotate(xv, float(m), cfg)
    d = cfg.rotary_dim
    for i in range(d // 2):
        a, b = (i, i + d // 2) if cfg.layout == "half" else (2 * i, 2 * i + 1)
        pair = float(mpmath.sqrt(mpmath.mpf(float(xv[a])) ** 2 + mpmath.mpf(float(xv[b])) ** 2))
        bound = 4 * EPS64 * pair
        for idx in (a, b):
            err = abs(float(mpmath.mpf(float(got[idx])) - want[idx]))
            assert err <= bound, (idx, err, bound)


@pytest.mark.parametrize("base", [10000.0, 500000.0, 1e6, 1.5e6, 2.0, 10.0, 1234.5678])
@pytest.mark.parametrize("d", [6, 10, 64, 80, 96, 120, 128, 256, 512])
def test_inv_freq_is_correctly_rounded(base, d):
    # The exponent -2i/d is rational: mpmath evaluates base^(-2i/d) to 50 digits without rounding it;
    # the oracle's entry must be the float64 nearest to it (at most half an ulp away).
    got = rope_ref.inv_freq(RopeConfig(d, layout="half", base=base))
    with mpmath.workdps(50):
        for i in range(d // 2):
            exact = mpmath.power(mpmath.mpf(base), mpmath.mpf(-2 * i) / d)
            ulps = abs((mpmath.mpf(float(got[i])) - exact) / float(np.spacing(float(exact))))
            assert ulps <= 0.5, (i, float(ulps))


def test_published_inverse_frequencies_head_dim_512():
    # From the articles the project started from: head dim 512, base 10000, first 10 values.
    published = [1.0000, 0.9647, 0.9306, 0.8977, 0.8660, 0.8354, 0.8058, 0.7774, 0.7499, 0.7234]
    got = rope_ref.inv_freq(RopeConfig(512, layout="half"))[:10]
    np.testing.assert_allclose(got, published, atol=5e-5)


def test_published_cos_sin_head_dim_8():
    cos, sin = rope_ref.cos_sin([0, 1, 2], RopeConfig(8, layout="interleaved"))
    at1 = [(0.5403, 0.8415), (0.9950, 0.0998), (0.9999, 0.0100), (1.0000, 0.0010)]
    at2 = [(-0.4161, 0.9093), (0.9801, 0.1987), (0.9998, 0.0200), (1.0000, 0.0020)]
    np.testing.assert_allclose(np.stack([cos[1], sin[1]], -1), at1, atol=5e-5)
    np.testing.assert_allclose(np.stack([cos[2], sin[2]], -1), at2, atol=5e-5)
    assert np.array_equal(cos[0], np.ones(4)) and np.array_equal(sin[0], np.zeros(4))


def test_inv_freq_uses_rotary_dim_not_head_dim():
    # The exponent is over the rotated width (docs/known-bugs.md §3, pie-project PR #603).
    got = rope_ref.inv_freq(RopeConfig(256, layout="half", rotary_dim=64))
    want = [10000.0 ** (-2 * i / 64) for i in range(32)]
    np.testing.assert_allclose(got, want, rtol=1e-15)
    assert rope_ref.angles([3.0], RopeConfig(80, layout="half", rotary_dim=32)).shape == (1, 16)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_hand_checkable_quarter_turn(layout):
    # head_dim 2: one pair, theta_0 = 1, so position pi/2 is a quarter turn: (1, 0) -> (0, 1).
    cfg = RopeConfig(2, layout=layout)
    y = rope_ref.apply(np.array([1.0, 0.0]), np.pi / 2, cfg)
    np.testing.assert_allclose(y, [0.0, 1.0], atol=1e-15)
    y = rope_ref.apply(np.array([0.0, 1.0]), np.pi / 2, cfg)
    np.testing.assert_allclose(y, [-1.0, 0.0], atol=1e-15)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [128, 48, 2])
def test_apply_is_bitwise_the_elementwise_formula(layout, rotary_dim):
    # The oracle must not depend on whether NumPy fuses multiply-adds on this CPU: every output is
    # fl(fl(x_a c) - fl(x_b s)) and fl(fl(x_b c) + fl(x_a s)), non-finite inputs included.
    cfg = RopeConfig(128, layout=layout, rotary_dim=rotary_dim)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 300, 3, 128)) * np.exp(rng.uniform(-30, 30, (2, 300, 3, 128)))
    x[0, 7, 1, 0], x[1, 100, 2, 1], x[1, 299, 0, 3] = np.inf, np.nan, -np.inf
    pos = rng.uniform(-1e5, 1e5, (2, 300, 1))
    cos, sin = rope_ref.cos_sin(pos, cfg)
    a, b = rope_ref.pair_indices(cfg)
    want = x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        want[..., a] = x[..., a] * cos - x[..., b] * sin
        want[..., b] = x[..., b] * cos + x[..., a] * sin
        got = rope_ref.apply(x, pos, cfg)
    assert np.array_equal(got, want, equal_nan=True)
