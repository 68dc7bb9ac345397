"""The sampled score curve of rope_ref.decay (``score_curve(samples=...)``): its draws, its mean and its
spread, derived from the documented construction k = rho q + sqrt(1 - rho^2) eps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rope_ref import RopeConfig, decay
from rope_ref.decay import score_curve


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.6, 0.95, -0.8])
def test_score_curve_samples_use_unit_variance_keys(rho):
    """k = rho q + sqrt(1 - rho^2) eps: the score is linear in k, so for one seed (same q and eps draws)
    score(rho) = rho * score(rho=1) + sqrt(1 - rho^2) * score(rho=0) exactly up to rounding. Without the
    sqrt the noise term has weight 1 - rho^2 and Var(k_j) = rho^2 + (1 - rho^2)^2 != 1."""
    cfg = RopeConfig(16, layout="half", rotary_dim=12)
    r = np.array([0.0, 1.0, 5.0, 40.5])
    kwargs = {"samples": 64, "seed": 9}
    full = score_curve(r, cfg, correlation=1.0, **kwargs)
    noise = score_curve(r, cfg, correlation=0.0, **kwargs)
    got = score_curve(r, cfg, correlation=rho, **kwargs)
    scale = np.abs(full).max() + np.abs(noise).max()
    np.testing.assert_allclose(got, rho * full + math.sqrt(1 - rho * rho) * noise, rtol=0, atol=1e-13 * scale)
    # The noise term is far above the tolerance, so a wrong weight (0.91 instead of 0.95 at rho=0.3) shows.
    assert np.abs(noise).max() > 1e-6 * scale


def test_score_curve_sample_mean_is_within_five_standard_errors():
    """E[score(r)] = rho * (all-ones curve); the bound is 5 standard errors, derived not tuned.

    One sample's score is sum_i Re(h_i e^{i r theta_i}) with h_i = z_q conj(z_k) per pair; with
    E|z_q|^2 |z_k|^2 <= 8 for unit-variance keys, Var <= 8 n (n pairs), so SE <= sqrt(8 n / samples).
    """
    cfg = RopeConfig(32, layout="half")
    n, samples, rho = 16, 20000, 0.5
    r = np.arange(0.0, 48.0, 3.0)
    ones = [2 * sum(math.cos(x * 10000.0 ** (-2 * i / 32)) for i in range(n)) for x in r]
    got = score_curve(r, cfg, samples=samples, seed=5, correlation=rho)
    np.testing.assert_allclose(got, rho * np.array(ones), rtol=0, atol=5 * math.sqrt(8 * n / samples))


U64 = 2.0**-53


@pytest.mark.parametrize("rho", [-1.0, 1.0])
def test_correlation_plus_minus_one_is_accepted(rho):
    """rho = -1: k = -q exactly, so every h_i = -|q_pair|^2 and the score at r = 0 is minus q.q."""
    cfg = RopeConfig(8, layout="half")
    plus = decay.score_curve([0.0, 3.0], cfg, samples=16, seed=2, correlation=1.0)
    got = decay.score_curve([0.0, 3.0], cfg, samples=16, seed=2, correlation=rho)
    np.testing.assert_allclose(got, rho * plus, rtol=4 * U64, atol=0)


def test_pass_through_product_averages_row_dot_products():
    """Three rows with different pass-through parts: the mean of the row dot products, 14 / 3 + 0 here."""
    cfg = RopeConfig(8, layout="half", rotary_dim=4)
    q = np.zeros((3, 8))
    k = np.zeros((3, 8))
    q[:, 4:] = [[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    k[:, 4:] = [[4.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 5.0], [0.0, 0.0, 0.0, 5.0]]
    # Row dot products 6, 3 and 5: the mean is 14/3 at every distance (the rotated part is zero).
    got = decay.score_curve([0.0, 7.0, 100.0], cfg, q, k)
    np.testing.assert_allclose(got, 14.0 / 3.0, rtol=4 * U64, atol=0)


def _irwin_hall_by_hand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """12 uniforms added in order, minus 6 (the documented draw of rope_ref._fixed.irwin_hall)."""
    total = np.zeros(shape)
    for _ in range(12):
        total = total + rng.random(shape)
    return total - 6.0


def test_sampled_curve_draws_q_then_eps_per_chunk_of_2_16_rows_at_head_dim_8():
    """docs: chunk c draws its q rows, then its eps rows. At head_dim 8 the 32 MiB budget holds 65536 rows
    of 8 float64 arrays, so 65540 samples are two chunks (65536 + 4); the stream is consumed in that order."""
    cfg = RopeConfig(8, layout="half")
    samples, seed, rho = 65540, 7, 0.6
    rng = np.random.default_rng(seed)
    sums = np.zeros(4, dtype=np.complex128)
    for count in (65536, 4):
        q = _irwin_hall_by_hand(rng, (count, 8))
        k = rho * q + math.sqrt(1 - rho * rho) * _irwin_hall_by_hand(rng, (count, 8))
        zq, zk = q[:, :4] + 1j * q[:, 4:], k[:, :4] + 1j * k[:, 4:]
        sums += (zq * np.conj(zk)).sum(axis=0)
    h = sums / samples
    r = np.array([0.0, 2.0, 37.0])
    theta = 10000.0 ** (-np.arange(4) / 4)
    want = [sum((h[i] * complex(math.cos(x * theta[i]), math.sin(x * theta[i]))).real for i in range(4))
            for x in r]
    got = decay.score_curve(r, cfg, samples=samples, seed=seed, correlation=rho)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("samples", [1, 3])
def test_sampled_curve_defaults_to_seed_0_and_correlation_1(samples):
    """Defaults seed=0, correlation=1 (k = q): h_i = |z_q|^2 averaged over the draws, one sample included."""
    cfg = RopeConfig(8, layout="interleaved", rotary_dim=4)
    q = _irwin_hall_by_hand(np.random.default_rng(0), (samples, 8))
    zq = q[:, 0:4:2] + 1j * q[:, 1:4:2]
    h = (np.abs(zq) ** 2).mean(axis=0)
    through = (q[:, 4:] ** 2).sum(axis=1).mean()
    r = np.array([0.0, 3.0, -11.0])
    theta = 10000.0 ** (-np.arange(2) / 2)
    want = [sum(h[i] * math.cos(x * theta[i]) for i in range(2)) + through for x in r]
    got = decay.score_curve(r, cfg, samples=samples)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_sampled_curve_averages_the_pass_through_product():
    """k = q (correlation 1): the score at r = 0 is E|q|^2 = head_dim, 62 of its 64 from the channels
    that are not rotated. The mean over 4000 samples has a standard deviation of sqrt(2 * 64 / 4000)."""
    cfg = RopeConfig(64, layout="half", rotary_dim=2)
    curve = score_curve(np.array([0.0, 7.0]), cfg, samples=4000, seed=3, correlation=1.0)
    assert abs(curve[0] - 64.0) < 1.5
    # Only pair 0 rotates (theta_0 = 1): the score moves by at most its mean power, about 2.
    assert abs(curve[1] - curve[0]) < 5.0
    # Half the correlation halves every part, the pass-through included (expectation rho * head_dim).
    half = score_curve(np.array([0.0]), cfg, samples=4000, seed=3, correlation=0.5)
    assert abs(half[0] - 32.0) < 1.5
