"""cos and sin of the exact angle m * theta: within 1 ulp of mpmath, and almost always correctly rounded.

The reference is mpmath's cos/sin of the exact product ``mpf(m) * mpf(theta)`` at 300 bits, rounded
to float64. ``benchmarks/measure_trig_accuracy.py`` measures 10^6 pairs (figures in ``docs/spec.md``);
this file pins a smaller sample and the hard cases.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rope_ref
from rope_ref._arrays import POSITION_LIMIT
from rope_ref._exact_trig import ANGLE_LIMIT, cos_sin_of_product

MP = mpmath.MPContext()
MP.prec = 300
THETAS = np.concatenate(
    [rope_ref.default_inv_freq(b, d) for b in (1e4, 5e5, 1e6, 1e7, 12.5e6) for d in (64, 96, 128, 256)]
)


def _reference(m: float, theta: float) -> tuple:
    angle = MP.mpf(m) * MP.mpf(theta)
    return MP.cos(angle), MP.sin(angle)


def _ulp_error(got: float, exact) -> float:
    """|got - exact| in units of the ulp of the correctly rounded value."""
    rounded = float(exact)
    if rounded == 0.0:
        return 0.0 if got == 0.0 else float("inf")
    return float(abs(MP.mpf(got) - exact) / MP.mpf(np.spacing(abs(rounded))))


def _check(m: np.ndarray, theta: np.ndarray) -> tuple[int, int, float]:
    """(values, values not correctly rounded, worst error in ulp) of the kernel on these pairs."""
    cos, sin = cos_sin_of_product(m, theta)
    missed, worst = 0, 0.0
    for i in range(m.size):
        for got, exact in zip((cos[i], sin[i]), _reference(float(m[i]), float(theta[i])), strict=True):
            if got != float(exact):
                missed += 1
            worst = max(worst, _ulp_error(float(got), exact))
    return 2 * m.size, missed, worst


def _log_uniform_positions(rng: np.random.Generator, n: int) -> np.ndarray:
    m = np.exp(rng.uniform(0.0, np.log(float(POSITION_LIMIT)), n))
    m = np.where(rng.random(n) < 0.4, np.round(m), m)  # integers and fractions
    return np.where(rng.random(n) < 0.3, -m, m)  # negative positions (KV-cache shifts)


def test_random_sample_within_one_ulp_and_correctly_rounded():
    rng = np.random.default_rng(20261122)
    m = _log_uniform_positions(rng, 4000)
    theta = THETAS[rng.integers(0, THETAS.size, m.size)]
    values, missed, worst = _check(m, theta)
    assert worst < 1.0, worst
    assert missed <= values // 1000, (missed, values)  # the goal: >= 99.9% correctly rounded


def test_small_integer_positions_every_pair_of_a_real_table():
    theta = rope_ref.default_inv_freq(500000.0, 128)
    m = np.repeat(np.arange(0.0, 4097.0, 97.0), theta.size)
    values, missed, worst = _check(m, np.tile(theta, m.size // theta.size))
    assert worst < 1.0 and missed <= values // 1000


def _pi_half_convergents(limit: float) -> list[int]:
    """Numerators p of continued-fraction convergents p/q of pi/2: integers closest to multiples of pi/2."""
    x, h0, h1, k0, k1 = MP.pi / 2, 0, 1, 1, 0
    out = []
    while True:
        a = int(MP.floor(x))
        h0, h1 = h1, a * h1 + h0
        k0, k1 = k1, a * k1 + k0
        if h1 > limit:
            return out
        out.append(h1)
        x = 1 / (x - a)


def test_angles_nearest_to_multiples_of_half_pi():
    # Integer angles m * 1.0 closest to k pi / 2: cos or sin is tiny there, so the reduction must keep
    # the reduced argument's relative accuracy (absolute error far below 2**-100).
    m = np.array([float(p) for p in _pi_half_convergents(float(POSITION_LIMIT))] * 2)
    m[len(m) // 2 :] *= -1
    values, missed, worst = _check(m, np.ones_like(m))
    assert worst < 1.0 and missed == 0, (worst, missed)


@given(
    m=st.floats(-float(POSITION_LIMIT), float(POSITION_LIMIT), allow_nan=False),
    theta=st.sampled_from(THETAS.tolist()),
)
def test_any_position_and_table_entry(m, theta):
    values, missed, worst = _check(np.array([m]), np.array([theta]))
    assert worst < 1.0


def test_exact_special_values_and_symmetry():
    cos, sin = cos_sin_of_product(np.array([0.0, 1.0, -1.0]), 0.5)
    assert cos[0] == 1.0 and sin[0] == 0.0
    assert cos[1] == cos[2] and sin[1] == -sin[2]  # even and odd, bit for bit
    c, s = cos_sin_of_product(np.arange(6.0)[:, None], np.array([1.0, 0.25]))
    assert c.shape == s.shape == (6, 2)


def test_angle_limit_is_enforced_with_its_value():
    with pytest.raises(ValueError, match=r"2\*\*48"):
        cos_sin_of_product(np.array([2.0**40]), np.array([2.0**9]))
    cos_sin_of_product(np.array([2.0**40]), np.array([2.0**8]))  # exactly at the limit: accepted
    assert ANGLE_LIMIT == 2.0**48


def test_cos_sin_error_is_position_independent():
    # The old oracle took cos/sin of fl(m theta), off by up to |m theta| * 2**-53: at m = 2**31 that is
    # ~2e-7. The new one is within an ulp of the exact angle's cos/sin at every position.
    cfg = rope_ref.RopeConfig(128, layout="half", base=10000.0)
    m = 2.0**31 + 0.5
    cos, sin = rope_ref.cos_sin(np.array([m]), cfg)
    theta = rope_ref.inv_freq(cfg)
    for i in (0, 1, 17, 63):
        c, s = _reference(m, float(theta[i]))
        assert _ulp_error(float(cos[0, i]), c) < 1.0 and _ulp_error(float(sin[0, i]), s) < 1.0


@pytest.mark.parametrize(("m", "theta"), [(-0.0, 0.5), (0.0, -0.25), (-3.0, 0.0), (-0.0, 0.0), (0.0, 0.0)])
def test_zero_angle_keeps_the_sign_of_its_zero(m, theta):
    """sin(+-0) = +-0 (IEEE-754 and mpmath): the zero product m * theta keeps its sign, cos is 1."""
    cos, sin = cos_sin_of_product(np.array([m]), np.array([theta]))
    negative = (m < 0 or np.signbit(m)) != (theta < 0 or np.signbit(theta))
    assert cos[0] == 1.0 and sin[0] == 0.0 and bool(np.signbit(sin[0])) == negative
